"""Stop, list and resume runs."""

from __future__ import annotations

import time
from typing import Any

import anyio

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import TargetError, UserInputError
from verl_async_dapo.formats import iso_time
from verl_async_dapo.runs.supervision import heal, resolve_run, spawn_supervisor
from verl_async_dapo.status import ACTIVE_RUN_STATUSES, RUN_INITIAL, RUN_REOPENABLE, AttemptStatus, RunStatus
from verl_async_dapo.store import RunRow
from verl_async_dapo.supervisor.run_lock import supervisor_alive
from verl_async_dapo.targets.registry import get_target
from verl_async_dapo.wording import Say, Term


async def stop_training(ctx: AppContext, run_id: str | None = None, *, wait_seconds: float = 15.0) -> dict[str, Any]:
    run = resolve_run(ctx, run_id)
    if run.status not in ACTIVE_RUN_STATUSES:
        return {"run_id": run.id, "status": run.status, "message": f"run already {run.status}"}
    ctx.store.update_run(run.id, stop_requested=True)
    if not supervisor_alive(ctx, run.id):
        attempts = ctx.store.attempts(run.id)
        reason = "stopped on request"
        if attempts and attempts[-1].job:
            try:
                await get_target(run.target).stop_job(attempts[-1].handle)
            except TargetError as exc:  # e.g. its container was removed: the run must still be able to end
                reason = f"stopped on request; could not reach the job: {ctx.scrub(str(exc))}"
        if attempts and attempts[-1].status in (AttemptStatus.LAUNCHING, AttemptStatus.RUNNING):
            ctx.store.end_attempt(run.id, attempts[-1].n, AttemptStatus.STOPPED)
        ctx.store.end_run(run.id, RunStatus.STOPPED, final_reason=reason)
        ctx.store.add_event("info", "run_stopped", reason, run_id=run.id)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        row = ctx.store.run(run.id)
        if row is not None and row.status not in ACTIVE_RUN_STATUSES:
            return {"run_id": run.id, "status": row.status, "message": "stopped"}
        await anyio.sleep(0.3)
    return {"run_id": run.id, "status": "stopping", "message": "stop requested; the supervisor is ending the job"}


def run_to_stop(ctx: AppContext, run_id: str | None) -> RunRow:
    """The run a stop without an id means: the only active one. Several active: refused, naming them."""
    if run_id is not None:
        return resolve_run(ctx, run_id)
    active = [r for r in ctx.store.runs(200) if r.status in ACTIVE_RUN_STATUSES]
    if len(active) > 1:
        raise UserInputError(Say("{n} runs are active ({ids}); name the one to stop: {how}", n=len(active),
                                 ids=", ".join(f"{r.id} on {r.target}" for r in active),
                                 how=Term(mcp="stop_training with run_id", cli="`verl-async-dapo stop RUN_ID`")))  # fmt: skip
    return active[0] if active else resolve_run(ctx, None)


def list_runs(ctx: AppContext, limit: int = 20) -> list[dict[str, Any]]:
    rows = ctx.store.runs(limit)
    for row in rows:
        heal(ctx, row)
    now = time.time()
    # ISO 8601 (UTC) for people and tools alike; the duration runs to now while a run is active.
    return [{"run_id": r.id, "status": r.status, "target": r.target, "started_at": iso_time(r.created_at),
             "ended_at": iso_time(r.ended_at), "duration_seconds": round((r.ended_at or now) - r.created_at, 1),
             "attempts": len(ctx.store.attempts(r.id)), "swanlab_url": r.swanlab_url} for r in rows]  # fmt: skip


RESUMABLE_STATUSES = tuple(s.value for s in RunStatus if s in RUN_REOPENABLE)  # what Store.reopen_run takes back


# Failures whose cause is in the run's frozen answers: resuming them fails the same way (issue 28). What to
# change, and how: a new run with the new answer, or force when the cause was outside the answers.
_FUTILE: dict[str, tuple[str, Term]] = {
    ErrorCategory.TRACKING.value: (
        "SwanLab refused to start (key, host or network) and the run's SwanLab answer is frozen into it",
        Term(mcp="fix the key or host with configure_swanlab (or SWANLAB_* in the server's environment), then "
                 "start_training (a new run)", cli="fix SWANLAB_API_KEY / SWANLAB_HOST, then `verl-async-dapo start` "
                 "(a new run)")),
    ErrorCategory.MISSING_FILE.value: (
        "a model, data or checkpoint path did not exist in the target and the paths are frozen into the run",
        Term(mcp="start_training with the right model_path / train_file / val_file (a new run)",
             cli="`verl-async-dapo start` with the right MODEL_PATH / TRAIN_FILE / VAL_FILE (a new run)")),
    ErrorCategory.CONFIG_ERROR.value: (
        "verl refused the configuration and the run's parameters and overrides are frozen into it",
        Term(mcp="plan_training to see the launch, then start_training with corrected parameters / overrides "
                 "(a new run)", cli="`verl-async-dapo plan`, then `verl-async-dapo start` with corrected parameters "
                 "(a new run)")),
}
_FORCE = Term(mcp="resume_training with force=true", cli="`verl-async-dapo resume RUN_ID --force`")


def resume_run(ctx: AppContext, run_id: str | None = None, *, force: bool = False) -> dict[str, Any]:
    """Continue a failed or stopped run as a new attempt of the same run: the same frozen answers and
    parameters, resuming from its last checkpoint (its checkpoint directory and ``resume_mode=auto`` do not
    change). The supervisor launches the attempt; this returns at once.

    A run that failed for a reason its frozen answers cannot change (tracking, a missing file, a config error) is
    refused with what to change; ``force``: the user fixed the cause outside the answers (put the file in place,
    the SwanLab server is back), resume anyway."""
    run = resolve_run(ctx, run_id)
    if run.status in ACTIVE_RUN_STATUSES:
        raise UserInputError(f"run {run.id} is {run.status}: it is still going, there is nothing to resume")
    if run.status not in RESUMABLE_STATUSES:
        raise UserInputError(f"run {run.id} {run.status}: only a failed or stopped run can be resumed; "
                             "start a new run for more training")  # fmt: skip
    busy = [other for other in ctx.store.active_runs_on(run.target) if other != run.id]
    if busy:
        raise UserInputError(f"{run.target} is busy with run {busy[0]}; stop it first, then resume {run.id}")
    attempts = ctx.store.attempts(run.id)
    error = attempts[-1].attempt_error if attempts else None
    if run.status == RunStatus.FAILED and error is not None and error.category in _FUTILE and not force:
        why, change = _FUTILE[error.category]
        raise UserInputError(Say(
            "not resumed: run {run} failed as {cat} — {why}, so a resume would fail the same way. {change}; or, if "
            "the cause is fixed outside the run's answers (the file is in place now, the server is back), {force}",
            run=run.id, cat=error.category, why=why, change=change, force=_FORCE))  # fmt: skip
    # The event first: a supervisor that finds the run active but no event would judge the old attempt again.
    ctx.store.add_event("info", "run_resumed", f"resume requested after the run {run.status}", run_id=run.id,
                        data={"after_attempt": attempts[-1].n if attempts else 0})  # fmt: skip
    ctx.store.reopen_run(run.id)
    spawn_supervisor(ctx, run.id)
    next_n = attempts[-1].n + 1 if attempts else 1
    return {"run_id": run.id, "status": RUN_INITIAL.value, "attempt": next_n,
            "message": f"attempt {next_n} resumes from the last checkpoint of {run.id}; get_progress follows it"}  # fmt: skip
