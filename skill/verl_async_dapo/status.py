"""The life of a run and of its attempts (after Ray's job manager, dashboard/modules/job/common.py).

    run:      starting → running ⇄ retrying → succeeded | failed | stopped
    attempt:  launching → running → succeeded | failed | stopped | rejected | abandoned

A terminal status is final: the store refuses to move a run or an attempt out of one (``Store.update_run``) and
stamps ``ended_at`` when one is entered. Another try of a failed run is a new attempt, never an old one revived.
Members are ``str`` subclasses, so rows, JSON and comparisons with the plain strings keep working.
"""

from __future__ import annotations

from enum import Enum


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


_TERMINAL_RUN = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED})
_TERMINAL_ATTEMPT = frozenset(
    {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.STOPPED, AttemptStatus.REJECTED,
     AttemptStatus.ABANDONED}
)  # fmt: skip
ACTIVE_RUN_STATUSES = tuple(s.value for s in RunStatus if not s.is_terminal())
