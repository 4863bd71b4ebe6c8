"""One attempt's log as the supervisor reads it: the exact byte position reached, arrival times, and the rest.

The supervisor follows the log as a stream, but a stream can end before the file does (a cut ``docker exec``
stream, a killed ``tail``, an error near the end): the last snapshot was then the one from the middle of the
run ("succeeded at 6/10, ETA 1.6 s"). So the position read so far is kept, a broken stream is resumed from it
(not from "the last MiB", which re-reads lines), and once the job has ended everything after it is read before
the final snapshot is stored (``read_rest``): final progress is the last line's.

A reattached supervisor starts one MiB before the end: those bytes are a backlog, printed at unknown times, so
they are fed without an arrival time (they count towards progress, never towards a wall-clock rate).
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable
from typing import Any

import verl_async_dapo.supervisor.resume_check as resume_check
from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.logs.classify import classify
from verl_async_dapo.logs.memory import gpu_used_share
from verl_async_dapo.logs.pace import pace_of, relaunch_cost
from verl_async_dapo.logs.progress import ProgressParser
from verl_async_dapo.notify.events import FEATURE_COST
from verl_async_dapo.records import AttemptError, JobHandle
from verl_async_dapo.targets.base import FOLLOW_DEFAULT_BYTES, Target

READ_REST_BYTES = 8 << 20  # one read_range at the end; the rest of a log is read in pieces of this size
# The most the supervisor spends parsing one piece of log (a chunk of the stream, a read at the end): past it, the
# piece's end is read and the progress says "parsing cut short" — the supervisor keeps watching (issue 27: a crafted
# line kept it busy 452 s, with no OOM relaunch).
FEED_BUDGET_S = 2.0


class AttemptLog:
    def __init__(self, parser: ProgressParser, position: int | None, live_from: int = 0) -> None:
        self.parser = parser
        # Bytes of the file consumed so far; None when unknown (the stream then starts at the last MiB).
        self.position = position
        self.live_from = live_from  # bytes before this offset are a backlog (no arrival time)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    @classmethod
    async def open(cls, target: Target, handle: JobHandle, *, from_start: bool) -> AttemptLog:
        """From byte 0 for an attempt this process launched; else from one MiB before the current end."""
        if from_start:
            return cls(ProgressParser(), 0)
        try:
            size = await target.file_size(handle.log_path)
        except TargetError:
            size = None
        if size is None:
            return cls(ProgressParser(), None, live_from=1 << 62)
        return cls(ProgressParser(), max(0, size - FOLLOW_DEFAULT_BYTES), live_from=size)

    def take(self, chunk: bytes) -> None:
        live = self.position is not None and self.position >= self.live_from
        self.parser.feed(self._decoder.decode(chunk), now=time.time() if live else None, budget_s=FEED_BUDGET_S)
        if self.position is not None:
            self.position += len(chunk)

    async def read_rest(self, target: Target, handle: JobHandle) -> None:
        """After the job ended: whatever the stream did not deliver, up to the end of the file."""
        if self.position is None:
            return
        while True:
            data = await target.read_range(handle.log_path, self.position, READ_REST_BYTES)
            if not data:
                break
            self.parser.feed(self._decoder.decode(data), budget_s=FEED_BUDGET_S)
            self.position += len(data)
            if len(data) < READ_REST_BYTES:
                break
        self.parser.feed(self._decoder.decode(b"", final=True))


class ProgressWriter:
    """Stores an attempt's progress snapshot on the run (links scrubbed) with its resume check."""

    def __init__(self, ctx: AppContext, run_id: str) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self._warned = 0  # the attempt whose lost steps were already announced
        self._priced = 0  # the attempt whose memory features' cost was already announced

    def save(self, snapshot: dict[str, Any], attempt_n: int) -> None:
        snapshot["attempt"] = attempt_n
        snapshot["resume_check"] = self._resume_check(attempt_n, snapshot)
        self._announce_cost(attempt_n, snapshot)
        for key in ("swanlab_url", "swanlab_project_url"):  # links printed by the training: may carry a token
            if snapshot.get(key):
                snapshot[key] = self.ctx.scrub(snapshot[key])
        fields: dict[str, Any] = {"progress": snapshot, "progress_at": time.time(), "heartbeat_at": time.time()}
        if snapshot.get("swanlab_url"):
            fields["swanlab_url"] = snapshot["swanlab_url"]
        self.ctx.store.update_run(self.run_id, **fields)

    def _resume_check(self, attempt_n: int, snapshot: dict[str, Any]) -> str | None:
        """Did verl resume where the checkpoint check before this attempt said it would? Said once as an event."""
        attempts = self.ctx.store.attempts(self.run_id) if attempt_n > 1 else []
        decided = attempts[attempt_n - 2].supervisor_decision if len(attempts) >= attempt_n else None
        expected = decided.checkpoint if decided else None
        verdict = resume_check.verify(expected, snapshot)
        if verdict is not None and verdict.lost_steps > 0 and self._warned != attempt_n:
            self._warned = attempt_n
            self.ctx.store.add_event("warning", "resume_lost", f"attempt {attempt_n} {verdict.message}",
                                     run_id=self.run_id, data={"attempt": attempt_n})  # fmt: skip
        return verdict.message if verdict is not None else None


    def _announce_cost(self, attempt_n: int, snapshot: dict[str, Any]) -> None:
        """Once a relaunched attempt has a steady pace: what the memory features it added cost (issue 31), as an
        event the user is notified of (a relaunch with offload can make every step 3x slower)."""
        if attempt_n < 2 or self._priced == attempt_n:
            return
        attempts = self.ctx.store.attempts(self.run_id)
        if len(attempts) < attempt_n:
            return
        before, now = attempts[attempt_n - 2], attempts[attempt_n - 1]
        cost = relaunch_cost(before.config.oom_appended, now.config.oom_appended,
                             before.supervisor_decision.pace if before.supervisor_decision else None, pace_of(snapshot))  # fmt: skip
        if cost is not None:
            self._priced = attempt_n
            self.ctx.store.add_event("warning", FEATURE_COST, f"attempt {attempt_n}: {cost}", run_id=self.run_id,
                                     data={"attempt": attempt_n, "cost": cost})  # fmt: skip


