"""Runs as a service: start (preflight, freeze, spawn the supervisor), progress, errors, stop.

Shared by the MCP tools and the CLI. Every read also heals: a run whose supervisor died gets
a new one, which reattaches to the running attempt.

One import for the faces; the parts: ``start`` (preflight, freeze, launch), ``supervision`` (spawn, heal,
resolve a run), ``progress``, ``errors`` (check_errors), ``control`` (stop, list, resume).
"""

from __future__ import annotations

from verl_async_dapo.runs.control import RESUMABLE_STATUSES, list_runs, resume_run, run_to_stop, stop_training
from verl_async_dapo.runs.errors import (
    WARNINGS_TAIL_BYTES,
    _nonfatal_findings,
    _resume_words,
    check_errors,
    check_errors_live,
)
from verl_async_dapo.runs.progress import (
    STALE_PROGRESS_SECONDS,
    _job_ended,
    _progress_from_tail,
    get_progress,
    log_tail,
    merge_tail_progress,
)
from verl_async_dapo.runs.start import (
    ALLOW_NO_GPUS_ENV,
    LINK_WAIT_SECONDS,
    StartResult,
    _lines,
    _link_note,
    _swanlab_answer,
    _wait_for_link,
    apply_fix,
    approval_texts,
    approvals_needed,
    check_approvals,
    monitor_commands,
    no_gpus_allowed,
    preflight,
    refuse_unplannable,
    start_training,
)
from verl_async_dapo.runs.supervision import (
    HEAL_WAIT_SECONDS,
    MAX_SUPERVISOR_RESTARTS,
    RESTART_WINDOW_SECONDS,
    _heal,
    heal,
    logger,
    resolve_run,
    run_known,
    spawn_supervisor,
)

__all__ = [  # the names callers use as this module's attributes (moved, not renamed)
    "ALLOW_NO_GPUS_ENV",
    "HEAL_WAIT_SECONDS",
    "LINK_WAIT_SECONDS",
    "MAX_SUPERVISOR_RESTARTS",
    "RESTART_WINDOW_SECONDS",
    "RESUMABLE_STATUSES",
    "STALE_PROGRESS_SECONDS",
    "WARNINGS_TAIL_BYTES",
    "StartResult",
    "_heal",
    "_job_ended",
    "_lines",
    "_link_note",
    "_nonfatal_findings",
    "_progress_from_tail",
    "_resume_words",
    "_swanlab_answer",
    "_wait_for_link",
    "apply_fix",
    "approval_texts",
    "approvals_needed",
    "check_approvals",
    "check_errors",
    "check_errors_live",
    "get_progress",
    "heal",
    "list_runs",
    "log_tail",
    "logger",
    "merge_tail_progress",
    "monitor_commands",
    "no_gpus_allowed",
    "preflight",
    "refuse_unplannable",
    "resolve_run",
    "resume_run",
    "run_known",
    "run_to_stop",
    "spawn_supervisor",
    "start_training",
    "stop_training",
]
