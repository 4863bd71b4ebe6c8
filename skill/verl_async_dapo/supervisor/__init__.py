"""The per-run supervisor: a detached process that keeps one training run going.

It launches attempt 1 (after validating the overrides inside the target), follows the
attempt's log as a stream, and when the attempt ends decides by the classified cause:
exit 0 → succeeded; GPU/rollout OOM → relaunch with the next memory-saving step, resuming from
the last checkpoint; anything else → failed with suggestions. It is silent while healthy:
only errors, recoveries and the final state become events. Following an attempt's log to its end is
``supervisor.watch`` (a part of ``Supervisor``).

Exactly one supervisor per run: it holds an exclusive ``flock`` on the run's lock file for its
whole life (``run_lock``). A server or CLI that finds the lock free while the run is active starts
a new one, which reattaches to the running attempt instead of launching a second copy.
"""

from __future__ import annotations

import logging
import os
import time

import anyio

import verl_async_dapo.supervisor.resume_check as resume_check
from verl_async_dapo import policy
from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import PlanError, StoreBusy, TargetError
from verl_async_dapo.logs.pace import pace_of
from verl_async_dapo.logs.progress import ProgressParser
from verl_async_dapo.notify.events import recovery_event_kind
from verl_async_dapo.plans.launching import plan_for, skip_pinned_rungs
from verl_async_dapo.plans.prelaunch import ValidationCache
from verl_async_dapo.policy import BUDGET_OUTCOMES, AttemptConfig
from verl_async_dapo.records import AttemptConfigRecord, AttemptError, JobHandle, SupervisorDecision
from verl_async_dapo.runspec import (
    RESUMED_REASON,
    relaunches_before,
    resume_pending,
)
from verl_async_dapo.status import AttemptStatus, RunStatus
from verl_async_dapo.store import AttemptRow
from verl_async_dapo.supervisor.attempt_log import ProgressWriter
from verl_async_dapo.supervisor.watch import PROGRESS_WRITE_SECONDS, AttemptWatching
from verl_async_dapo.targets.base import Target
from verl_async_dapo.targets.registry import get_target
from verl_async_dapo.verl import LaunchPlan, checkpoint_dir_for, override_diff
from verl_async_dapo.watchman.hooks import Watchman
from verl_async_dapo.watchman.stall import stall_decision

log = logging.getLogger("verl_async_dapo.supervisor")

HEARTBEAT_SECONDS = 5.0
STOP_POLL_SECONDS = 1.0
LAUNCH_GRACE_SECONDS = 20.0  # a begun launch's pgid: the targets' START_TIMEOUT (10 s) and a margin
# While another process holds the store's lock, the periodic writes (progress, heartbeat) are skipped and
# tried again, and the log is still followed; a decision's write that cannot wait ends ``run`` with StoreBusy,
# and the process around it (``supervise``) starts it again: issue 20.