def attempt_error(text: str, exit_code: int | None, scrub: Callable[[str], str]) -> AttemptError | None:
    """What a failed attempt's log tail says, as stored on the attempt (None: no finding and a real exit code)."""
    found = classify(text).primary
    if found is not None:  # gpu_used_share: the room a raise of the rollout share may take (rollout_policy)
        return AttemptError(category=found.category.value, kind=found.kind, line=found.line,
                            excerpt=scrub(found.excerpt), phase=found.phase, gpu_used_share=gpu_used_share(text))  # fmt: skip
    if exit_code is None:
        return AttemptError(category=ErrorCategory.WORKER_DIED.value, kind="no_exit_code", line=None,
                            excerpt="the job vanished without recording an exit code (container restarted?)")  # fmt: skip
    return None


def scheduler_outcome(state: str | None, text: str, exit_code: int | None,
                      scrub: Callable[[str], str]) -> AttemptError | None:  # fmt: skip
    """A failed attempt's error when a batch scheduler ran it (``state``: its final job state, e.g. TIMEOUT).

    The scheduler's word comes first: a job ended at its time limit, preempted or on a failed node is a
    SCHEDULER_KILL whatever its log says (the trainer only printed how it died of the SIGTERM). Otherwise the log
    decides, as on the other targets; SLURM's OUT_OF_MEMORY (its cgroup's OOM kill) is a host OOM when the log
    itself names nothing."""
    from verl_async_dapo.targets.slurm.states import SCHEDULER_KILLS

    if state in SCHEDULER_KILLS:
        kind, meaning = SCHEDULER_KILLS[state]
        said = [ln.strip() for ln in text.splitlines() if "slurmstepd" in ln and "***" in ln]
        excerpt = f"{meaning} (SLURM job state {state})" + (f"\n{said[-1]}" if said else "")
        return AttemptError(category=ErrorCategory.SCHEDULER_KILL.value, kind=kind, line=None,
                            excerpt=scrub(excerpt)[:2000])  # fmt: skip
    found = attempt_error(text, exit_code, scrub)
    if found is None and state == "OUT_OF_MEMORY":
        return AttemptError(category=ErrorCategory.HOST_OOM.value, kind="slurm_out_of_memory", line=None,
                            excerpt="SLURM ended the job for using more memory than it was given (OUT_OF_MEMORY)")  # fmt: skip
    return found
