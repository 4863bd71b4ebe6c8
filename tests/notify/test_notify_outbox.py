"""The outbox against the real state store and the service stand-in: each wanted event reaches each sink once;
failures are retried with backoff, then given up; a new outbox (a restarted supervisor) sends what was pending
or never enqueued and nothing that was answered."""

from __future__ import annotations

import anyio
import pytest
from notify_services import CANARY_SECRET, Services

from harness.records import run_spec
from verl_async_dapo.context import AppContext
from verl_async_dapo.notify import outbox as outbox_mod
from verl_async_dapo.notify.outbox import Outbox
from verl_async_dapo.notify.service import configure


def _run(app: AppContext) -> str:
    sid = app.store.create_session()
    return app.store.create_run(sid, "jins", run_spec("jins"))


def _drain(box: Outbox, rounds: int = 20) -> None:
    async def go() -> None:
        for _ in range(rounds):
            await box.step()
            await anyio.sleep(0.01)

    anyio.run(go)


@pytest.fixture
def wired(app: AppContext, svc: Services) -> AppContext:
    anyio.run(lambda: configure(app, kind="slack", url=svc.url("slack")))
    anyio.run(lambda: configure(app, kind="feishu", url=svc.url("feishu"), secret=CANARY_SECRET))
    svc.received.clear()
    return app


def test_errors_only_by_default_each_sent_once_per_sink(wired: AppContext, svc: Services) -> None:
    run_id = _run(wired)
    wired.store.add_event("warning", "oom_recovery", "attempt 1 failed (gpu_oom: relaunching with +offload)",
                          run_id=run_id, data={"attempt": 1, "changes": ["+offload"], "category": "gpu_oom",
                                               "relaunch": 1, "max_relaunches": 2})  # fmt: skip
    wired.store.add_event("info", "run_succeeded", "training finished", run_id=run_id)
    box = Outbox(wired, run_id)
    _drain(box)
    _drain(box)
    assert [r.verdict for r in svc.of("slack")] == ["ok"] and [r.verdict for r in svc.of("feishu")] == ["ok"]
    text = svc.of("slack")[0].json()["text"]
    assert "gpu_oom in attempt 1: relaunching (relaunch 1 of 2)" in text and "+offload" in text
    assert f"run {run_id} on jins" in text and f"check_errors run_id={run_id}" in text
    rows = wired.store.outbox_rows(run_id)
    assert [(r.sink, r.status, r.tries) for r in rows] == [("feishu", "sent", 1), ("slack", "sent", 1)]
    assert all("code 0" in (r.answer or "") or "ok" in (r.answer or "") for r in rows)


def test_opt_in_succeeded(wired: AppContext, svc: Services) -> None:
    anyio.run(lambda: configure(wired, events="succeeded", test=False))
    run_id = _run(wired)
    wired.store.add_event("info", "run_succeeded", "training finished (exit code 0)", run_id=run_id)
    wired.store.add_event("info", "run_stopped", "stopped on request", run_id=run_id)  # never notified
    _drain(Outbox(wired, run_id))
    assert len(svc.of("slack")) == 1 and "training finished" in svc.of("slack")[0].json()["text"]


def test_a_failing_sink_is_retried_with_backoff_and_does_not_hold_the_other(
    wired: AppContext, svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    real = outbox_mod.backoff
    monkeypatch.setattr(outbox_mod, "backoff", lambda tries: (waits.append(real(tries)), 0.0)[1])  # record, no wait
    run_id = _run(wired)
    svc.fail_next = 2  # the first two requests (whichever sink) get 503
    wired.store.add_event("error", "run_failed", "config_error: bad batch", run_id=run_id)
    _drain(Outbox(wired, run_id))
    delivered = [r for r in svc.received if r.verdict == "ok"]
    assert sorted(r.service for r in delivered) == ["feishu", "slack"]
    assert waits == [1.0, 1.0]  # each sink's first failure: retry in 1 s
    assert [real(n) for n in (1, 2, 3, 9, 30)] == [1.0, 2.0, 4.0, 256.0, outbox_mod.MAX_BACKOFF_SECONDS]
    assert {r.status for r in wired.store.outbox_rows(run_id)} == {"sent"}


def test_gives_up_after_max_tries(wired: AppContext, svc: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox_mod, "backoff", lambda tries: 0.0)
    run_id = _run(wired)
    svc.fail_next = 10_000
    wired.store.add_event("error", "run_failed", "boom", run_id=run_id)
    _drain(Outbox(wired, run_id), rounds=3 * outbox_mod.MAX_TRIES)
    rows = wired.store.outbox_rows(run_id)
    assert [(r.status, r.tries) for r in rows] == [("failed", outbox_mod.MAX_TRIES)] * 2
    assert len(svc.received) == 2 * outbox_mod.MAX_TRIES


def test_a_restarted_outbox_sends_the_unsent_and_repeats_nothing(wired: AppContext, svc: Services) -> None:
    run_id = _run(wired)
    wired.store.add_event("error", "run_stalled", "attempt 1: no output", run_id=run_id,
                          data={"attempt": 1, "silent_seconds": 1300, "window_seconds": 1200, "step": 3})  # fmt: skip
    first = Outbox(wired, run_id)
    _drain(first)
    # Killed after recording the next event, before enqueueing it (the supervisor records before it sends):
    wired.store.add_event("error", "run_failed", "stalled", run_id=run_id)
    # a second one is killed right after enqueueing it (rows pending, nothing sent):
    Outbox(wired, run_id).scan()
    # the third sends it, once, and not the first event again.
    _drain(Outbox(wired, run_id))
    kinds = sorted((r.service, r.json().get("text", r.json().get("content", {}).get("text", ""))[:22])
                   for r in svc.received)  # fmt: skip
    assert len(svc.of("slack")) == 2 and len(svc.of("feishu")) == 2, kinds
    titles = [r.json()["text"].splitlines()[0] for r in svc.of("slack")]
    assert titles == [f"[verl] training stalled: run {run_id} on jins", f"[verl] training failed: run {run_id} on jins"]


def test_the_payload_log_never_holds_a_secret(wired: AppContext, svc: Services) -> None:
    run_id = _run(wired)
    wired.store.add_event("error", "run_failed", f"leaked {CANARY_SECRET} into a message", run_id=run_id)
    _drain(Outbox(wired, run_id))
    for got in svc.received:
        assert CANARY_SECRET not in got.body.decode()
    for row in wired.store.outbox_rows(run_id):
        assert CANARY_SECRET not in (row.answer or "")


def test_concurrent_steps_send_each_row_once(wired: AppContext, svc: Services) -> None:
    # The supervisor's polling task and its end-of-run flush run at the same time.
    run_id = _run(wired)
    wired.store.add_event("error", "run_failed", "boom", run_id=run_id)
    box = Outbox(wired, run_id)

    async def both() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(box.step)
        await box.flush(5)

    anyio.run(both)
    assert len(svc.of("slack")) == 1 and len(svc.of("feishu")) == 1
