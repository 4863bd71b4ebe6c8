"""A run's errors: the attempts' error records and the live log's non-fatal findings (check_errors)."""

from __future__ import annotations

import time
from typing import Any

from verl_async_dapo import policy
from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.logs.classify import CLASSIFY_WINDOW_BYTES, classify_tail, window_text
from verl_async_dapo.records import AttemptErrors, ErrorReport, LiveFinding
from verl_async_dapo.runs.progress import attempt_cost
from verl_async_dapo.runs.supervision import heal, resolve_run
from verl_async_dapo.status import ACTIVE_RUN_STATUSES
from verl_async_dapo.targets.registry import get_target
from verl_async_dapo.watchman.view import stall_state


def check_errors(ctx: AppContext, run_id: str | None = None) -> ErrorReport:
    """A run's attempts with their errors and the supervisor's decisions, how it ended, its latest stall."""
    run = resolve_run(ctx, run_id)
    heal(ctx, run)
    items = []
    events = ctx.store.events(run.id, limit=10_000)
    lost = {e.data.get("attempt"): e.message for e in events if e.kind == "resume_lost" and e.data}
    trained_again = {e.data.get("attempt"): e.data for e in events if e.kind == "steps_lost" and e.data}
    attempts = ctx.store.attempts(run.id)
    for index, attempt in enumerate(attempts):
        error = attempt.attempt_error
        decided = attempt.supervisor_decision
        info = policy.info_for(ErrorCategory(error.category), error.kind) if error else None
        items.append(AttemptErrors(**{
            "attempt": attempt.n, "status": attempt.status, "exit_code": attempt.exit_code,
            "features": list(attempt.config.effective), "override_diff": attempt.override_diff,
            "overrides": attempt.overrides, "override_sources": dict(attempt.config.override_sources),
            "plan_notes": list(attempt.config.plan_notes),
            "reason_started": attempt.reason,
            "category": policy.shown_category(error.category, error.kind) if error else None,
            "kind": error.kind if error else None,
            "excerpt": ctx.scrub(error.excerpt) if error and error.excerpt else None,
            "explanation": info.explanation if info else None,
            "fix": policy.fix_text(ErrorCategory(error.category), error.kind) if error else None,
            "supervisor_action": decided.reason if decided else None,
            "changes_next_attempt": decided.changes if decided else [],
            "resume_check": _resume_words(attempt.n, attempts, lost, run.progress or {}),
            "lost_steps": trained_again.get(attempt.n, {}).get("lost_steps"),
            "save_freq_advice": trained_again.get(attempt.n, {}).get("advice"),
            "feature_cost": attempt_cost(attempts, index, run.progress or {}),
        }))  # fmt: skip
    attempts = ctx.store.attempts(run.id)
    stall = stall_state(events, attempts[-1].n if attempts else None,
                        run.status in ACTIVE_RUN_STATUSES, time.time())  # fmt: skip
    # Scrubbed here, for both faces: a secret given after the record was written is masked too.
    final_reason = ctx.scrub(run.final_reason) if run.final_reason else run.final_reason
    return ErrorReport(run_id=run.id, status=run.status, attempts=items, final_reason=final_reason,
                       suggestions=run.suggestions, stall=stall)  # fmt: skip


# How much of the current attempt's log check_errors reads for non-fatal findings: the classification window.
WARNINGS_TAIL_BYTES = CLASSIFY_WINDOW_BYTES


async def check_errors_live(ctx: AppContext, run_id: str | None = None) -> ErrorReport:
    """check_errors plus what the current attempt's log shows that does not stop training
    (e.g. the tracker rejecting metric uploads mid-run): those never become an attempt's error."""
    report = check_errors(ctx, run_id)
    report.warnings = await _nonfatal_findings(ctx, report.run_id)
    return report


async def _nonfatal_findings(ctx: AppContext, run_id: str) -> list[LiveFinding]:
    attempts = ctx.store.attempts(run_id)
    if not attempts or attempts[-1].job is None:
        return []
    handle = attempts[-1].handle
    try:
        tail = await get_target(handle.target).read_tail(handle.log_path, WARNINGS_TAIL_BYTES)
    except TargetError:  # the log is unreadable now (container gone): the attempts still answer
        return []
    found = classify_tail(window_text(tail))
    return [LiveFinding(attempt=attempts[-1].n, category=f.category.value, kind=f.kind, count=f.count,
                        message=ctx.scrub(f.message), explanation=f.explanation, fix=f.fix)
            for f in found.findings if not f.fatal]  # fmt: skip


def _resume_words(n: int, attempts: list[Any], lost: dict[Any, str], progress: dict[str, Any]) -> str | None:
    """How attempt n resumed: the loss verl's log showed, else what the check before it found, else its progress."""
    if n in lost:
        return lost[n]
    decided = attempts[n - 2].supervisor_decision if n > 1 else None
    before = decided.checkpoint if decided else None
    if before and before.get("note"):
        return str(before["note"])
    return progress.get("resume_check") if progress.get("attempt") == n else None
