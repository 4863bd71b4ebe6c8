"""The SLURM target end to end through the product's CLI, on the real one-node SLURM with the verl stand-in: the
question flow's answers from flags, progress, a GPU OOM recovered as a new batch job that resumes from the
checkpoint, stop = scancel, a time-limit kill classified as scheduler_kill, and a bad partition refused before
anything is submitted.

The time-limit run is started first (module fixture): SLURM's smallest limit is one minute and slurmctld checks
limits every 30 s, so it ends 60-90 s later; the other tests run meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sv_helpers import Cli, checkpoint_dir, prepare_host_tree

from harness.fixtures import unavailable
from verl_async_dapo.slurm_options import SlurmOptions
from verl_async_dapo.targets.slurm import SlurmTarget

TIME_LIMIT_DEADLINE_S = 200.0  # 60 s limit + 30 s slurmctld's check period + KillWait, with headroom on 2 cores


def squeue_state(job_id: str) -> str:
    done = subprocess.run(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T"], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    return done.stdout.strip()


@pytest.fixture(scope="module")
def time_limit_run(slurm_partition: str, _host_tree_templates: Callable[[str], Path],
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str]]:  # fmt: skip
    base = tmp_path_factory.mktemp("slurm-time-limit")
    tree = base / "verl"
    shutil.copytree(_host_tree_templates("0.9.1"), tree)
    prepare_host_tree(tree, {"step_seconds": 2.0})  # 500 steps of 2 s: far past a one-minute limit
    cli = Cli.isolated(base / "vad-home")
    cli.set(VERL_HOME=tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=500, SAVE_FREQ=2)
    started = cli.start("slurm", "--slurm-gpus-per-node", "0", "--slurm-time-limit", "1",
                        "--slurm-startup-seconds", "5", "--slurm-step-seconds", "2")  # 5 + 2 x 2 s < 60 s: accepted
    yield cli, started["run_id"]
    try:
        cli.stop_all()
    finally:
        cli.store.close()


@pytest.fixture(autouse=True)
def _start_the_time_limit_run_first(time_limit_run: tuple[Cli, str]) -> None:
    """Every test here asks for it, so it starts before the first test and runs beside the others."""


def test_oom_is_recovered_as_a_new_job_resuming_from_the_checkpoint(cli: Cli, slurm_tree: Path) -> None:
    (slurm_tree / "standin_control.json").write_text(json.dumps(
        {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": 0.1}), "utf-8")  # fmt: skip
    cli.set(VERL_HOME=slurm_tree)
    listed = cli.json("containers")
    assert any(t["name"] == "slurm" and t["state"] == "available" for t in listed), listed
    started = cli.start("slurm")
    run_id = started["run_id"]
    assert started["target"] == "slurm" and any("sbatch --test-only accepts the job" in ln for ln in started["preflight"])

    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded", cli.explain(run_id)
    assert (status["attempt"], status["resumed_from_step"], status["step"]) == (2, 2, 6)
    assert status["features"][-1] == "offload"
    first, second = cli.errors(run_id)["attempts"]
    assert (first["category"], first["changes_next_attempt"]) == ("gpu_oom", ["+offload"])
    assert second["reason_started"].endswith("resuming from step 2")

    a1, a2 = cli.attempts(run_id)
    assert a1.job and a2.job
    job1, job2 = a1.job["exec_id"], a2.job["exec_id"]
    assert job1 != job2  # two batch jobs, as SLURM saw them:
    assert (squeue_state(job1), squeue_state(job2)) == ("FAILED", "COMPLETED")
    log1, log2 = Path(a1.job["log_path"]).read_text(), Path(a2.job["log_path"]).read_text()
    assert log1.startswith("[verl-async-dapo] queued: SLURM batch job")
    assert f"[verl-async-dapo] started: SLURM job {job1} on 1 node(s)" in log1 and "CUDA out of memory" in log1
    assert f"[verl-async-dapo] started: SLURM job {job2} on 1 node(s)" in log2 and "Setting global step to 2" in log2
    assert (Path(checkpoint_dir(a2)) / "global_step_2" / "actor").is_dir()


def test_stop_is_scancel(cli: Cli, slurm_tree: Path) -> None:
    (slurm_tree / "standin_control.json").write_text(json.dumps({"step_seconds": 0.5}), "utf-8")
    cli.set(VERL_HOME=slurm_tree, TRAIN_STEPS=400)
    run_id = cli.start("slurm")["run_id"]
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


def test_a_time_limit_kill_is_a_scheduler_kill(time_limit_run: tuple[Cli, str]) -> None:
    cli, run_id = time_limit_run
    status: dict[str, Any] = cli.wait_final(run_id, timeout=TIME_LIMIT_DEADLINE_S)
    assert status["status"] == "failed", cli.explain(run_id)
    assert status["step"] and status["step"] >= 2  # it trained (and checkpointed) until the limit
    (attempt,) = cli.errors(run_id)["attempts"]
    assert (attempt["category"], attempt["kind"]) == ("scheduler_kill", "time_limit"), attempt
    assert "DUE TO TIME LIMIT" in attempt["excerpt"]  # slurmstepd's own line
    row = cli.attempts(run_id)[0]
    assert row.job and squeue_state(row.job["exec_id"]) == "TIMEOUT"
    suggestions = cli.run_row(run_id).suggestions
    assert any("requeue from the last checkpoint" in s and "longer" in s for s in suggestions), suggestions
