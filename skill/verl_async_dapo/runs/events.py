"""The run events a connected agent is pushed (server/push.py): read from the store here, so the face reaches
the store only through this service (tests/core/test_import_contracts.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_async_dapo.context import AppContext

# Besides the error events the notification sinks send: a finished run, and a stall that cleared.
PUSHED_EXTRA = frozenset({"run_succeeded", "stall_cleared"})


@dataclass(frozen=True)
class PushedEvent:
    run_id: str
    level: str
    payload: dict[str, Any]  # scrubbed: event, run_id, target, title, text, look_closer


def store_opened(ctx: AppContext) -> bool:
    """Whether this process opened the state store yet (a tool opens it first: opening it for the push too would
    queue behind, or ahead of, that tool's open)."""
    return "store" in ctx.__dict__


def latest_event_id(ctx: AppContext, before: float) -> int:
    """The newest event recorded before ``before`` (a time.time()): the push starts after it."""
    return ctx.store.last_event_id(before)


def pushable_events(ctx: AppContext, cursor: int, limit: int = 200) -> tuple[int, list[PushedEvent]]:
    """The events after ``cursor`` that the agent is told about, rendered as the sinks render them; the new
    cursor (every event read counts, pushed or not)."""
    from verl_async_dapo.notify.events import ERROR_EVENTS, render

    out: list[PushedEvent] = []
    for event in ctx.store.events(None, after_id=cursor, limit=limit):
        cursor = event.id
        if event.run_id is None or (event.kind not in ERROR_EVENTS and event.kind not in PUSHED_EXTRA):
            continue
        run = ctx.store.run(event.run_id)
        notice = render({"id": event.id, "kind": event.kind, "level": event.level, "message": event.message,
                         "run_id": event.run_id, "data": event.data}, run.target if run else None, None)  # fmt: skip
        payload = {"event": event.kind, "run_id": event.run_id, "target": notice.target,
                   "title": ctx.scrub(notice.title), "text": ctx.scrub(notice.text),
                   "look_closer": notice.look_closer}  # fmt: skip
        out.append(PushedEvent(event.run_id, event.level, payload))
    return cursor, out
