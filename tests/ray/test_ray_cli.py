"""The whole tool on a Ray cluster, driven through the CLI with ``--container ray:test`` and an isolated state
dir: the real detached supervisor submits Ray jobs, follows their logs, recovers from an OOM by resubmitting
with offload and resuming from the checkpoint, stops on request, survives its own death without submitting
twice; preflight refuses a plan that needs more GPUs than the cluster has."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_head import RayHead
from ray_helpers import (
    attempts,
    cli,
    control,
    describe,
    jobs_under,
    run_dir,
    run_row,
    standin_tree,
    start,
    stop_active_runs,
    wait_final,
)

from harness.waiting import wait_until
from verl_async_dapo.targets.ray import submission_id_for
from verl_async_dapo.targets.ray.api import RayJobsClient


@pytest.fixture
def tree(ray_target: str, host_verl_tree: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in tree as VERL_HOME (ray_helpers.standin_tree). Any run still active afterwards is stopped,
    so a failing test leaves no Ray job running."""
    yield standin_tree(host_verl_tree, monkeypatch)
    stop_active_runs()


def test_preflight_refuses_more_gpus_than_the_cluster_has(
    ray_target: str, ray_head: RayHead, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("N_GPUS", "1")  # DAPO, colocated: exactly TRAINER_GPUS=1
    done = cli("start", "--container", ray_target, "--swanlab-mode", "disabled")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "preflight failed, nothing was started" in done.stderr
    (gpu_line,) = [line for line in done.stderr.splitlines() if line.startswith("[error] gpus:")]
    assert "the plan needs 1 GPU(s)" in gpu_line and "the Ray cluster has 0 GPU(s) on 1 node(s)" in gpu_line, gpu_line
    # The other checks really ran on the cluster (short jobs on its head node = this machine).
    assert "[ok] python3: Python 3." in done.stderr and "[ok] verl: verl 0.9.1" in done.stderr, done.stderr
    assert "[ok] hydra: hydra-core 1.3" in done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("[error]")] == [gpu_line]
    assert jobs_under(ray_head.address, str(tree)) == []  # nothing was submitted


def test_an_oom_is_resubmitted_with_offload_and_resumes_from_the_checkpoint(
    ray_target: str, ray_head: RayHead, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control(tree, oom_at_step=3, oom_unless=["offload"], step_seconds=0.1)
    password = "pa55-" + os.urandom(6).hex()  # a proxy credential: travels as a secret env var only
    # From the environment, as --help says: a password in --https-proxy would show in ps (refused since issue 20).
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:{password}@127.0.0.1:9")
    run_id = start(ray_target)
    assert wait_final(run_id) == "succeeded", describe(run_id)

    first, second = attempts(run_id)
    assert first.status == "failed" and first.error["category"] == "gpu_oom", describe(run_id)
    assert second.status == "succeeded" and "offload" in second.config.effective
    assert "resuming from step 2" in second.reason  # checkpoints at steps 1 and 2; the OOM hit step 3
    assert "actor_rollout_ref.actor.fsdp_config.param_offload: False → True" in second.override_diff
    for attempt in (first, second):
        assert attempt.job["exec_id"] == submission_id_for(attempt.job["job_dir"])

    client = RayJobsClient(ray_head.address)
    jobs = {j.submission_id: j for j in jobs_under(ray_head.address, run_dir(tree, run_id))}
    assert set(jobs) == {first.job["exec_id"], second.job["exec_id"]}
    assert (jobs[first.job["exec_id"]].status, jobs[second.job["exec_id"]].status) == ("FAILED", "SUCCEEDED")
    assert all(password not in j.entrypoint for j in jobs.values())  # secrets never in the entrypoint
    resumed_log = client.logs(second.job["exec_id"]).decode()
    assert "Resuming from" in resumed_log and "step:5 " in resumed_log and password not in resumed_log

    progress = run_row(run_id).progress or {}
    assert (progress.get("step"), progress.get("resumed_from_step"), progress.get("attempt")) == (5, 2, 2)
    # {VERL_HOME}/train.log on the driver node points at the current attempt's mirrored log.
    assert os.path.realpath(tree / "train.log") == second.job["log_path"]
    assert "step:5 " in (tree / "train.log").read_text()


def test_a_restarted_supervisor_reattaches_without_resubmitting_and_stop_ends_the_job(
    ray_target: str, ray_head: RayHead, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control(tree, hang=True, fail_at_step=6, step_seconds=0.4)
    monkeypatch.setenv("TRAIN_STEPS", "20")
    run_id = start(ray_target)
    client = RayJobsClient(ray_head.address)

    def job_at_step(step: int) -> str | None:
        rows = attempts(run_id)
        sid = rows[-1].job["exec_id"] if rows and rows[-1].status == "running" and rows[-1].job else None
        return sid if sid and f"step:{step} ".encode() in client.logs(sid) else None

    sid = wait_until(lambda: job_at_step(1), "attempt 1 to reach step 1", 60, interval=0.3)
    pid = run_row(run_id).supervisor_pid
    assert pid, describe(run_id)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"supervise" in cmdline and run_id.encode() in cmdline  # only ever our own supervisor
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not _alive(pid), "the supervisor to die", 10, interval=0.3)

    # Any read heals: a new supervisor starts and reattaches to the same Ray job...
    healed = cli("status", run_id, "--json")
    assert healed.returncode == 0, healed.stderr
    wait_until(lambda: run_row(run_id).supervisor_pid not in (None, pid), "a new supervisor", 30, interval=0.3)
    # ...and follows it: progress it parsed itself, past where the old one died.
    wait_until(lambda: ((run_row(run_id).progress or {}).get("step") or 0) >= 5, "progress from the new supervisor", 60, interval=0.3)
    assert [a.n for a in attempts(run_id)] == [1]
    assert [j.submission_id for j in jobs_under(ray_head.address, run_dir(tree, run_id))] == [sid]

    # Stop through the CLI: the new supervisor stops the Ray job (the stand-in hangs at step 6 until then).
    done = cli("stop", run_id, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["status"] == "stopped", done.stdout + done.stderr
    info = client.job(sid)
    assert info is not None and info.status == "STOPPED"
    assert run_row(run_id).status == "stopped" and attempts(run_id)[-1].status == "stopped", describe(run_id)
    assert len(jobs_under(ray_head.address, run_dir(tree, run_id))) == 1


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")
