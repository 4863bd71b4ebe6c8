"""A run's progress: the supervisor's snapshot, or the log's tail when that is stale; the raw log tail."""

from __future__ import annotations

import time
from typing import Any

from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.formats import from_whole_line, iso_time
from verl_async_dapo.logs.pace import pace_of, relaunch_cost
from verl_async_dapo.logs.progress import parse_progress
from verl_async_dapo.logs.snapshot import startup_breakdown
from verl_async_dapo.records import JobHandle, ProgressReport, StartupPhase
from verl_async_dapo.runs.supervision import heal, resolve_run
from verl_async_dapo.status import ACTIVE_RUN_STATUSES, AttemptStatus
from verl_async_dapo.store import AttemptRow, RunRow
from verl_async_dapo.targets.registry import get_target
from verl_async_dapo.watchman.view import stall_state

STALE_PROGRESS_SECONDS = 30.0
# The most a status call spends parsing the log's last MiB (issue 27: a crafted line froze `status` ~4.5 min); past
# it the tail's end is read and the answer says "parsing cut short".
STATUS_PARSE_BUDGET_S = 2.0


async def get_progress(ctx: AppContext, run_id: str | None = None) -> ProgressReport:
    """The run's status and its current attempt's progress (healing a run whose supervisor died)."""
    run = resolve_run(ctx, run_id)
    restarted = heal(ctx, run)
    attempts = ctx.store.attempts(run.id)
    progress = dict(run.progress or {})
    stale = run.progress_at is None or time.time() - run.progress_at > STALE_PROGRESS_SECONDS
    if attempts and progress.get("attempt") not in (None, attempts[-1].n):
        progress, stale = {}, True  # the snapshot is the previous attempt's: right after a relaunch
    if run.status in ACTIVE_RUN_STATUSES and stale and attempts and attempts[-1].job:
        fresh = await _progress_from_tail(attempts[-1].handle)
        progress = merge_tail_progress(progress, fresh) if fresh else progress
    current = attempts[-1] if attempts else None
    total = progress.get("total_steps") or run.spec.training_settings().train_steps
    step = progress.get("step")
    percent = round(100.0 * step / total, 1) if step is not None and total else None
    status = run.status
    since = progress.get("phase_since")
    active = status in ACTIVE_RUN_STATUSES
    # Right after a restart the attempt may have ended while no supervisor watched, and the new one has not recorded
    # it yet. Never show that as running (issue 20): the job's own files say whether it still runs.
    watched = restarted and status in ACTIVE_RUN_STATUSES and current is not None and current.status == AttemptStatus.RUNNING
    if watched and current is not None and current.job and await _job_ended(current.handle):
        status = "finishing"
    events = ctx.store.events(run.id, limit=10_000)  # read once: the stall and the steps lost both come from them
    stall = stall_state(events, current.n if current else None,
                        status in ACTIVE_RUN_STATUSES, time.time())  # fmt: skip
    return ProgressReport(**{
        "run_id": run.id, "status": status, "attempt": current.n if current else 0,
        "stalled": bool(stall and stall["stalled"]), "stalled_for_seconds": stall["stalled_for_seconds"] if stall else None,
        "step": step, "total_steps": total, "percent": percent, "eta_seconds": progress.get("eta_seconds"),
        "eta_basis": progress.get("eta_basis"), "seconds_per_step": progress.get("seconds_per_step"),
        "phase": progress.get("phase"),
        "phase_seconds": round(max(0.0, time.time() - since), 1) if active and since is not None else None,
        **_startup(progress, current, active),
        "lost_steps": sum(int(e.data.get("lost_steps") or 0) for e in events if e.kind == "steps_lost" and e.data),
        "feature_cost": attempt_cost(attempts, len(attempts) - 1, progress) if attempts else None,
        "features": list(current.config.effective) if current else [],
        "metrics": progress.get("metrics", {}), "metrics_step": progress.get("metrics_step"),
        "resumed_from_step": progress.get("resumed_from_step"), "resume_check": progress.get("resume_check"),
        "swanlab_url": run.swanlab_url, "parsing_cut_short": bool(progress.get("parsing_cut_short")),
        "as_of": iso_time(run.progress_at), "final_reason": run.final_reason, "suggestions": run.suggestions,
    })  # fmt: skip


def attempt_cost(attempts: list[AttemptRow], index: int, progress: dict[str, Any]) -> str | None:
    """What the memory features attempt ``attempts[index]`` added cost against the attempt before (issue 31): its
    pace from its own decision once it ended and was relaunched, else from the run's progress when that is its."""
    if index < 1:
        return None
    attempt, before = attempts[index], attempts[index - 1]
    mine = attempt.supervisor_decision.pace if attempt.supervisor_decision else None
    if mine is None and progress.get("attempt") == attempt.n:
        mine = pace_of(progress)
    return relaunch_cost(before.config.oom_appended, attempt.config.oom_appended,
                         before.supervisor_decision.pace if before.supervisor_decision else None, mine)  # fmt: skip


def _startup(progress: dict[str, Any], current: Any, active: bool) -> dict[str, Any]:
    """The attempt's start-up so far (issue 31): seconds per phase, the open one until now while the run lasts,
    until the attempt ended otherwise; and their total."""
    marks = progress.get("startup_marks") or []
    if not marks:
        return {"startup": [], "startup_seconds": None}
    end = time.time() if active or current is None or current.ended_at is None else current.ended_at
    phases = startup_breakdown(marks, progress.get("training_since"), end)
    return {"startup": [StartupPhase(phase=p, seconds=s) for p, s in phases],
            "startup_seconds": round(sum(s for _, s in phases), 1)}  # fmt: skip


async def log_tail(ctx: AppContext, run_id: str | None, max_bytes: int) -> tuple[RunRow, bytes | None]:
    """At most the last ``max_bytes`` of the run's current attempt log, from a whole line on (None before any
    attempt started)."""
    run = resolve_run(ctx, run_id)
    attempts = ctx.store.attempts(run.id)
    handle = attempts[-1].handle if attempts else None
    if handle is None:
        return run, None
    # One byte more than shown: it tells whether the window already starts right after a newline.
    return run, from_whole_line(await get_target(handle.target).read_tail(handle.log_path, max_bytes + 1), max_bytes)


async def _job_ended(handle: JobHandle) -> bool:
    try:
        return not (await get_target(handle.target).job_status(handle)).running
    except TargetError:  # unknown: say what the store says
        return False


def merge_tail_progress(stored: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """A tail re-read (the supervisor's snapshot is stale: a silent phase, e.g. vLLM compiling) knows no arrival
    times: keep the supervisor's phase start while the phase is the same, and its resume check."""
    merged = dict(fresh)
    if stored.get("phase") is not None and stored.get("phase") == fresh.get("phase"):
        merged["phase_since"] = stored.get("phase_since")
    merged["resume_check"] = stored.get("resume_check")
    merged["startup_marks"], merged["training_since"] = stored.get("startup_marks"), stored.get("training_since")
    return merged


async def _progress_from_tail(handle: JobHandle) -> dict[str, Any] | None:
    try:
        tail = await get_target(handle.target).read_tail(handle.log_path, 1 << 20)
    except TargetError:
        return None
    return parse_progress(tail.decode("utf-8", errors="replace"), budget_s=STATUS_PARSE_BUDGET_S).to_dict()
