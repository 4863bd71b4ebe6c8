"""RayTarget against a real Ray head on this machine (CPU only, loopback only): the verl stand-in as a Ray job
followed through the Jobs REST API, idempotent resubmission, stop, commands and file operations through short
probe jobs, and the cluster as a listed choice."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from ray_head import RayHead, free_ports
from ray_helpers import control, jobs_under, probe_jobs, standin_argv

from verl_async_dapo.exceptions import TargetError, TargetUnavailable
from verl_async_dapo.targets.base import TargetKind
from verl_async_dapo.targets.ray import RayTarget, submission_id_for
from verl_async_dapo.targets.ray.api import RayJobsClient
from verl_async_dapo.targets.registry import find_target_info, get_target, list_targets


class _AnswerLost(RayJobsClient):
    """The request is really sent; only the answer never arrives (what a client timeout looks like)."""

    def submit(self, *args: Any, **kwargs: Any) -> bool:
        super().submit(*args, **kwargs)
        raise TargetUnavailable("the Ray dashboard at ... is not reachable (timed out)")


def ray(name: str) -> RayTarget:
    target = get_target(name)
    assert isinstance(target, RayTarget)
    return target


async def test_a_standin_job_is_followed_from_its_ray_log(ray_target: str, host_verl_tree: Path) -> None:
    target = ray(ray_target)
    job_dir = str(host_verl_tree / ".verl-async-dapo" / "runs" / "run_follow" / "attempt-1")
    log_path = f"{job_dir}/train.log"
    control(host_verl_tree, step_seconds=0.4)
    secret = "sk-test-" + secrets.token_hex(12)
    handle = await target.start_detached(
        standin_argv(host_verl_tree, 4), env={"PYTHONUNBUFFERED": "1", "SWANLAB_API_KEY": secret},
        cwd=str(host_verl_tree), job_dir=job_dir, log_path=log_path,
    )  # fmt: skip
    assert handle.exec_id == submission_id_for(job_dir) and handle.target == ray_target

    chunks: list[bytes] = []
    seen_running_with_progress = False
    async for chunk in target.follow(handle, from_offset=0):
        chunks.append(chunk)
        if not seen_running_with_progress and b"step:1 " in b"".join(chunks):
            seen_running_with_progress = (await target.job_status(handle)).running
    followed = b"".join(chunks)
    text = followed.decode()
    # Progress arrived while the job still ran: a real tail-follow, not one read at the end.
    assert seen_running_with_progress, text[-2000:]
    assert "Training Progress" in text and "step:4 " in text and "Training from scratch" in text

    status = await target.job_status(handle)
    assert (status.running, status.exit_code) == (False, 0)
    # The job's log through the REST API: whole, and as a tail; also mirrored on the driver node.
    assert await target.read_range(log_path, 0, 1 << 20) == followed
    assert await target.read_tail(log_path, 300) == followed[-300:]
    assert await target.file_size(log_path) == len(followed)
    assert "step:4 " in Path(log_path).read_text()
    # The secret went to the job's environment only: not into the entrypoint Ray prints and shows.
    info = RayJobsClient(target.client.address).job(handle.exec_id or "")
    assert info is not None and info.entrypoint and secret not in info.entrypoint and secret not in text
    assert 'cd -- "$3"' in info.entrypoint and str(host_verl_tree) in info.entrypoint


async def test_resubmitting_the_same_job_dir_reattaches_instead_of_starting_twice(
    ray_target: str, ray_head: RayHead, host_verl_tree: Path
) -> None:
    target = ray(ray_target)
    run_dir = str(host_verl_tree / ".verl-async-dapo" / "runs" / "run_twice")
    job_dir, log_path = f"{run_dir}/attempt-1", f"{run_dir}/attempt-1/train.log"
    control(host_verl_tree, step_seconds=0.3)
    args = {"env": {}, "cwd": str(host_verl_tree), "job_dir": job_dir, "log_path": log_path}
    # Before submission the supervisor's "did it start?" marker is absent...
    assert await target.file_size(f"{job_dir}/pgid") is None
    first = await target.start_detached(standin_argv(host_verl_tree, 3), **args)
    # ...after it, present (answered from the Jobs API, so a supervisor that died right after submitting reattaches).
    assert await target.file_size(f"{job_dir}/pgid") is not None
    assert (await target.paths_exist([f"{job_dir}/pgid", log_path])) == {f"{job_dir}/pgid": True, log_path: True}
    again = await target.start_detached(standin_argv(host_verl_tree, 3), **args)  # a restarted supervisor
    assert again == first
    # The POST reaches Ray but its answer is lost (a timeout): the deterministic id finds the job, no failure.
    target._client = _AnswerLost(target.client.address)
    assert await target.start_detached(standin_argv(host_verl_tree, 3), **args) == first
    assert [j.submission_id for j in jobs_under(ray_head.address, run_dir)] == [first.exec_id]
    async for _ in target.follow(first, from_offset=0):
        pass
    assert (await target.job_status(first)).exit_code == 0
    assert len(jobs_under(ray_head.address, run_dir)) == 1


async def test_stop_job_ends_a_running_job(ray_target: str, host_verl_tree: Path) -> None:
    target = ray(ray_target)
    job_dir = str(host_verl_tree / ".verl-async-dapo" / "runs" / "run_stop" / "attempt-1")
    control(host_verl_tree, step_seconds=0.1, hang=True, fail_at_step=2)
    handle = await target.start_detached(
        standin_argv(host_verl_tree, 50), env={"PYTHONUNBUFFERED": "1"}, cwd=str(host_verl_tree), job_dir=job_dir,
        log_path=f"{job_dir}/train.log",
    )  # fmt: skip
    seen = b""
    async for chunk in target.follow(handle, from_offset=0):
        seen += chunk
        if b"step:1 " in seen:
            break
    assert (await target.job_status(handle)).running
    began = time.monotonic()
    await target.stop_job(handle, grace_seconds=5)
    status = await target.job_status(handle)
    assert (status.running, status.exit_code) == (False, 143)
    assert time.monotonic() - began < 20
    await target.stop_job(handle)  # stopping a finished job is a no-op


async def test_commands_and_files_go_through_short_jobs(ray_target: str, ray_head: RayHead, tmp_path: Path) -> None:
    """The round trip through Ray (every operation of the probe program itself: test_ray_config)."""
    target = ray(ray_target)
    probes_before = {j.submission_id for j in probe_jobs(ray_head.address)}  # a killed supervisor may leave some
    pwned = tmp_path / "pwned"
    nasty = [f"$(touch {pwned})", f"; touch {pwned}", "a'b\"c", "*", "--", "é"]
    secret = "tok-" + secrets.token_hex(12)
    script = (
        "import hashlib, json, os, sys; print(json.dumps(sys.argv[1:])); "
        "print(hashlib.sha256(os.environ['HF_TOKEN'].encode()).hexdigest()); print('to-stderr', file=sys.stderr); "
        "sys.exit(3)"
    )
    res = await target.run(["python3", "-c", script, *nasty], env={"HF_TOKEN": secret}, cwd=str(tmp_path))
    out_args, digest = res.stdout.splitlines()
    assert (res.exit_code, json.loads(out_args), res.stderr) == (3, nasty, "to-stderr\n")
    assert digest == hashlib.sha256(secret.encode()).hexdigest()  # the env reached the command
    assert not pwned.exists()
    assert (await target.run(["no-such-program-here"])).exit_code == 127

    path = tmp_path / "sub" / "data.bin"
    await target.write_file(str(path), b"0123456789", mode=0o640)
    assert path.read_bytes() == b"0123456789" and path.stat().st_mode & 0o777 == 0o640
    assert await target.read_tail(str(path), 4) == b"6789"
    found = await target.paths_exist([str(path), str(tmp_path / "nope"), str(tmp_path)])
    assert list(found.values()) == [True, False, True]
    with pytest.raises(TargetError, match="No such file"):
        await target.read_tail(str(tmp_path / "nope"), 10)
    # Short jobs delete themselves when done (else hundreds of preflight probes would bury the real jobs).
    assert {j.submission_id for j in probe_jobs(ray_head.address)} == probes_before


async def test_configured_clusters_are_offered_as_choices(
    ray_target: str, ray_head: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (closed_port,) = free_ports(1)  # nothing listens there: a cluster that is down
    config = tmp_path / "config" / "ray_clusters.json"
    config.write_text(json.dumps({"test": ray_head.address, "down": f"http://127.0.0.1:{closed_port}"}))
    listed = {c.name: c for c in await list_targets() if c.kind is TargetKind.RAY}
    assert listed["ray:test"].state == "available" and listed["ray:test"].gpus == "0 GPU(s) on 1 node(s)"
    assert "Ray 2." in (listed["ray:test"].note or "")
    assert listed["ray:down"].state == "unreachable" and "not reachable" in (listed["ray:down"].note or "")
    assert (await find_target_info("ray:test")).name == "ray:test"
    with pytest.raises(TargetUnavailable):
        await find_target_info("ray:down")
    with pytest.raises(TargetError, match="no Ray cluster named 'other'"):
        await find_target_info("ray:other")
    # The environment variable names the cluster "default".
    monkeypatch.setenv("VERL_ASYNC_DAPO_RAY_ADDRESS", ray_head.address)
    await ray("ray:default").ensure_running()
