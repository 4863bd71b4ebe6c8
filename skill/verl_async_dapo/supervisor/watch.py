"""Following one attempt: its log as a stream to the end, progress kept fresh, the outcome recorded.

A part of ``Supervisor`` (its base class), kept apart for size; it uses the supervisor's state
(``ctx``, ``run_id``, ``target``, ``watchman``, ``_progress``, the stop flag).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.exceptions import StoreBusy, TargetError, TargetGone
from verl_async_dapo.logs.classify import CLASSIFY_WINDOW_BYTES, window_text
from verl_async_dapo.logs.progress import ProgressParser
from verl_async_dapo.records import AttemptError, JobHandle
from verl_async_dapo.status import AttemptStatus
from verl_async_dapo.store import AttemptRow
from verl_async_dapo.supervisor.attempt_log import AttemptLog, attempt_error
from verl_async_dapo.targets.base import JobStatus

log = logging.getLogger("verl_async_dapo.supervisor")

PROGRESS_WRITE_SECONDS = 2.0
FOLLOW_RETRY_SECONDS = 2.0


class AttemptWatching:
    """The watching methods of ``Supervisor``."""

    ctx: Any
    run_id: str
    target: Any
    watchman: Any
    _progress: Any
    _launched: set[int]
    _target_gone: str | None
    _unsaved: Any
    _last_save: float

    # -- watching -----------------------------------------------------------------------

    async def _watch(self, attempt: AttemptRow, handle: JobHandle) -> None:
        """Follow the log until the job ends, keeping progress fresh; then record the outcome."""
        # An attempt this process launched is read from its first byte (resume lines come first); a reattached
        # one from its last MiB, so a multi-GB log never has to be read whole.
        reader = await AttemptLog.open(self.target, handle, from_start=attempt.n in self._launched)
        parser = reader.parser
        tail: dict[str, Any] = {}
        self.watchman.attempt_started(attempt.n, handle)
        while True:
            ended_cleanly = False
            try:
                async for chunk in self.target.follow(handle, from_offset=reader.position):  # resumes where it broke
                    reader.take(chunk)
                    self.watchman.output(reader.parser)
                    if time.monotonic() - self._last_save >= PROGRESS_WRITE_SECONDS:
                        self._save_progress(parser, attempt.n)
                    else:  # the heartbeat writes it if no chunk follows (a step's last lines, then silence)
                        self._unsaved = (parser, attempt.n)
                ended_cleanly = True
            except TargetError as exc:
                log.warning("lost the log stream (%s); retrying", exc)
            tail = {}
            async with anyio.create_task_group() as tg:
                if ended_cleanly:  # tail --pid ended: the launcher is gone, the log complete; read it meanwhile
                    tg.start_soon(self._read_tail_into, handle, tail)
                status = await self._job_status(handle)
            if status is not None and not status.running:
                break
            await anyio.sleep(FOLLOW_RETRY_SECONDS)
        if self._target_gone is None:  # final progress is the last line's: read what the stream did not deliver
            try:
                await reader.read_rest(self.target, handle)
            except TargetError as exc:
                log.warning("could not read the end of the log (%s); progress may lag", exc)
        self._save_progress(parser, attempt.n)
        self._unsaved = None
        self.watchman.attempt_ended()
        if self._target_gone is not None:
            error = AttemptError(category=ErrorCategory.ENVIRONMENT.value, kind="target_gone", line=None,
                                 excerpt=self.ctx.scrub(self._target_gone))  # fmt: skip
            ended = AttemptStatus.STOPPED if self._stop_flag() else AttemptStatus.FAILED
            self.ctx.store.end_attempt(self.run_id, attempt.n, ended, error=error)
            if ended is AttemptStatus.FAILED:
                self.watchman.target_gone(attempt.n, error.excerpt or "")
            return
        if not tail:
            await self._read_tail_into(handle, tail)
        if "error" in tail:
            raise tail["error"]
        text = window_text(tail["data"])
        exit_code = status.exit_code
        if exit_code == 0:
            self.ctx.store.end_attempt(self.run_id, attempt.n, AttemptStatus.SUCCEEDED, exit_code=0)
            return
        if self._stop_flag():
            # Our own stop ended it (the group kill takes the launcher too, so often no rc): not an error.
            self.ctx.store.end_attempt(self.run_id, attempt.n, AttemptStatus.STOPPED, exit_code=exit_code)
            return
        # Stopped by the watchman for a stall: the silence is the cause, not what the kill printed.
        error = self.watchman.stalled_error(attempt.n) or attempt_error(text, exit_code, self.ctx.scrub)
        self.ctx.store.end_attempt(self.run_id, attempt.n, AttemptStatus.FAILED, exit_code=exit_code, error=error)

    async def _read_tail_into(self, handle: JobHandle, box: dict[str, Any]) -> None:
        """The log's classification window (its last MiB), into ``box`` ("data", or the "error" to raise)."""
        try:
            box["data"] = await self.target.read_tail(handle.log_path, CLASSIFY_WINDOW_BYTES)
        except TargetError as exc:
            box["error"] = exc

    async def _job_status(self, handle: JobHandle) -> Any:
        try:
            return await self.target.job_status(handle)
        except TargetGone as exc:  # container removed or stopped: its processes died with it
            self._target_gone = str(exc)
            return JobStatus(running=False, exit_code=None, pgid=None)
        except TargetError as exc:
            log.warning("cannot read job status (%s); will retry", exc)
            return None

    def _save_progress(self, parser: ProgressParser, attempt_n: int) -> None:
        self._unsaved = None
        self._last_save = time.monotonic()
        try:
            self._progress.save(parser.snapshot().to_dict(), attempt_n)
        except StoreBusy as exc:  # keep following the log; the heartbeat writes it once the lock is gone
            log.warning("progress not saved (%s); keeps watching", exc)
            self._unsaved = (parser, attempt_n)
