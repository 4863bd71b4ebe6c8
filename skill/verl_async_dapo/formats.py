"""Small pure formatting helpers shared by the services (no I/O)."""

from __future__ import annotations

import time


def from_whole_line(data: bytes, max_bytes: int) -> bytes:
    """The last ``max_bytes`` of ``data`` without a cut-off first line (a reader would take the fragment for a line
    of its own, e.g. half a traceback). ``data`` is the file's tail read with one byte more than ``max_bytes``."""
    if len(data) <= max_bytes:
        return data  # the whole file
    window = data[-max_bytes:]
    if data[-max_bytes - 1 : -max_bytes] == b"\n":
        return window
    cut = window.find(b"\n")
    return window[cut + 1 :] if cut >= 0 else window  # one line longer than the window: shown cut, there is no other


def iso_time(epoch: float | None) -> str | None:
    """``2026-12-01T12:03:28Z``: seconds are enough for runs that take hours."""
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