class Supervisor(AttemptWatching):
    def __init__(self, ctx: AppContext, run_id: str, target: Target | None = None) -> None:
        """``target``: where the run's jobs go, instead of the one its spec names (as httpx takes a transport:
        tests/harness/inprocess.py passes an in-process target so decisions are tested without processes)."""
        self.ctx = ctx
        self.run_id = run_id
        row = ctx.store.run(run_id)
        if row is None:
            raise ValueError(f"unknown run {run_id}")
        self.spec = row.spec
        self.settings = self.spec.training_settings()
        # A SLURM target submits with the run's options.
        self.target: Target = target if target is not None else get_target(self.spec.target, self.settings)
        self._launched: set[int] = set()  # attempts started by this process (not reattached)
        self._target_gone: str | None = None
        self._stop_requested = False
        self._validations = ValidationCache(self.target)  # checked while an attempt runs, used at its relaunch
        self._tg: anyio.abc.TaskGroup | None = None
        self._unsaved: tuple[ProgressParser, int] | None = None  # parsed but not yet written progress
        self._last_save = 0.0
        self._progress = ProgressWriter(ctx, run_id)
        # Notifications (outbox) and hang detection: hooks in watchman/, so this file keeps the attempt loop.
        self.watchman = Watchman(ctx, run_id, self.target, self.settings.train_steps)

    # -- the main loop ------------------------------------------------------------------

    async def run(self) -> str:
        """Drive the run to a final state; returns it."""
        try:
            self.ctx.store.update_run(self.run_id, supervisor_pid=os.getpid(), heartbeat_at=time.time())
        except StoreBusy as exc:  # the flock says who supervises; the pid is for humans: watch first
            log.warning("could not record the supervisor pid yet: %s", exc)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._heartbeat)
            tg.start_soon(self.watchman.run)
            final = await self._drive()
            await self.watchman.outbox.flush()  # the final event's notifications, before this process ends
            tg.cancel_scope.cancel()
        return final

    async def _drive(self) -> str:
        handle = await self._first_handle()
        while handle is not None:
            await self._watch(self.ctx.store.attempts(self.run_id)[-1], handle)
            ended = await self._after_attempt(self.ctx.store.attempts(self.run_id)[-1])
            if ended is not None:
                return ended
            handle = self._latest_handle()
        # A launch refused (validation) or failed, or the run ended without a job to watch: already written.
        return self.ctx.store.run(self.run_id).status  # type: ignore[union-attr]

    async def _first_handle(self) -> JobHandle | None:
        """The job to watch first. A supervisor may start where an earlier one was killed at any point: before
        attempt 1, during an attempt (reattach), right after abandoning an attempt that never started, or between
        a finished attempt and the next. In each case it carries on and then watches what it launched."""
        attempts = self.ctx.store.attempts(self.run_id)
        if not attempts:
            return await self._launch(1, self.spec.first_attempt_config(), "first launch", previous=None)
        last = attempts[-1]
        if resume_pending(last, self.ctx.store.events(self.run_id, limit=10_000)):  # resume_run: same answers, last checkpoint
            box: dict[str, resume_check.CheckpointState] = {}
            await self._check_checkpoint(last.n, box)  # recorded on the last attempt: the resumed one is checked by it
            ckpt = box["ckpt"]
            decided = last.supervisor_decision or SupervisorDecision()
            self.ctx.store.update_attempt(self.run_id, last.n,
                                          decision=decided.model_copy(update={"checkpoint": ckpt.to_dict()}))  # fmt: skip
            resumed = ckpt.expected_step
            reason = f"{RESUMED_REASON} from step {resumed}" if resumed else f"{RESUMED_REASON} (no checkpoint yet)"
            await self._launch(last.n + 1, last.config.attempt_config(), reason, previous=last)
        elif last.status in (AttemptStatus.LAUNCHING, AttemptStatus.RUNNING):
            await self._reattach(last)  # may abandon it and launch the next one: the latest row is the one to watch
        elif last.status == AttemptStatus.ABANDONED:  # not a failure: it never ran, so the same config again, no retry used
            await self._relaunch_same(last, last.config.attempt_config())
        elif await self._after_attempt(last) is not None:  # continue the ladder where it stopped; the run ended
            return None
        return self._latest_handle()

    def _latest_handle(self) -> JobHandle | None:
        current = self.ctx.store.attempts(self.run_id)[-1]
        return current.handle

    async def _after_attempt(self, attempt: AttemptRow) -> RunStatus | None:
        """Decide what follows a finished attempt: done, relaunch, or give up. None: relaunched; else the run's
        status, the run having ended (or being left to what a failed launch wrote)."""
        if attempt.status == AttemptStatus.SUCCEEDED:
            if attempt.exit_code is None and attempt.supervisor_decision is not None:  # decided by its evidence
                return self._finish(RunStatus.SUCCEEDED, f"training finished ({attempt.supervisor_decision.reason})", [])
            return self._finish(RunStatus.SUCCEEDED, "training finished (exit code 0)", [])
        if self._stop_requested or self._stop_flag():
            return self._finish(RunStatus.STOPPED, "stopped on request", [])
        if attempt.status == AttemptStatus.REJECTED:
            return self.ctx.store.run(self.run_id).status  # type: ignore[union-attr]
        error = attempt.attempt_error
        category = ErrorCategory(error.category) if error else None
        config = attempt.config.attempt_config()
        # Relaunches after failures; an attempt abandoned by a killed supervisor never ran and costs no retry.
        relaunches = relaunches_before(self.ctx.store.attempts(self.run_id), attempt.n)

        def decide_from(current: AttemptConfig) -> policy.Decision:
            if category is ErrorCategory.STALLED:  # stopped by the watchman (opt-in): same budget as OOM recovery
                return stall_decision(current, relaunches_so_far=relaunches, max_retries=self.settings.max_oom_retries,
                                      relaunch=self.watchman.settings.relaunch)  # fmt: skip
            return policy.decide(
                current, category, relaunches_so_far=relaunches, max_retries=self.settings.max_oom_retries,
                base_gpu_memory_utilization=self.settings.gpu_memory_utilization,
                kind=error.kind if error else None, evidence=error.excerpt if error else None,
                gpu_used_share=(error.model_extra or {}).get("gpu_used_share") if error else None,
            )  # fmt: skip

        decision = decide_from(config)
        if self.settings.extra_overrides:  # only the user's own overrides can make a rung change nothing
            decision = skip_pinned_rungs(decision, attempt.overrides, self._overrides_of, decide_from)
        refusal = self.watchman.gpu_hours_refusal(self.settings.required_gpus()) if decision.relaunch else None
        if refusal is not None:  # the optional GPU-hour cap of the same budget
            decision = policy.Decision(policy.Outcome.GPU_HOURS_CAP, refusal, suggestions=decision.suggestions or ("raise VAD_MAX_GPU_HOURS",))
        recorded = SupervisorDecision(relaunch=decision.relaunch, outcome=decision.outcome, reason=decision.reason,
                                      changes=list(decision.changes), suggestions=list(decision.suggestions))  # fmt: skip
        self.ctx.store.update_attempt(self.run_id, attempt.n, decision=recorded)
        if not decision.relaunch or decision.next_config is None:
            if decision.outcome in BUDGET_OUTCOMES and category is not None:  # the relaunch budget ran out
                self.watchman.budget_exhausted(attempt.n, category, decision.reason, relaunches,
                                               self.settings.max_oom_retries)  # fmt: skip
            return self._finish(RunStatus.FAILED, decision.reason, list(decision.suggestions))
        self.ctx.store.update_run(self.run_id, status=RunStatus.RETRYING)
        # The event says what happened: a stall's relaunch is no OOM recovery (recovery_event_kind).
        self.ctx.store.add_event(
            "warning", recovery_event_kind(category), f"attempt {attempt.n} failed ({decision.reason})",
            run_id=self.run_id, data={"attempt": attempt.n, "changes": list(decision.changes),
                                      "category": category.value if category else None, "relaunch": relaunches + 1,
                                      "max_relaunches": self.settings.max_oom_retries},
        )  # fmt: skip
        self.watchman.outbox.wake()
        # Independent: the old job's cleanup and the checkpoint check run at once.
        box: dict[str, resume_check.CheckpointState] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._check_checkpoint, attempt.n, box)
            await self._make_sure_dead(attempt)
        ckpt = box["ckpt"]
        progress = self.ctx.store.run(self.run_id).progress or {}  # type: ignore[union-attr]
        pace = pace_of(progress) if progress.get("attempt") == attempt.n else None  # what the next one is priced on
        self.ctx.store.update_attempt(self.run_id, attempt.n, decision=recorded.model_copy(update={
            "checkpoint": ckpt.to_dict(), "pace": pace}))  # fmt: skip
        resumed = ckpt.expected_step
        reason = f"{decision.reason}; resuming from step {resumed}" if resumed else decision.reason
        handle = await self._launch(attempt.n + 1, decision.next_config, reason, previous=attempt)
        return None if handle is not None else self.ctx.store.run(self.run_id).status  # type: ignore[union-attr]

    # -- launching ----------------------------------------------------------------------

    async def _launch(
        self, n: int, config: AttemptConfig, reason: str, previous: AttemptRow | None
    ) -> JobHandle | None:
        try:
            plan, secret_env = plan_for(self.ctx, self.spec, config, with_secrets=True)
        except PlanError as exc:  # e.g. a tweak the plan refuses: fail the run once, never crash-loop on it
            self.ctx.store.add_attempt(self.run_id, n, config=AttemptConfigRecord.of(config), overrides=[],
                                       override_diff=[], reason=reason)  # fmt: skip
            error = AttemptError(category=ErrorCategory.CONFIG_ERROR.value, kind="plan_error",
                                 excerpt=self.ctx.scrub(str(exc))[:2000], line=None)  # fmt: skip
            self.ctx.store.end_attempt(self.run_id, n, AttemptStatus.REJECTED, error=error)
            self._finish(RunStatus.FAILED, f"cannot plan attempt {n}: {self.ctx.scrub(str(exc))}",
                         ["fix the parameter named above; nothing was launched"])  # fmt: skip
            return None
        diff = override_diff(previous.overrides, plan.overrides) if previous else []
        # Where each value came from (recipe / feature / oom_ladder / user) and the plan's notes, e.g. an OOM
        # step that left the user's own value in place: check_errors shows them per attempt.
        recorded = AttemptConfigRecord.of(config, override_sources=dict(plan.sources), plan_notes=list(plan.notes))
        self.ctx.store.add_attempt(
            self.run_id, n, config=recorded, overrides=list(plan.overrides), override_diff=diff, reason=reason,
        )  # fmt: skip
        entry = plan.entry
        # This attempt's overrides and those an OOM would relaunch with, in one Hydra process in the target (one
        # interpreter start instead of two; the relaunch then finds its check done).
        await self._validations.prevalidate([plan, *self._ladder_plans(n, config)])
        result = await self._validations.result(entry, plan.overrides)
        if not result.ok:
            error = AttemptError(category=ErrorCategory.CONFIG_ERROR.value, kind="prelaunch_validation",
                                 excerpt=self.ctx.scrub(result.error or "")[:2000], line=None)  # fmt: skip
            self.ctx.store.end_attempt(self.run_id, n, AttemptStatus.REJECTED, error=error)
            self._finish(RunStatus.FAILED, "verl rejected the overrides before launch: " + (result.error or "")[:500],
                         ["fix the named key (see check_errors); nothing was launched"])  # fmt: skip
            return None
        if self._stop_flag():
            self.ctx.store.end_attempt(self.run_id, n, AttemptStatus.STOPPED)
            self._finish(RunStatus.STOPPED, "stopped on request before launch", [])
            return None
        log_path = self.spec.attempt_log(n)
        try:
            handle = await self.target.start_detached(
                plan.argv, env={**plan.env, **secret_env}, cwd=entry.cwd, job_dir=self.spec.attempt_dir(n),
                log_path=log_path,
            )  # fmt: skip
        except TargetError as exc:
            error = AttemptError(category=ErrorCategory.ENVIRONMENT.value, kind="launch_failed",
                                 excerpt=self.ctx.scrub(str(exc))[:2000], line=None)  # fmt: skip
            self.ctx.store.end_attempt(self.run_id, n, AttemptStatus.FAILED, error=error)
            self._finish(RunStatus.FAILED, f"could not launch: {self.ctx.scrub(str(exc))}", [])
            return None
        self._launched.add(n)
        self.ctx.store.update_attempt(self.run_id, n, status=AttemptStatus.RUNNING, job=handle)
        self.ctx.store.update_run(self.run_id, status=RunStatus.RUNNING)
        await self._link_stable_log(log_path)
        return handle

    def _overrides_of(self, config: AttemptConfig) -> tuple[str, ...]:
        return plan_for(self.ctx, self.spec, config, with_secrets=False)[0].overrides

    def _ladder_plans(self, n: int, config: AttemptConfig) -> list[LaunchPlan]:
        """The plans an OOM of attempt n would relaunch with (GPU and rollout ladders), to validate ahead. Only a
        cache: a plan that cannot be built is left out; the relaunch, if any, will meet and report it."""
        plans: list[LaunchPlan] = []
        try:
            for category, kind in ((ErrorCategory.GPU_OOM, None), (ErrorCategory.ROLLOUT_OOM, None),
                                   (ErrorCategory.ROLLOUT_OOM, "vllm_kv_cache")):  # fmt: skip
                decision = policy.decide(config, category,
                                         relaunches_so_far=relaunches_before(self.ctx.store.attempts(self.run_id), n),
                                         max_retries=self.settings.max_oom_retries, kind=kind,
                                         base_gpu_memory_utilization=self.settings.gpu_memory_utilization)  # fmt: skip
                if decision.relaunch and decision.next_config is not None:
                    plans.append(plan_for(self.ctx, self.spec, decision.next_config, with_secrets=False)[0])
        except Exception as exc:
            log.warning("ahead-of-time validation of the next rungs skipped: %s", exc)
        return plans

    async def _link_stable_log(self, log_path: str) -> None:
        """Point {VERL_HOME}/train.log at this attempt's log, for users who tail it."""
        try:
            await self.target.run(["ln", "-sfn", "--", log_path, self.spec.stable_log_path()], timeout=15)
        except TargetError as exc:  # a convenience: never fail a launch over it
            log.warning("could not link %s: %s", self.spec.stable_log_path(), exc)

    async def _reattach(self, attempt: AttemptRow) -> JobHandle | None:
        if attempt.job is None:
            # Died between recording and starting: the job dir tells whether it started.
            size = await self._pgid_size(attempt.n)
            if size is None:
                self.ctx.store.end_attempt(self.run_id, attempt.n, AttemptStatus.ABANDONED)
                config = attempt.config.attempt_config()
                return await self._relaunch_same(attempt, config)
            handle = JobHandle(target=self.spec.target, job_dir=self.spec.attempt_dir(attempt.n),
                               log_path=self.spec.attempt_log(attempt.n))  # fmt: skip
            self.ctx.store.update_attempt(self.run_id, attempt.n, status=AttemptStatus.RUNNING, job=handle)
            return handle
        log.info("reattaching to attempt %d", attempt.n)
        return attempt.handle

    async def _pgid_size(self, n: int) -> int | None:
        """The pgid file's size, waiting for it while a launch is under way. The target creates the job dir just
        before it starts the launcher, so a dir without a pgid is a launcher that may still be starting (slow
        under load): launching again then would put a second job beside it (seen: two launchers, attempts
        [1, 2]). No dir: the launch never began. A launcher that never records its pgid is given up on after
        what start_detached itself waits, plus a margin."""
        job_dir = self.spec.attempt_dir(n)
        size = await self.target.file_size(f"{job_dir}/pgid")
        if size is not None or not (await self.target.paths_exist([job_dir])).get(job_dir):
            return size
        log.info("attempt %d: its launch had begun; waiting for its pgid", n)
        deadline = time.monotonic() + LAUNCH_GRACE_SECONDS
        while size is None and time.monotonic() < deadline:
            await anyio.sleep(0.2)
            size = await self.target.file_size(f"{job_dir}/pgid")
        return size

    async def _relaunch_same(self, attempt: AttemptRow, config: AttemptConfig) -> JobHandle | None:
        previous = self.ctx.store.attempts(self.run_id)[-2] if attempt.n > 1 else None
        return await self._launch(attempt.n + 1, config, "supervisor restarted before the launch", previous)

    # -- recovery helpers -----------------------------------------------------------------

    async def _check_checkpoint(self, attempt_n: int, box: dict[str, resume_check.CheckpointState]) -> None:
        progress = self.ctx.store.run(self.run_id).progress or {}  # type: ignore[union-attr]
        last = progress.get("step") if progress.get("attempt") == attempt_n else None
        ckpt = await resume_check.inspect(self.target, checkpoint_dir_for(self.settings, self.run_id),
                                          save_freq=self.settings.save_freq, last_step=last)  # fmt: skip
        if ckpt.note:  # before the relaunch, not after: the user hears it from the supervisor, not from a lost run
            self.ctx.store.add_event("warning", "checkpoint_check", self.ctx.scrub(ckpt.note), run_id=self.run_id,
                                     data={"attempt": attempt_n + 1, **ckpt.to_dict()})  # fmt: skip
        if ckpt.lost_steps:  # trained past the checkpoint: done again, and said (issue 31)
            message, data = resume_check.lost_work(ckpt, attempt_n, save_freq=self.settings.save_freq,
                                                   total_steps=self.settings.train_steps, progress=progress)  # fmt: skip
            self.ctx.store.add_event("warning", "steps_lost", message, run_id=self.run_id, data=data)
        box["ckpt"] = ckpt

    async def _make_sure_dead(self, attempt: AttemptRow) -> None:
        """The previous attempt's processes (and Ray) must be gone before the next starts."""
        if attempt.job:
            try:
                await self.target.stop_job(attempt.handle, grace_seconds=5.0)
            except TargetError as exc:
                log.warning("cleanup of attempt %d: %s", attempt.n, exc)

    # -- state ------------------------------------------------------------------------------

    def _stop_flag(self) -> bool:
        try:
            row = self.ctx.store.run(self.run_id)
        except StoreBusy as exc:  # unreadable for now: what we knew; the next poll reads it again
            log.warning("stop flag unreadable (%s)", exc)
            return self._stop_requested
        self._stop_requested = self._stop_requested or bool(row and row.stop_requested)
        return self._stop_requested

    def _finish(self, status: RunStatus, reason: str, suggestions: list[str]) -> RunStatus:
        reason = self.ctx.scrub(reason)
        self.ctx.store.end_run(self.run_id, status, final_reason=reason, suggestions=suggestions)
        level = "info" if status in (RunStatus.SUCCEEDED, RunStatus.STOPPED) else "error"
        self.ctx.store.add_event(level, f"run_{status}", reason, run_id=self.run_id,
                                 data={"suggestions": suggestions})  # fmt: skip
        self.watchman.outbox.wake()
        return status

    async def _heartbeat(self) -> None:
        """Heartbeat for humans and tools, and the stop flag: a cheap read every second."""
        last_beat = 0.0
        while True:
            await anyio.sleep(STOP_POLL_SECONDS)
            if not self._stop_requested and self._stop_flag():
                await self._stop_current()
            if self._unsaved is not None and time.monotonic() - self._last_save >= PROGRESS_WRITE_SECONDS:
                self._save_progress(*self._unsaved)
            if time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                try:
                    self.ctx.store.update_run(self.run_id, heartbeat_at=time.time())
                except StoreBusy as exc:
                    log.warning("heartbeat skipped (%s)", exc)
                last_beat = time.monotonic()

    async def _stop_current(self) -> None:
        attempts = self.ctx.store.attempts(self.run_id)
        if attempts and attempts[-1].job and attempts[-1].status == AttemptStatus.RUNNING:
            try:
                await self.target.stop_job(attempts[-1].handle, grace_seconds=10.0)
            except TargetError as exc:
                log.error("stop failed: %s", exc)
