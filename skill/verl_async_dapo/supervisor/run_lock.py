"""One supervisor per run: the run's lock file, which its supervisor holds with an exclusive ``flock`` for life.

A flock is released when its holder dies, so nothing goes stale: a server or CLI that finds the lock free while the
run is active starts a new supervisor, which reattaches to the running attempt instead of launching a second copy.
``spawn_supervisor`` (runs.py) takes the lock itself and hands it to the child as an inherited descriptor.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from verl_async_dapo.context import AppContext

# The descriptor of the run's lock file, already locked, that spawn_supervisor passes to the child.
LOCK_FD_ENV = "VERL_ASYNC_DAPO_SUPERVISOR_LOCK_FD"


def lock_path(ctx: AppContext, run_id: str) -> Path:
    return ctx.run_dir(run_id) / "supervisor.lock"


def try_lock(path: Path) -> IO[bytes] | None:
    """Take the run's exclusive lock, or None when another live supervisor holds it."""
    handle = path.open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def inherited_lock(path: Path, fd: str) -> IO[bytes] | None:
    """The run's lock as spawn_supervisor handed it over (already held), or None without a valid hand-over."""
    if not fd.isdigit():
        return None
    try:
        same = os.path.samestat(os.fstat(int(fd)), path.stat())
    except OSError:
        return None
    return os.fdopen(int(fd), "ab") if same else None


def supervisor_alive(ctx: AppContext, run_id: str) -> bool:
    handle = try_lock(lock_path(ctx, run_id))
    if handle is None:
        return True
    handle.close()  # closing releases the probe's lock at once
    return False
