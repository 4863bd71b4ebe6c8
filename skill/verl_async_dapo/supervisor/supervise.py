"""The supervisor process: ``verl-async-dapo supervise RUN_ID`` around the ``Supervisor`` of ``supervisor``.

It takes (or inherits) the run's lock, then keeps a Supervisor going until the run is final. It never exits on
a transient store error, and it restarts a crashed Supervisor itself, so the run is healed without waiting for
a client's call (issue 20: a 45 s lock made the supervisor exit; training ran unsupervised ~20 s until a tool call
healed it, and an OOM in that window would not have been recovered).
"""

from __future__ import annotations

import logging
import os
import time

import anyio

from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import StoreBusy
from verl_async_dapo.status import RunStatus
from verl_async_dapo.supervisor import Supervisor, watchdog
from verl_async_dapo.supervisor.run_lock import LOCK_FD_ENV, inherited_lock, lock_path, try_lock
from verl_async_dapo.watchman.hooks import Watchman

log = logging.getLogger("verl_async_dapo.supervisor")

# A store locked by another process (issue 20: a 45 s lock made the supervisor exit and the run went on
# unsupervised). Each store call waits STORE_WAIT_SECONDS; the periodic writes (progress, heartbeat) are then
# skipped and tried again; a decision's write that cannot wait restarts the supervisor in-process (reattach),
# after a backoff up to STORE_BACKOFF_MAX_SECONDS, for as long as the lock lasts: never an exit.
STORE_WAIT_SECONDS = 2.0
STORE_BACKOFF_MAX_SECONDS = 15.0
# Any other crash (our bug) is restarted in-process too, at most this many times in CRASH_WINDOW_SECONDS: the
# watchdog that heals the run without waiting for a client; beyond, the process exits and a client's heal
# (with its own crash-loop limit, runs.heal) takes over.
MAX_INPROCESS_RESTARTS = 3
CRASH_WINDOW_SECONDS = 600.0


def main(run_id: str) -> int:
    """Entry of ``verl-async-dapo supervise RUN_ID`` (started detached by start_training)."""
    fd = os.environ.pop(LOCK_FD_ENV, "")  # before the context copies the environment: never passed on
    os.umask(0o077)  # its logs and whatever it creates: the owner's only, whatever the caller's umask (issue 20)
    ctx = AppContext.from_environment()
    ctx.store_busy_timeout = STORE_WAIT_SECONDS
    path = lock_path(ctx, run_id)
    lock = inherited_lock(path, fd) or try_lock(path)
    if lock is None:
        return 0  # another supervisor owns this run
    logging.basicConfig(
        filename=str(ctx.run_dir(run_id) / "supervisor.log"), level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
    )  # fmt: skip
    # A SIGKILL of this process is healed without waiting for a client. Started by spawn_supervisor (the lock
    # inherited), the spawner started the watchdog already, before this process could be killed unwatched.
    if not fd and watchdog.enabled(ctx.env):
        watchdog.spawn(run_id, os.getpid())
    try:
        return _supervise(ctx, run_id)
    finally:
        lock.close()


def _only_busy(exc: BaseException) -> bool:
    """A StoreBusy, alone or as the only kind inside the task groups' exception groups."""
    group: tuple[BaseException, ...] | None = getattr(exc, "exceptions", None)
    if isinstance(group, tuple) and group:
        return all(_only_busy(inner) for inner in group)
    return isinstance(exc, StoreBusy)


def _supervise(ctx: AppContext, run_id: str) -> int:
    """Run the Supervisor until the run is final, restarting it in-process (it reattaches) after a busy store,
    for as long as that lasts, and after a crash, a few times (the watchdog)."""
    backoff = 0.5
    crashes: list[float] = []
    while True:
        try:
            row = ctx.store.run(run_id)
            if row is None or row.status not in (RunStatus.STARTING, RunStatus.RUNNING, RunStatus.RETRYING):
                if row is not None and ctx.store.outbox_pending(run_id):  # an ended run's notifications still owed
                    anyio.run(Watchman.flush_only, ctx, run_id)
                return 0
            final = anyio.run(Supervisor(ctx, run_id).run)
            log.info("run %s ended: %s", run_id, final)
            return 0
        except Exception as exc:
            if _only_busy(exc):  # transient: never an exit, never counted as a crash
                log.warning("state store busy; supervising again in %.1f s", backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, STORE_BACKOFF_MAX_SECONDS)
                continue
            # The run must not stay "running" forever because of our bug.
            log.exception("supervisor crashed")
            now = time.time()
            crashes = [t for t in crashes if now - t < CRASH_WINDOW_SECONDS] + [now]
            restart = len(crashes) <= MAX_INPROCESS_RESTARTS
            try:
                what = "restarting in-process" if restart else "giving up"
                ctx.store.add_event("error", "supervisor_error", ctx.scrub(f"supervisor error ({what}): {exc}"),
                                    run_id=run_id)  # fmt: skip
            except StoreBusy:
                log.warning("could not record the crash: state store busy")
            if not restart:
                raise
            time.sleep(min(2.0 * len(crashes), 10.0))
        backoff = 0.5
