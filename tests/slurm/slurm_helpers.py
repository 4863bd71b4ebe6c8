"""Small helpers of the SLURM tests (no __init__.py here: pytest puts this directory on sys.path)."""

from __future__ import annotations

import subprocess


def squeue_state(job_id: str) -> str:
    """The job's state as slurmctld remembers it (MinJobAge=600 in the test cluster)."""
    done = subprocess.run(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T"], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    return done.stdout.strip()
