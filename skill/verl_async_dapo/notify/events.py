"""Which recorded events become notifications, and their words (pure: the store rows come in as dicts).

"Errors only" by default: an OOM relaunch, a stall's relaunch, a failed run, a stalled run, a vanished target, an
exhausted relaunch budget, a supervisor crash. Opt-in: ``succeeded`` (the run finished) and ``progress`` (every N steps).
Every message names the run, the target and the one command (and MCP tool) to look closer.
"""

from __future__ import annotations

from typing import Any

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.notify.formats import Notice
from verl_async_dapo.records import AttemptError

# A relaunch is recorded as the kind of what caused it: OOM recovery (a memory-saving step was added) or a stall's
# relaunch (same settings, opt-in VAD_STALL_RELAUNCH=1). Both draw on the run's one relaunch budget.
OOM_RECOVERY = "oom_recovery"
STALL_RECOVERY = "stall_recovery"
# What the memory features of an OOM relaunch cost, once the relaunched attempt has a steady pace (logs/pace.py):
# told like trouble, since it is the price of one (offload made every step ~3x slower on the H200).
FEATURE_COST = "feature_cost"
ERROR_EVENTS = frozenset({
    OOM_RECOVERY, STALL_RECOVERY, FEATURE_COST, "run_failed", "run_stalled", "target_gone", "relaunch_budget_exhausted",
    "supervisor_error",
})  # fmt: skip
OPT_IN = {"run_succeeded": "succeeded", "progress_step": "progress"}


def recovery_event_kind(category: ErrorCategory | None) -> str:
    """The event kind of a relaunch after an attempt that ended in ``category``."""
    return STALL_RECOVERY if category is ErrorCategory.STALLED else OOM_RECOVERY


def wanted(kind: str, opt_ins: tuple[str, ...]) -> bool:
    return kind in ERROR_EVENTS or OPT_IN.get(kind, "") in opt_ins


def look_closer(kind: str, run_id: str | None) -> str:
    rid = run_id or ""
    if kind in ("progress_step", "run_succeeded"):
        return f"verl-async-dapo status {rid} (MCP: get_progress run_id={rid})".replace("  ", " ")
    return f"verl-async-dapo errors {rid} (MCP: check_errors run_id={rid})".replace("  ", " ")


def _duration(seconds: object) -> str:
    """Seconds for short spans (a 60 s window read "1 min", a 2 s one "0 min"), minutes from two minutes up."""
    value = float(seconds) if isinstance(seconds, int | float) else 0.0
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.0f} min"


def _proc_name(ps_line: object) -> str:
    """'2705 ray::WorkerDict' from an evidence row 'pid stat etime pcpu rss args'."""
    cells = str(ps_line).split(None, 5)
    return f"{cells[0]} {cells[5][:60]}" if len(cells) == 6 else str(ps_line)[:60]


def render(event: dict[str, Any], target: str | None, last_error: AttemptError | None) -> Notice:
    """``event``: id, kind, level, message, run_id, data (an EventRow as a dict)."""
    kind, data, run_id = event["kind"], event.get("data") or {}, event.get("run_id")
    where = f"run {run_id} on {target}" if target else f"run {run_id}"
    text = event["message"]
    if kind == "oom_recovery":
        category = data.get("category", "oom")
        changes = ", ".join(data.get("changes", [])) or "the next memory-saving step"
        k, n = data.get("relaunch"), data.get("max_relaunches")
        budget = f" (relaunch {k} of {n})" if k and n is not None else ""
        title = f"[verl] {category} in attempt {data.get('attempt')}: relaunching{budget}"
        text = (
            f"{where}: attempt {data.get('attempt')} hit {category}; relaunching with {changes}, resuming from "
            "the last checkpoint."
        )
    elif kind == "stall_recovery":
        k, n = data.get("relaunch"), data.get("max_relaunches")
        budget = f" (relaunch {k} of {n})" if k and n is not None else ""
        title = f"[verl] stalled in attempt {data.get('attempt')}: relaunching{budget}"
        text = (
            f"{where}: attempt {data.get('attempt')} printed nothing for the stall window and was stopped; "
            "relaunching with the same settings, resuming from the last checkpoint (no OOM: nothing was changed)."
        )
    elif kind == "run_failed":
        title = f"[verl] training failed: {where}"
        parts = [event["message"]]
        if last_error and last_error.excerpt:
            parts.append("Log: " + last_error.excerpt[-600:])
        tips = data.get("suggestions") or []
        if tips:
            parts.append("Try: " + "; ".join(str(t) for t in tips[:3]))
        text = "\n".join(parts)
    elif kind == "run_stalled":
        title = f"[verl] training stalled: {where}"
        util = data.get("gpu_util")
        evidence = f"; GPU utilisation {util}" if util else ""
        stopped = (data.get("evidence") or {}).get("stopped_processes") or []
        if stopped:  # the likeliest cause, named: someone or something stopped these (SIGSTOP, a debugger)
            evidence += f"; stopped processes (state T): {', '.join(_proc_name(line) for line in stopped[:3])}"
        text = (
            f"no new step and no log output for {_duration(data.get('silent_seconds'))} (window "
            f"{_duration(data.get('window_seconds'))}) at step {data.get('step')}{evidence}. {data.get('action', '')}"
        ).strip()
    elif kind == FEATURE_COST:
        title = f"[verl] what the OOM recovery costs in attempt {data.get('attempt')}: {where}"
        text = (f"{where}: {data.get('cost')}. Training goes on; for the next run, a smaller batch or response "
                "length may avoid the OOM without this cost.")
    elif kind == "target_gone":
        title = f"[verl] target gone: {where}"
    elif kind == "relaunch_budget_exhausted":
        title = f"[verl] relaunch budget exhausted: {where}"
    elif kind == "run_succeeded":
        title = f"[verl] training finished: {where}"
    elif kind == "progress_step":
        title = f"[verl] step {data.get('step')}/{data.get('total') or '?'}: {where}"
        metrics = data.get("metrics") or {}
        shown = [f"{k}={metrics[k]}" for k in ("critic/score/mean", "response_length/mean") if k in metrics]
        text = ", ".join(shown) or event["message"]
    elif kind == "test":
        title = "[verl] test notification from verl-async-dapo"
    else:
        title = f"[verl] {kind}: {where}"
    return Notice(event_id=int(event["id"]), kind=kind, level=event.get("level", "info"), title=title, text=text,
                  run_id=run_id, target=target, look_closer=look_closer(kind, run_id) if run_id else None,
                  data=dict(data))  # fmt: skip
