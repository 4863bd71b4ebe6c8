"""A supervisor's watchdog: a killed supervisor is restarted without waiting for a client (issue 20, finding 4).

The supervisor restarts itself after a crash or a locked store (supervise.py), but a SIGKILL (the OOM killer, a
``kill -9``) ends the process: until then the run stayed unwatched until the next tool call healed it, and an OOM in
that window was not recovered. Each supervisor process has one watchdog, in a session of its own, so a kill of
the supervisor does not take it along: ``spawn_supervisor`` starts it with the supervisor, watching its pid from
its first instant (``supervise.main`` starts one itself only when it was started directly). It polls the
supervisor's pid; once that is gone and the run is still active, it heals the run (``runs.heal``: a new supervisor,
whose watchdog ``spawn_supervisor`` starts before it returns, so a second kill right after the restart is healed
too; heal's crash-loop limit still applies) and exits. A run that ended is left alone. Off with
VERL_ASYNC_DAPO_WATCHDOG=0.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Mapping

WATCHDOG_ENV = "VERL_ASYNC_DAPO_WATCHDOG"
POLL_SECONDS = 1.0
HEAL_TRIES = 60  # a store locked by another process: heal is retried (every 2 s) for about two minutes

log = logging.getLogger("verl_async_dapo.watchdog")
# The watchdog process itself (it heals the run through runs.supervision, which spawns watchdogs with this module:
# keeping the process apart keeps that a one-way import).
WATCHDOG_PROCESS = f"{__spec__.parent}.watchdog_process"


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(WATCHDOG_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def spawn(run_id: str, supervisor_pid: int, env: Mapping[str, str] | None = None) -> None:
    """Start the watchdog of the supervisor ``supervisor_pid``, detached, with no stdio. ``env``: the supervisor's
    (its state dir), when the caller is the process that spawned it rather than the supervisor itself."""
    subprocess.Popen(
        [sys.executable, "-m", WATCHDOG_PROCESS, run_id, str(supervisor_pid)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        close_fds=True, env=dict(env) if env is not None else None,
    )  # fmt: skip


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a supervisor spawned by a long-lived server that never reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
