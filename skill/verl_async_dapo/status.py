"""The life of a run and of its attempts (after Ray's job manager, dashboard/modules/job/common.py), as transition
tables in the manner of supervisord's process states: each status lists the statuses it may move to.

    run:      starting → running ⇄ retrying → succeeded | failed | stopped
    attempt:  launching → running → succeeded | failed | stopped;  launching → rejected | abandoned (never ran)
    delivery: pending → pending (a retry later) | sent | failed      (a notification to one sink)

The store refuses every other change (``Store.update_run`` / ``update_attempt``: ``check_transition``) and stamps
``ended_at`` when a terminal status is entered. A terminal status has no way out, with one exception kept apart
from the table: a failed or stopped run resumed by the user goes back to ``starting`` (``RUN_REOPENABLE``,
``Store.reopen_run``); its next try is a new attempt, never an old one revived. Writing the status a row already has
is not a change and is always accepted (a restarted supervisor repeats what it already wrote).
Members are ``str`` subclasses, so rows, JSON and comparisons with the plain strings keep working.
"""

from __future__ import annotations

from enum import Enum

from verl_async_dapo.exceptions import IllegalTransitionError, TerminalStateError


class _Status(str, Enum):
    def __str__(self) -> str:  # "failed", not "RunStatus.FAILED", in messages and f-strings
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def is_terminal(self) -> bool:
        raise NotImplementedError


class RunStatus(_Status):
    STARTING = "starting"  # created; the supervisor is launching the first attempt
    RUNNING = "running"
    RETRYING = "retrying"  # an attempt ended; the next one is being prepared
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # on the user's request

    def is_terminal(self) -> bool:
        return self in _TERMINAL_RUN


class AttemptStatus(_Status):
    LAUNCHING = "launching"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    REJECTED = "rejected"  # refused before it started (its overrides failed validation in the target)
    ABANDONED = "abandoned"  # its launch was interrupted and it never ran; a new attempt takes its place

    def is_terminal(self) -> bool:
        return self in _TERMINAL_ATTEMPT


class DeliveryStatus(_Status):
    """One notification to one sink (the outbox, notify/outbox.py): owed, delivered, or given up on."""

    PENDING = "pending"  # owed: tried at next_at (again after a failure the sink may recover from)
    SENT = "sent"  # the sink answered
    FAILED = "failed"  # given up: no retry can help, or the tries ran out

    def is_terminal(self) -> bool:
        return self is not DeliveryStatus.PENDING


# Legal transitions per status. Why each edge exists:
RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    # the first attempt launched; or it ended before the run was marked running (a supervisor killed between the two
    # writes) and is retried or ends the run; a stop, or a failure before any launch (a plan, a dead supervisor)
    RunStatus.STARTING: frozenset({RunStatus.RUNNING, RunStatus.RETRYING, RunStatus.SUCCEEDED, RunStatus.FAILED,
                                   RunStatus.STOPPED}),
    RunStatus.RUNNING: frozenset({RunStatus.RETRYING, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED}),
    # the next attempt launched; or one reattached to ended (succeeded, failed) before the run was marked running
    RunStatus.RETRYING: frozenset({RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED}),
    RunStatus.SUCCEEDED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.STOPPED: frozenset(),
}  # fmt: skip
RUN_REOPENABLE = frozenset({RunStatus.FAILED, RunStatus.STOPPED})  # → STARTING, by resume only (Store.reopen_run)

ATTEMPT_TRANSITIONS: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    # its job started; or it ended before that: refused by verl's validation (rejected), stopped on request, the
    # launch failed (failed), the supervisor died before starting it (abandoned); or its job, found by a restarted
    # supervisor, already ended
    AttemptStatus.LAUNCHING: frozenset({AttemptStatus.RUNNING, AttemptStatus.SUCCEEDED, AttemptStatus.FAILED,
                                        AttemptStatus.STOPPED, AttemptStatus.REJECTED, AttemptStatus.ABANDONED}),
    AttemptStatus.RUNNING: frozenset({AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.STOPPED}),
    AttemptStatus.SUCCEEDED: frozenset(),
    AttemptStatus.FAILED: frozenset(),
    AttemptStatus.STOPPED: frozenset(),
    AttemptStatus.REJECTED: frozenset(),
    AttemptStatus.ABANDONED: frozenset(),
}  # fmt: skip

_TERMINAL_RUN = frozenset(s for s, nexts in RUN_TRANSITIONS.items() if not nexts)
_TERMINAL_ATTEMPT = frozenset(s for s, nexts in ATTEMPT_TRANSITIONS.items() if not nexts)
ACTIVE_RUN_STATUSES = tuple(s.value for s in RunStatus if not s.is_terminal())
# Where a run or attempt starts (the row's first status).
RUN_INITIAL = RunStatus.STARTING
ATTEMPT_INITIAL = AttemptStatus.LAUNCHING


def check_transition(what: str, current: RunStatus | AttemptStatus, new: RunStatus | AttemptStatus) -> None:
    """Refuse a change the table does not allow; writing the current status again is always accepted."""
    if new is current:
        return
    table: dict = RUN_TRANSITIONS if isinstance(current, RunStatus) else ATTEMPT_TRANSITIONS  # type: ignore[type-arg]
    if new in table[current]:
        return
    if current.is_terminal():
        raise TerminalStateError(f"{what} has already ended as {current.value}; it cannot become {new.value}")
    allowed = ", ".join(sorted(s.value for s in table[current]))
    raise IllegalTransitionError(f"{what} is {current.value}: it cannot become {new.value} (only {allowed})")
