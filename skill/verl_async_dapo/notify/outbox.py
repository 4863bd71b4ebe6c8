"""The outbox: every notify-worthy event of a run reaches every sink once, even across supervisor kills.

The supervisor records an event (store.add_event) before anything is sent; this loop, running inside the
supervisor, turns each new wanted event into one ``notify_outbox`` row per configured sink, sends the due
rows and marks each after the service answered. A restarted supervisor resumes after the newest event that
already has rows (so an event recorded just before a kill is still sent, and nothing answered is sent again);
a failed send is retried with exponential backoff and given up after ``MAX_TRIES``. Sending never raises
into the supervisor: a broken sink cannot stop training.

Delivery is at-least-once only in one window: killed after a service received a request but before its
answer was recorded, the row is still pending and is sent again. The generic webhook carries the event id as
``Idempotency-Key`` for that case.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, replace

import anyio

from verl_async_dapo.context import AppContext
from verl_async_dapo.notify import config as notify_config
from verl_async_dapo.notify.events import render, wanted
from verl_async_dapo.notify.send import SendResult, send
from verl_async_dapo.status import DeliveryStatus

log = logging.getLogger("verl_async_dapo.notify")

POLL_SECONDS = 0.5  # the supervisor wakes the outbox at once for the events it records itself
CONFIG_TTL_SECONDS = 5.0
MAX_TRIES = 8
MAX_BACKOFF_SECONDS = 300.0
FLUSH_SECONDS = 30.0


def backoff(tries: int) -> float:
    return min(MAX_BACKOFF_SECONDS, 2.0 ** max(0, tries - 1))


class Outbox:
    def __init__(self, ctx: AppContext, run_id: str) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self._cursor = max((r.event_id for r in ctx.store.outbox_rows(run_id)), default=0)
        self._config: notify_config.NotifyConfig | None = None
        self._config_at = -1e9
        self._wake = anyio.Event()
        # The polling task and the end-of-run flush both call step(): one at a time, or both would send a due row.
        self._lock = anyio.Lock()

    def config(self) -> notify_config.NotifyConfig:
        if time.monotonic() - self._config_at >= CONFIG_TTL_SECONDS:
            try:
                self._config = notify_config.resolve(self.ctx.env, self.ctx.config_home / notify_config.CONFIG_FILE_NAME,
                                                     self.ctx.secrets)  # fmt: skip
            except notify_config.NotifyConfigError as exc:
                log.warning("notifications off: %s", self.ctx.scrub(str(exc)))
                self._config = notify_config.NotifyConfig()
            self._config_at = time.monotonic()
        assert self._config is not None
        return self._config

    def wake(self) -> None:
        self._wake.set()

    def scan(self) -> int:
        """Enqueue the run's new wanted events; returns how many rows were added."""
        cfg = self.config()
        if not cfg.sinks:  # nothing to send: only move past what happened meanwhile (one cheap query)
            self._cursor = max(self._cursor, self.ctx.store.last_event_id())
            return 0
        added = 0
        for event in self.ctx.store.events(self.run_id, after_id=self._cursor, limit=500):
            self._cursor = event.id
            to = [s.kind.value for s in cfg.sinks if wanted(event.kind, cfg.events_for(s))]  # filters are per sink
            if to:
                added += self.ctx.store.outbox_enqueue(event.id, self.run_id, to)
        return added

    async def deliver_due(self) -> int:
        """Send every due row once; returns how many were sent."""
        sent = 0
        for row in self.ctx.store.outbox_due(self.run_id, time.time()):
            sent += await self._deliver(row.event_id, row.sink, row.tries)
        return sent

    async def _deliver(self, event_id: int, sink_name: str, tries: int) -> int:
        store = self.ctx.store
        sink = self.config().sink(sink_name)
        event = store.event(event_id)
        if sink is None or event is None:
            store.outbox_mark(event_id, sink_name, status=DeliveryStatus.FAILED, tries=tries, next_at=time.time(),
                              answer="the sink is no longer configured")  # fmt: skip
            return 0
        run = store.run(self.run_id)
        attempts = store.attempts(self.run_id)
        last_error = next((a.attempt_error for a in reversed(attempts) if a.error), None)
        notice = render(asdict(event), run.target if run else None, last_error)
        notice = replace(notice, text=self.ctx.scrub(notice.text), title=self.ctx.scrub(notice.title))
        try:
            result = await send(sink, notice, self.ctx.env)
        except Exception as exc:  # our bug must not stop the supervisor either
            result = SendResult(False, f"send crashed: {type(exc).__name__}")
        answer = self.ctx.scrub(result.answer)
        tries += 1
        if result.ok:
            store.outbox_mark(event_id, sink_name, status=DeliveryStatus.SENT, tries=tries, next_at=time.time(),
                              answer=answer)  # fmt: skip
            log.info("event %d (%s) sent to %s: %s", event_id, event.kind, sink_name, answer)
            return 1
        give_up = not result.retry or tries >= MAX_TRIES
        status = DeliveryStatus.FAILED if give_up else DeliveryStatus.PENDING
        store.outbox_mark(event_id, sink_name, status=status, tries=tries, next_at=time.time() + backoff(tries),
                          answer=answer)  # fmt: skip
        log.warning("event %d (%s) to %s failed (try %d%s): %s", event_id, event.kind, sink_name, tries,
                    ", giving up" if give_up else "", answer)  # fmt: skip
        return 0

    async def run_forever(self) -> None:
        """The supervisor's task: poll, enqueue, send. Errors are logged, never raised."""
        while True:
            await self.step()
            with anyio.move_on_after(POLL_SECONDS):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def step(self) -> None:
        try:
            async with self._lock:
                self.scan()
                if self.config().sinks:
                    await self.deliver_due()
        except Exception as exc:
            log.warning("notification outbox: %s", self.ctx.scrub(f"{type(exc).__name__}: {exc}"))

    async def flush(self, seconds: float = FLUSH_SECONDS) -> None:
        """At the run's end: keep delivering until nothing is pending or ``seconds`` have passed."""
        with anyio.move_on_after(seconds):
            while True:
                await self.step()
                if self.ctx.store.outbox_pending(self.run_id) == 0:
                    return
                await anyio.sleep(POLL_SECONDS)
