"""The SLURM target end to end through the product's CLI, on the real one-node SLURM with the verl stand-in: the
question flow's answers from flags, progress, stop = scancel, a time-limit kill classified as scheduler_kill, a bad
partition refused before anything is submitted, and the batch script's Ray branch. (The OOM recovery as a new job
goes through the MCP question flow: test_slurm_mcp.py.)

Every module that needs SLURM starts the time-limit run first (conftest's ``time_limit_run``); its test is the
last module (test_slurm_time_limit.py), so it waits for little.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import anyio
import pytest
from slurm_helpers import squeue_state
from sv_helpers import Cli

from harness.fixtures import unavailable
from verl_async_dapo.slurm_options import SlurmOptions
from verl_async_dapo.targets.slurm import SlurmTarget

pytestmark = pytest.mark.usefixtures("time_limit_run")


def test_stop_is_scancel(cli: Cli, slurm_tree: Path) -> None:
    (slurm_tree / "standin_control.json").write_text(json.dumps({"step_seconds": 0.5}), "utf-8")
    cli.set(VERL_HOME=slurm_tree, TRAIN_STEPS=400)
    listed = cli.json("containers")
    assert any(t["name"] == "slurm" and t["state"] == "available" for t in listed), listed
    started = cli.start("slurm")
    assert any("sbatch --test-only accepts the job" in line for line in started["preflight"])
    run_id = started["run_id"]
    row = cli.wait_step(run_id, 2)
    assert row.status == "running"
    job_id = cli.attempts(run_id)[-1].job["exec_id"]  # type: ignore[index]
    assert squeue_state(job_id) == "RUNNING"
    stopped = cli.json("stop", run_id)
    assert stopped["status"] in ("stopped", "stopping"), stopped
    status = cli.wait_final(run_id)
    assert status["status"] == "stopped", cli.explain(run_id)
    attempt = cli.attempts(run_id)[-1]
    assert attempt.status == "stopped" and attempt.error is None
    assert squeue_state(job_id) == "CANCELLED"  # by scancel, as SLURM records it


def test_an_unknown_partition_is_refused_before_submission(cli: Cli, slurm_tree: Path) -> None:
    cli.set(VERL_HOME=slurm_tree)
    proc = cli.run("start", "--container", "slurm", "--slurm-partition", "no-such-partition", "--json", timeout=90)
    assert proc.returncode != 0
    assert "Invalid partition name specified" in proc.stdout + proc.stderr  # sbatch --test-only's own words
    assert cli.store.runs(10) == []  # nothing was started, nothing submitted


async def test_ray_is_started_across_the_allocation_and_the_trainer_joins_it(slurm_partition: str,
                                                                             tmp_path: Path) -> None:  # fmt: skip
    """The multi-node branch of the batch script (head via srun, workers via srun, wait, RAY_ADDRESS, then the
    trainer), on this one node with slurm_start_ray=true and the real Ray of tests/ray/ensure_ray.sh."""
    ray_cli = os.environ.get("VERL_ASYNC_DAPO_TEST_RAY")
    if not ray_cli:
        unavailable("VERL_ASYNC_DAPO_TEST_RAY is not set (tests/run.sh sets it: tests/ray/ensure_ray.sh)")
    ray_bin = str(Path(ray_cli).parent)
    job_dir = tmp_path / "attempt-1"
    target = SlurmTarget(SlurmOptions(ray=True, extra_lines=("#SBATCH --cpus-per-task=2",)))
    probe = "import os, ray; ray.init(); print('JOINED', os.environ['RAY_ADDRESS'], int(ray.cluster_resources()['CPU']))"
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{ray_bin}:{old_path}"  # the submitting environment: the job's `ray` and python3
    try:
        handle = await target.start_detached([f"{ray_bin}/python3", "-c", probe], env={}, cwd=str(tmp_path),
                                             job_dir=str(job_dir), log_path=str(job_dir / "train.log"))  # fmt: skip
    finally:
        os.environ["PATH"] = old_path
    deadline = time.monotonic() + 150
    while (status := await target.job_status(handle)).running:
        assert time.monotonic() < deadline, (job_dir / "train.log").read_text()[-3000:]
        await anyio.sleep(1)
    log = (job_dir / "train.log").read_text()
    assert status.exit_code == 0, log[-3000:]
    order = ["[verl-async-dapo] started:", "[verl-async-dapo] starting the Ray head on",
             "[verl-async-dapo] Ray is up on 1 node(s)", "Connecting to existing Ray cluster", "JOINED"]  # fmt: skip
    positions = [log.find(mark) for mark in order]
    assert -1 not in positions and positions == sorted(positions), list(zip(order, positions, strict=True))
    assert "JOINED 127.0.0.1:6379 2" in log or re.search(r"JOINED [0-9.]+:6379 2\b", log)  # the allocation's 2 CPUs

