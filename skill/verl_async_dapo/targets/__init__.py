"""Targets: where training runs (docker, host; later Ray Jobs)."""
