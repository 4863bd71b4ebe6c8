"""Benchmarks of verl-async-dapo against the original skill and reference tools (see bench/RESULTS.md)."""
