"""What get_progress and check_errors say about a stall, from the run's events (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class _Event(Protocol):
    ts: float
    kind: str
    data: dict[str, Any] | None


def stall_state(events: Iterable[_Event], attempt: int | None, active: bool, now: float) -> dict[str, Any] | None:
    """The current attempt's latest stall, unless output resumed since: ``{"stalled", "stalled_for_seconds",
    "window_seconds", "evidence", …}``; ``stalled`` is False once the run ended (the evidence stays)."""
    latest: _Event | None = None
    for event in events:
        data = event.data or {}
        if data.get("attempt") != attempt:
            continue
        if event.kind == "run_stalled":
            latest = event
        elif event.kind == "stall_cleared":
            latest = None
    if latest is None:
        return None
    data = latest.data or {}
    silent = float(data.get("silent_seconds") or 0.0) + max(0.0, now - latest.ts)
    return {"stalled": active, "stalled_for_seconds": round(silent, 1) if active else None,
            "window_seconds": data.get("window_seconds"), "step": data.get("step"), "gpu_util": data.get("gpu_util"),
            "detected_at": latest.ts, "action": data.get("action"), "evidence": data.get("evidence") or {}}  # fmt: skip
