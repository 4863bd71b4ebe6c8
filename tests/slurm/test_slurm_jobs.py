"""SlurmTarget against the real one-node SLURM, in-process: what a batch job receives (argv and environment exactly,
no shell in between, secrets kept out of the scheduler's records), a pending job as "queued" (the watchman does not
call it a hang), scancel, and the preflight refusals in the scheduler's own words before anything is submitted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from harness.records import run_spec
from verl_async_dapo.context import AppContext
from verl_async_dapo.logs.progress import ProgressParser
from verl_async_dapo.plans.preflight import run_preflight
from verl_async_dapo.records import JobHandle
from verl_async_dapo.settings import settings_with_values
from verl_async_dapo.slurm_options import SlurmOptions
from verl_async_dapo.targets.slurm import SlurmTarget
from verl_async_dapo.targets.slurm.script import BATCH_SCRIPT
from verl_async_dapo.watchman.hooks import Watchman

pytestmark = pytest.mark.usefixtures("time_limit_run")  # started first, checked by test_slurm_time_limit.py
SECRET = "sk-test-0123456789abcdef"  # a SwanLab-key-shaped value: must reach the trainer, and nothing else
PROBE = "import json, os, sys; print('PROBE ' + json.dumps({'argv': sys.argv[1:], 'key': os.environ.get('SWANLAB_API_KEY'), 'plain': os.environ.get('PLAIN_VALUE'), 'cwd': os.getcwd()}))"
ODD_ARGS = ["a b", "$(touch /tmp/vad-slurm-pwned)", "'\";`id`", "--partition=x", ""]


async def _until(fn, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := await fn()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.3)
    return value


def _spool_environment(job_id: str) -> str:
    """slurmctld's own copy of the job's environment (StateSaveLocation/hash.N/job.ID/environment), read as root."""
    found = list(Path("/var/lib/vad-slurm/ctld").glob(f"hash.*/job.{job_id}/environment"))
    assert found, f"slurmctld keeps no environment file for job {job_id}"
    return found[0].read_bytes().decode("utf-8", "replace")


async def test_a_job_gets_the_argv_and_environment_exactly(slurm_partition: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("VAD_TEST_PASSWORD", SECRET)  # in the submitting process's environment: filtered out
    monkeypatch.setenv("VAD_TEST_VISIBLE", "seen-by-slurm")
    target = SlurmTarget(SlurmOptions(extra_lines=("#SBATCH --begin=now+3600",)))  # held: inspect it pending
    job_dir, work = tmp_path / "attempt-1", tmp_path / "work"
    work.mkdir()
    handle = await target.start_detached([sys.executable, "-c", PROBE, *ODD_ARGS],
                                         env={"SWANLAB_API_KEY": SECRET, "PLAIN_VALUE": "x y"}, cwd=str(work),
                                         job_dir=str(job_dir), log_path=str(job_dir / "train.log"))  # fmt: skip
    assert handle.exec_id and handle.exec_id.isdigit()
    try:
        status = await target.job_status(handle)
        assert (status.running, status.queued, status.scheduler_state) == (True, True, "PENDING")
        parser = ProgressParser()
        parser.feed((job_dir / "train.log").read_text())
        assert parser.snapshot().phase == "queued"
        spool = _spool_environment(handle.exec_id)
        assert "VAD_TEST_VISIBLE=seen-by-slurm" in spool and SECRET not in spool  # no secret in slurmctld's state
        assert (job_dir / "job.sbatch").read_text() == BATCH_SCRIPT  # the same fixed text for every job
        assert oct((job_dir / "env").stat().st_mode & 0o777) == "0o600" and oct(job_dir.stat().st_mode & 0o777) == "0o700"
        # A restarted supervisor submitting the same attempt again gets the same job, never a second one.
        again = await target.start_detached(["true"], env={}, cwd=str(work), job_dir=str(job_dir),
                                            log_path=str(job_dir / "train.log"))  # fmt: skip
        assert again.exec_id == handle.exec_id
        subprocess.run(["scontrol", "update", f"JobId={handle.exec_id}", "StartTime=now"], check=True, timeout=30)
        ended = await _until(lambda: _ended(target, handle), "the released job to end", 90)
        # Ended once the script wrote the trainer's rc, even while SLURM still runs the epilog (COMPLETING).
        assert ended.exit_code == 0 and ended.scheduler_state in ("COMPLETING", "COMPLETED"), ended
    finally:
        await target.stop_job(handle, grace_seconds=0)
    probe = next(line for line in (job_dir / "train.log").read_text().splitlines() if line.startswith("PROBE "))
    got = json.loads(probe.removeprefix("PROBE "))
    assert got == {"argv": ODD_ARGS, "key": SECRET, "plain": "x y", "cwd": str(work)}
    assert not Path("/tmp/vad-slurm-pwned").exists()
    assert not (job_dir / "env").exists()  # read by the script, then deleted


async def _ended(target: SlurmTarget, handle: JobHandle):  # type: ignore[no-untyped-def]
    status = await target.job_status(handle)
    return None if status.running else status


WINDOW_S = 1  # the stall window of the pending-job test


async def test_a_pending_job_is_queued_not_stalled_and_scancel_ends_it(slurm_partition: str, tmp_path: Path) -> None:
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path / "config",
                     env={"VAD_STALL_MIN_SECONDS": str(WINDOW_S), "VAD_STALL_STARTUP_SECONDS": str(WINDOW_S)})  # fmt: skip
    run_id = ctx.store.create_run(ctx.store.create_session(), "slurm", run_spec("slurm"))
    target = SlurmTarget(SlurmOptions(extra_lines=("#SBATCH --begin=now+3600",)))
    job_dir = tmp_path / "attempt-1"
    handle = await target.start_detached(["sleep", "600"], env={}, cwd=str(tmp_path), job_dir=str(job_dir),
                                         log_path=str(job_dir / "train.log"))  # fmt: skip
    watchman = Watchman(ctx, run_id, target, 10)
    watchman.attempt_started(1, handle)
    try:
        await anyio.sleep(1.2 * WINDOW_S)  # past the stall window
        await watchman._check_stall()  # silent past the window, but PENDING: a phase, not a hang
        assert "run_stalled" not in [e.kind for e in ctx.store.events(run_id)]
        assert (job_dir / "env").exists()  # pending: the job has not read its environment yet
        await target.stop_job(handle, grace_seconds=0)  # scancel
        status = await target.job_status(handle)
        assert (status.running, status.scheduler_state) == (False, "CANCELLED")
        assert not (job_dir / "env").exists()  # never started, so the target deletes what the script would have
        await anyio.sleep(1.2 * WINDOW_S)  # past the stall window
        await watchman._check_stall()  # the same silence of a job that is not queued is reported
        assert "run_stalled" in [e.kind for e in ctx.store.events(run_id)]
    finally:
        await target.stop_job(handle, grace_seconds=0)
        ctx.store.close()


async def test_preflight_refuses_in_the_schedulers_words_before_submitting(slurm_partition: str, slurm_tree: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # python3 with hydra, as users'
    before = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True, check=True,
                            timeout=30).stdout.split()  # fmt: skip
    base = {"verl_home": str(slurm_tree), "trainer_gpus": 1, "rollout_gpus": 1, "rollout_tp": 1}
    cases = {
        "slurm": ({"slurm_partition": "no-such-partition", "slurm_gpus_per_node": 0}, "Invalid partition name specified"),
        "slurm ": ({"slurm_gpus_per_node": 1}, "Requested node configuration is not available"),  # no GPU in it
        "slurm time limit": ({"slurm_time_limit": "5", "slurm_gpus_per_node": 0, "save_freq": 5},
                             "shorter than one checkpoint interval"),  # 300 s start-up + 5 x 60 s > 5 min
    }  # fmt: skip
    for name, (params, words) in cases.items():
        report = await run_preflight(SlurmTarget(), settings_with_values({**base, **params}), allow_no_gpus=True)
        errors = [c for c in report.errors if c.name == name.strip()]
        assert not report.ok and errors and words in errors[0].detail, report.lines()
    ok = await run_preflight(SlurmTarget(), settings_with_values({**base, "slurm_gpus_per_node": 0}), allow_no_gpus=True)
    assert ok.ok, [line for line in ok.lines() if not line.startswith("[ok]")]
    after = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True, check=True,
                           timeout=30).stdout.split()  # fmt: skip
    # --test-only submits nothing: no job id beyond the newest before. (Not `after == before`: finished jobs age out
    # of `squeue -t all` after the controller's MinJobAge, so an earlier test's job can vanish meanwhile.)
    newest = max((int(i) for i in before if i.isdigit()), default=0)
    assert [i for i in after if i.isdigit() and int(i) > newest] == [], (before, after)
