"""The suite's one wait: poll a condition until it holds, bounded, and say what was awaited when it does not.

Every wait on a real process, server or container goes through ``wait_until``: a deadline (never an unbounded
loop), a poll interval well under the product's own periods (the supervisor's 1 s stop poll, 2 s progress
writes), and a failure that explains itself (``explain`` adds the run's state, its log, its events).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.2


def wait_until(fn: Callable[[], T | None], what: str, timeout: float = 60.0,
               explain: Callable[[], str] | None = None, interval: float = POLL_S) -> T:  # fmt: skip
    """Poll ``fn`` until it returns something truthy, and return that; AssertionError naming ``what`` (and
    ``explain()``) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(interval)
