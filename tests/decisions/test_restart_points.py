"""A supervisor started where an earlier one died between two steps of its own bookkeeping carries the run on and
keeps watching it until it ends (the gaps around a relaunch, found by the crash-safety test's random SIGKILLs), in
process: the first supervisor is cancelled once attempt 1 runs (its job goes on, as a detached one does), the store
is left as the dead one left it, and a second supervisor takes over.

Moved here from tests/supervisor/test_supervisor_restart_points.py; SIGKILLs of real supervisor processes stay in
tests/supervisor (test_supervisor_lifecycle.py, test_supervisor_finished_attempt.py, test_supervisor_watchdog.py)
and tests/reliability/test_crash_safety.py."""

from __future__ import annotations

import time

import anyio
import pytest

from harness.inprocess_runs import InProcessRuns, write_control
from verl_async_dapo.records import AttemptError
from verl_async_dapo.status import AttemptStatus


async def first_supervisor_dies_once_attempt_1_runs(inprocess: InProcessRuns, run_id: str) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(inprocess.supervise, run_id)
        with anyio.fail_after(30):
            while not ((a := inprocess.ctx.store.attempts(run_id)) and a[0].job is not None):
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert [a.status for a in inprocess.ctx.store.attempts(run_id)] == ["running"], inprocess.explain(run_id)


async def test_started_between_a_failed_attempt_and_the_next_it_relaunches_and_watches(inprocess: InProcessRuns) -> None:
    write_control(inprocess.tree, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": 0.05})
    run_id = await inprocess.start()
    await first_supervisor_dies_once_attempt_1_runs(inprocess, run_id)
    job = inprocess.target.jobs[inprocess.ctx.store.attempts(run_id)[0].job["job_dir"]]  # type: ignore[index]
    await anyio.to_thread.run_sync(job.thread.join, 30)  # unsupervised, it hits its OOM at step 3 and exits
    # What the dead supervisor had recorded when it died just before deciding on a relaunch.
    error = AttemptError(category="gpu_oom", kind="torch_cuda_oom", excerpt="torch.OutOfMemoryError: CUDA out of memory",
                         line=None)  # fmt: skip
    inprocess.ctx.store.end_attempt(run_id, 1, AttemptStatus.FAILED, exit_code=1, error=error)

    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    first, second = inprocess.ctx.store.attempts(run_id)
    assert first.supervisor_decision is not None and first.supervisor_decision.changes == ["+offload"]
    assert (second.status, second.exit_code, second.config.oom_appended) == ("succeeded", 0, ["offload"])
    assert second.reason == "gpu_oom: relaunching with +offload; resuming from step 2"
    assert [e.kind for e in inprocess.ctx.store.events(run_id)].count("oom_recovery") == 1


async def test_started_after_an_attempt_was_abandoned_it_launches_it_again_without_using_a_retry(
    inprocess: InProcessRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_control(inprocess.tree, {"step_seconds": 0.05})
    # Long enough to stop things mid-run; an abandoned attempt never ran, so relaunching it must not need a retry.
    monkeypatch.setenv("TRAIN_STEPS", "30")
    monkeypatch.setenv("MAX_OOM_RETRIES", "0")
    run_id = await inprocess.start()
    await first_supervisor_dies_once_attempt_1_runs(inprocess, run_id)
    inprocess.target.stop_all()  # the job is killed too (kill -9 of launcher and trainer: no rc)
    # What a killed supervisor leaves when it died right after abandoning the attempt. Written into the DB directly:
    # the store refuses running → abandoned (status.py: only an attempt still launching is abandoned), and the
    # state under test is the abandoned row, not how this one got there.
    with inprocess.ctx.store.transaction() as conn:
        conn.execute("UPDATE attempts SET status=?, ended_at=? WHERE run_id=? AND n=1",
                     (AttemptStatus.ABANDONED.value, time.time(), run_id))  # fmt: skip

    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    first, second = inprocess.ctx.store.attempts(run_id)
    assert first.status == "abandoned"
    assert (second.status, second.exit_code) == ("succeeded", 0)
    assert second.config == first.config
    assert second.reason == "supervisor restarted before the launch"
