"""A supervisor's watchdog: a killed supervisor is restarted without waiting for a client (issue 20, finding 4).

The supervisor restarts itself after a crash or a locked store (supervise.py), but a SIGKILL (the OOM killer, a
``kill -9``) ends the process: until then the run stayed unwatched until the next tool call healed it, and an OOM in
that window was not recovered. ``supervise.main`` starts one watchdog per supervisor process, in a session of its
own, so a kill of the supervisor does not take it along. It polls the supervisor's pid; once that is gone and the
run is still active, it heals the run (``runs.heal``: a new supervisor, which starts its own watchdog; heal's
crash-loop limit still applies) and exits. A run that ended is left alone. Off with VERL_ASYNC_DAPO_WATCHDOG=0.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping

WATCHDOG_ENV = "VERL_ASYNC_DAPO_WATCHDOG"
POLL_SECONDS = 1.0
HEAL_TRIES = 60  # a store locked by another process: heal is retried (every 2 s) for about two minutes

log = logging.getLogger("verl_async_dapo.watchdog")


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(WATCHDOG_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def spawn(run_id: str, supervisor_pid: int) -> None:
    """Start the watchdog of the supervisor ``supervisor_pid`` (the caller), detached, with no stdio."""
    subprocess.Popen(
        [sys.executable, "-m", __spec__.name, run_id, str(supervisor_pid)],  # this module, wherever it lives
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        close_fds=True,
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


def watch(run_id: str, supervisor_pid: int) -> int:
    while alive(supervisor_pid):
        time.sleep(POLL_SECONDS)
    from verl_async_dapo.context import AppContext
    from verl_async_dapo.exceptions import StoreBusy
    from verl_async_dapo.runs.supervision import heal
    from verl_async_dapo.supervisor.run_lock import supervisor_alive

    ctx = AppContext.from_environment()
    for _ in range(HEAL_TRIES):
        try:
            row = ctx.store.run(run_id)
            if row is None or row.status.is_terminal() or supervisor_alive(ctx, run_id):
                return 0  # ended with its supervisor, or another process already healed it
            if heal(ctx, row):
                log.warning("run %s: supervisor %d was gone; started a new one", run_id, supervisor_pid)
                return 0
        except StoreBusy:
            pass
        time.sleep(2.0)
    return 1


if __name__ == "__main__":
    raise SystemExit(watch(sys.argv[1], int(sys.argv[2])))
