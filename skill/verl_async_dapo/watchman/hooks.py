"""The supervisor's watchman: the notification outbox task, hang detection and the every-N-steps event.

The supervisor calls four hooks — ``attempt_started``, ``output`` (per log chunk), ``stalled_error`` (when an
attempt ends) and ``decide_after_stall`` — and runs ``run`` in its task group; all policy lives in
``watchman/stall.py`` and ``notify/``. Nothing here may stop the supervisor: every failure is logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import StallConfigError, TargetError
from verl_async_dapo.logs.progress import ProgressParser
from verl_async_dapo.notify.outbox import Outbox
from verl_async_dapo.records import AttemptError, JobHandle
from verl_async_dapo.status import AttemptStatus
from verl_async_dapo.targets.base import Target
from verl_async_dapo.watchman import budget, evidence
from verl_async_dapo.watchman.stall import StallSettings, StallTracker

log = logging.getLogger("verl_async_dapo.watchman")

CHECK_SECONDS = 1.0
MAX_EVIDENCE_CHARS = 16_000


# At most this many progress_step events from one piece of the stream (a reattached supervisor's backlog).
MAX_PROGRESS_BURST = 5


class Watchman:
    def __init__(self, ctx: AppContext, run_id: str, target: Target, total_steps: int | None) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.target = target
        self.total_steps = total_steps
        self.outbox = Outbox(ctx, run_id)
        try:
            self.settings = StallSettings.from_env(ctx.env)
        except StallConfigError as exc:
            log.warning("stall settings: %s; using the defaults", exc)
            self.settings = StallSettings()
        self._tracker: StallTracker | None = None
        self._attempt: int | None = None
        self._handle: JobHandle | None = None
        self._stall_stopped: dict[int, dict[str, Any]] = {}  # attempt → the stall event's data
        # A restarted supervisor re-reads old step lines: never announce a step twice.
        self._last_progress_step = max((int((e.data or {}).get("step") or 0) for e in ctx.store.events(run_id, limit=10_000)
                                        if e.kind == "progress_step"), default=0)  # fmt: skip

    @staticmethod
    async def flush_only(ctx: AppContext, run_id: str) -> None:
        """For a supervisor started after its run ended (heal saw notifications still pending)."""
        await Outbox(ctx, run_id).flush()

    # -- hooks called by the supervisor -----------------------------------------------------------

    def attempt_started(self, n: int, handle: JobHandle) -> None:
        self._attempt, self._handle = n, handle
        self._tracker = StallTracker(self.settings, started_at=time.monotonic())

    def output(self, parser: ProgressParser) -> None:
        if self._tracker is None:
            return
        snapshot = parser.snapshot()
        cleared = self._tracker.output(time.monotonic(), snapshot.step)
        # A stalled attempt the watchman is stopping prints as it dies (Ray's shutdown lines): that is no recovery.
        if cleared and self._attempt not in self._stall_stopped:
            self.ctx.store.add_event("info", "stall_cleared", f"attempt {self._attempt} is printing again",
                                     run_id=self.run_id, data={"attempt": self._attempt})  # fmt: skip
        self._maybe_progress_event(snapshot.step, snapshot)

    def attempt_ended(self) -> None:
        """The job is gone: nothing left to stall until the next attempt starts."""
        self._tracker = None

    def stalled_error(self, n: int) -> AttemptError | None:
        """The error of attempt ``n`` when the watchman stopped it for a stall (None otherwise)."""
        data = self._stall_stopped.get(n)
        if data is None:
            return None
        lines = data.get("evidence", {}).get("last_log_lines", [])
        return AttemptError(category=ErrorCategory.STALLED.value, kind="no_progress", line=None, phase=None,
                            excerpt=self.ctx.scrub("\n".join(lines[-20:]))[:2000])  # fmt: skip

    def gpu_hours_refusal(self, gpus: int) -> str | None:
        """Why the next relaunch must not happen under VAD_MAX_GPU_HOURS (None: it may)."""
        try:
            cap = budget.max_gpu_hours(self.ctx.env)
        except budget.BudgetConfigError as exc:
            log.warning("%s; no GPU-hour cap", exc)
            return None
        spans = [(a.started_at, a.ended_at) for a in self.ctx.store.attempts(self.run_id) if a.status != AttemptStatus.ABANDONED]
        return budget.over_gpu_hours(budget.gpu_hours_used(spans, gpus, time.time()), cap)

    def budget_exhausted(self, n: int, category: ErrorCategory, reason: str, relaunches: int, cap: int) -> None:
        self.ctx.store.add_event("error", "relaunch_budget_exhausted", reason, run_id=self.run_id,
                                 data={"attempt": n, "category": category.value, "relaunches": relaunches,
                                       "max_relaunches": cap})  # fmt: skip

    def target_gone(self, n: int, excerpt: str) -> None:
        self.ctx.store.add_event("error", "target_gone", f"attempt {n}: {excerpt}", run_id=self.run_id,
                                 data={"attempt": n})  # fmt: skip
        self.outbox.wake()

    # -- the task ------------------------------------------------------------------------------------

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.outbox.run_forever)
            while True:
                await anyio.sleep(CHECK_SECONDS)
                try:
                    await self._check_stall()
                except Exception as exc:  # hang detection is advice: never the supervisor's end
                    log.warning("stall check: %s", self.ctx.scrub(f"{type(exc).__name__}: {exc}"))

    async def _check_stall(self) -> None:
        tracker, handle, n = self._tracker, self._handle, self._attempt
        if tracker is None or handle is None or n is None or not tracker.newly_stalled(time.monotonic()):
            return
        silent, window = tracker.silent_for(time.monotonic()), tracker.window()
        try:
            status = await self.target.job_status(handle)
            pgid = status.pgid
        except TargetError:
            status, pgid = None, None
        if status is not None and status.queued:  # pending in SLURM's queue: not a hang, nothing to report
            tracker.queued(time.monotonic())
            return
        bundle = await evidence.collect(self.target, handle, pgid)
        bundle = _bounded(self.ctx, bundle)
        action = ("Stopping it to relaunch from the last checkpoint (VAD_STALL_RELAUNCH=1)." if self.settings.relaunch
                  else "Left running; stop it or set VAD_STALL_RELAUNCH=1 to relaunch stalled runs.")  # fmt: skip
        data = {"attempt": n, "silent_seconds": round(silent, 1), "window_seconds": round(window, 1),
                "median_step_seconds": tracker.median_step_seconds(), "step": tracker.last_step,
                "gpu_util": bundle.get("gpu_util"), "evidence": bundle, "action": action}  # fmt: skip
        if self.settings.relaunch:
            self._stall_stopped[n] = data  # before the stop: the attempt's end reads it
        self.ctx.store.add_event("warning", "run_stalled",
                                 f"attempt {n}: no new step and no log output for {silent:.0f} s (window {window:.0f} s)",
                                 run_id=self.run_id, data=data)  # fmt: skip
        self.outbox.wake()
        if self.settings.relaunch:
            try:
                await self.target.stop_job(handle, grace_seconds=10.0)
            except TargetError as exc:
                log.warning("could not stop the stalled attempt %d: %s", n, exc)

    def _maybe_progress_event(self, step: int | None, snapshot: Any) -> None:
        """One progress_step event per multiple of every_n_steps passed. Under load (or a reattached supervisor
        reading a backlog) several steps arrive in one piece of the stream: each multiple passed is announced, not
        only a latest step that happens to be one (steps 1-6 at once with every 2 announced nothing but 6, or
        nothing at all when the piece ended on step 5). A long backlog is cut to its last few."""
        every = self.outbox.config().every_n_steps
        if not every or step is None:
            return
        due = list(range((self._last_progress_step // every + 1) * every, step + 1, every))[-MAX_PROGRESS_BURST:]
        if not due:
            return
        self._last_progress_step = due[-1]
        metrics = snapshot.to_dict().get("metrics") or {}
        shown = {k: metrics[k] for k in ("critic/score/mean", "response_length/mean") if k in metrics}
        for passed in due:  # the metrics are the latest step's: shown only with that step
            self.ctx.store.add_event("info", "progress_step", f"step {passed}/{self.total_steps or '?'}",
                                     run_id=self.run_id, data={"step": passed, "total": self.total_steps,
                                                               "metrics": shown if passed == step else {}})  # fmt: skip
        self.outbox.wake()


def _bounded(ctx: AppContext, bundle: dict[str, Any]) -> dict[str, Any]:
    """Scrubbed, and short enough for an event row."""
    out: dict[str, Any] = {}
    for key, value in bundle.items():
        if isinstance(value, list):
            out[key] = [ctx.scrub(str(v))[:400] for v in value]
        elif isinstance(value, str):
            out[key] = ctx.scrub(value)[-MAX_EVIDENCE_CHARS // 2 :]
        else:
            out[key] = value
    return out
