"""A run's supervisor process: spawn it, heal a run whose supervisor died, resolve which run a call means."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import StoreBusy, UserInputError
from verl_async_dapo.status import ACTIVE_RUN_STATUSES, RunStatus
from verl_async_dapo.store import RunRow
from verl_async_dapo.supervisor.run_lock import LOCK_FD_ENV, lock_path, supervisor_alive, try_lock
from verl_async_dapo.wording import Say, Term, tool

logger = logging.getLogger(__name__)


def spawn_supervisor(ctx: AppContext, run_id: str) -> bool:
    """Start a detached supervisor that outlives this process (its own session, no stdio).

    The run's lock is taken here and handed to the child as an inherited descriptor (a flock belongs to
    the open file, so the child holds it from its first instruction). Otherwise the run would look
    unsupervised until the child's Python had started, and a status call in that gap would spawn a
    second supervisor. Returns False, spawning nothing, when a live supervisor already holds the lock.
    """
    lock = try_lock(lock_path(ctx, run_id))
    if lock is None:
        return False
    from verl_async_dapo.supervisor import watchdog

    with lock, (ctx.run_dir(run_id) / "supervisor.out").open("ab") as log_file:
        env = dict(ctx.env)  # the whole environment: RAY_AUTH_TOKEN(_PATH) reach the supervisor's Ray client too
        if env.get("RAY_AUTH_TOKEN_PATH"):  # the child runs in ctx.home: a relative path must still name the file
            env["RAY_AUTH_TOKEN_PATH"] = os.path.abspath(os.path.expanduser(env["RAY_AUTH_TOKEN_PATH"]))
        env["VERL_ASYNC_DAPO_HOME"] = str(ctx.home)
        env["VERL_ASYNC_DAPO_CONFIG_DIR"] = str(ctx.config_home)
        env[LOCK_FD_ENV] = str(lock.fileno())
        child = subprocess.Popen(
            [sys.executable, "-m", "verl_async_dapo", "supervise", run_id],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True, close_fds=True,
            pass_fds=(lock.fileno(),), env=env, cwd=str(ctx.home),
        )  # fmt: skip
    # Its watchdog from here, watching its pid from its first instant: the child used to start its own once its
    # imports were done, and a kill in those ~0.3 s (a healed supervisor killed again) left the run unwatched, the
    # healing watchdog having exited (issue 27, finding 6).
    if watchdog.enabled(ctx.env):
        watchdog.spawn(run_id, child.pid, env={k: v for k, v in env.items() if k != LOCK_FD_ENV})
    return True


MAX_SUPERVISOR_RESTARTS = 5
HEAL_WAIT_SECONDS = 0.5  # a read-only tool's own writes (the restart event) wait no longer for another's lock
RESTART_WINDOW_SECONDS = 600.0


def heal(ctx: AppContext, run: RunRow) -> bool:
    """``_heal``, best effort: a read-only tool answers even while another process holds the store's lock (the
    supervisor's own retry and the next call heal it then; issue 20). True when it started a new supervisor."""
    try:
        with ctx.store.waiting(HEAL_WAIT_SECONDS):
            return _heal(ctx, run)
    except StoreBusy as exc:
        logger.warning("could not check run %s's supervisor: %s", run.id, exc)
        return False


def _heal(ctx: AppContext, run: RunRow) -> bool:
    """A run marked active whose supervisor is gone gets a new one (which reattaches).

    A supervisor that keeps dying (our bug, or a broken environment) is not restarted forever: after
    MAX_SUPERVISOR_RESTARTS in RESTART_WINDOW_SECONDS the run is marked failed with where to look.
    """
    if run.status not in ACTIVE_RUN_STATUSES:
        if ctx.store.outbox_pending(run.id) and not supervisor_alive(ctx, run.id):
            spawn_supervisor(ctx, run.id)  # it only delivers the ended run's pending notifications, then exits
        return False
    if supervisor_alive(ctx, run.id):
        return False
    since = time.time() - RESTART_WINDOW_SECONDS
    recent = [e for e in ctx.store.events(run.id, limit=10_000) if e.kind == "supervisor_restarted" and e.ts >= since]
    if len(recent) >= MAX_SUPERVISOR_RESTARTS:
        log_file = ctx.run_dir(run.id) / "supervisor.log"
        ctx.store.end_run(run.id, RunStatus.FAILED,
                          final_reason=f"the supervisor died {len(recent)} times in {RESTART_WINDOW_SECONDS:.0f} s",
                          suggestions=[f"read {log_file}", "the training job may still run: stop it in the target",
                                       "report the supervisor error as a bug"])  # fmt: skip
        ctx.store.add_event("error", "run_failed", "supervisor crash loop; run marked failed", run_id=run.id)
        return False
    if spawn_supervisor(ctx, run.id):
        ctx.store.add_event("warning", "supervisor_restarted", "supervisor was gone; started a new one",
                            run_id=run.id)  # fmt: skip
        return True
    return False


def run_known(ctx: AppContext, run_id: str) -> bool:
    """Whether the store holds a run with this id (a resource for any other is "not found")."""
    return ctx.store.run(run_id) is not None


def resolve_run(ctx: AppContext, run_id: str | None) -> RunRow:
    if run_id is not None:
        if not run_id.startswith("run_") or len(run_id) > 64:
            raise UserInputError(Say("{rid!r} is not a run id (run_…); {how}", rid=run_id[:40],
                                     how=Term(mcp="get_progress without run_id shows the latest run's id",
                                              cli="`verl-async-dapo runs` lists them")))  # fmt: skip
        row = ctx.store.run(run_id)
        if row is None:
            raise UserInputError(Say("unknown run {rid!r}; {how}", rid=run_id,
                                     how=Term(mcp="get_progress without run_id shows the latest run's id",
                                              cli="`verl-async-dapo runs` lists them")))  # fmt: skip
        return row
    sid = ctx.store.current_session()
    row = ctx.store.run_for_session(sid) if sid else None
    row = row or ctx.store.latest_run()
    if row is None:
        raise UserInputError(Say("no run yet: {how}", how=Term(mcp="answer the questions, then call start_training",
                                                           cli="start one with " + tool("start_training").cli)))  # fmt: skip
    return row
