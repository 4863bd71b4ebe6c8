"""The watchdog process (``python -m verl_async_dapo.supervisor.watchdog_process RUN_ID PID``): waits for the
supervisor ``PID`` to go, then heals the run if it is still active. Started by ``watchdog.spawn``; see watchdog.py."""

from __future__ import annotations

import sys
import time

from verl_async_dapo.supervisor.watchdog import HEAL_TRIES, POLL_SECONDS, alive, log


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
