"""The watchman end to end: stand-in runs in a real container that OOM, fail, hang and finish produce exactly the
expected notifications at a real webhook on 127.0.0.1 (tests/notify/notify_services.py, which checks the HMAC
signature); a hang is flagged as stalled with its evidence; a supervisor killed with a notification pending
neither loses nor repeats it; the signing secret and the URL's token never appear in any output or state.
Which events a run's course notifies (relaunch, failure, budget, GPU-hour cap, every N steps, a stall's relaunch)
is decided in-process in tests/decisions/test_notify_decisions.py.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker.models.containers import Container
from sv_helpers import Cli, proc_alive, write_control

from harness.waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notify"))
from notify_services import CANARY_SECRET, Services, services

from verl_async_dapo.notify.outbox import POLL_SECONDS

STEP_S = 0.1


@pytest.fixture
def hook(cli: Cli) -> Iterator[Services]:
    with services(webhook=CANARY_SECRET) as state:
        cli.set(VAD_NOTIFY_WEBHOOK_URL=state.url("webhook"), VAD_NOTIFY_WEBHOOK_SECRET=CANARY_SECRET)
        yield state


def _events(hook: Services) -> list[str]:
    return [r.json()["event"] for r in hook.of("webhook") if r.verdict == "ok"]


def _wait_events(hook: Services, cli: Cli, run_id: str, expected: list[str], timeout: float = 60) -> None:
    wait_until(lambda: _events(hook) == expected or None, f"notifications {expected} (got {_events(hook)})",
               timeout, lambda: cli.explain(run_id))  # fmt: skip


def _no_leak(cli: Cli, run_id: str, *texts: str) -> None:
    """The canary secret is in no output, no log, no state (DB + WAL), no supervisor log."""
    blobs = list(texts)
    for path in cli.home.rglob("*"):
        if path.is_file() and "secrets" not in path.parts:  # the secret store holds it, by design
            blobs.append(path.read_bytes().decode("utf-8", errors="replace"))
    for blob in blobs:
        assert CANARY_SECRET not in blob


def test_a_hang_is_flagged_stalled_with_evidence(cli: Cli, verl_docker: Container, hook: Services) -> None:
    cli.set(VAD_STALL_MIN_SECONDS=3, VAD_STALL_FACTOR=5, VAD_STALL_STARTUP_SECONDS=120)
    write_control(verl_docker, {"hang": True, "fail_at_step": 3, "step_seconds": STEP_S})
    run_id = cli.start(verl_docker.name)["run_id"]
    cli.wait_step(run_id, 2)
    _wait_events(hook, cli, run_id, ["run_stalled"], timeout=60)
    status = cli.status(run_id)
    assert status["status"] == "running" and status["stalled"] is True
    assert status["stalled_for_seconds"] >= 3
    stall = cli.errors(run_id)["stall"]
    assert stall["stalled"] is True and stall["window_seconds"] == 3 and stall["step"] == 2
    evidence = stall["evidence"]
    assert any("Training Progress" in line for line in evidence["last_log_lines"])
    assert evidence["nvidia_smi"].startswith("nvidia-smi unavailable")  # the test image has no GPU
    assert any("main_dapo" in line for line in evidence["processes"])
    assert "pip install py-spy" in evidence["py_spy"]
    text = hook.of("webhook")[0].json()["text"]
    assert "no new step and no log output" in text and "Left running" in text
    assert len(hook.of("webhook")) == 1  # flagged once per silence


def test_a_supervisor_killed_with_a_pending_notification_neither_loses_nor_repeats_it(
    cli: Cli, verl_docker: Container, hook: Services
) -> None:
    hook.fail_next = 1  # the first delivery gets a 503: it stays pending (retry in 1 s) ...
    write_control(verl_docker, {"fail": "config", "step_seconds": STEP_S})
    run_id = cli.start(verl_docker.name)["run_id"]
    wait_until(lambda: hook.of("webhook") or None, "the first delivery attempt", 60, lambda: cli.explain(run_id))
    # The hook answering 503 is not yet the supervisor recording it: wait for the recorded try, not the request
    # (killed in between, the row still said tries=0 under load).
    wait_until(lambda: [r.tries for r in cli.store.outbox_rows(run_id)] == [1] or None, "the failed try recorded", 30,
               lambda: cli.explain(run_id))  # fmt: skip
    pid = cli.run_row(run_id).supervisor_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # ... and its supervisor dies before the retry
    wait_until(lambda: not proc_alive(pid), "the supervisor to die", 10)
    rows = cli.store.outbox_rows(run_id)
    assert [(r.status, r.tries) for r in rows] == [("pending", 1)], rows
    # The run has ended; a status call heals it: a supervisor that only delivers what is still owed.
    cli.status(run_id)
    wait_until(lambda: cli.store.outbox_rows(run_id)[0].status == "sent" or None, "the pending notification", 30,
               lambda: cli.explain(run_id))  # fmt: skip
    time.sleep(2 * POLL_SECONDS)  # two outbox polls after the send: a repeat would have gone by now
    ok = [r for r in hook.of("webhook") if r.verdict == "ok"]
    assert [r.json()["event"] for r in ok] == ["run_failed"], cli.explain(run_id)
    assert [(r.status, r.tries) for r in cli.store.outbox_rows(run_id)] == [("sent", 2)]

    # The outbox table, after a failed try, a retry by another supervisor and a send, holds no secret (a test of
    # its own until 2026-12-04, on a run of the same shape that failed, notified and ended).
    assert cli.run_row(run_id).status == "failed"
    db = sqlite3.connect(cli.home / "state.db")
    dump = "\n".join(db.iterdump())
    db.close()
    assert CANARY_SECRET not in dump and hook.url("webhook") not in dump
    _no_leak(cli, run_id, str(cli.status(run_id)), str(cli.errors(run_id)))  # nor any file, log or output


def test_killed_while_the_service_holds_the_request_it_is_resent_with_the_same_idempotency_key(
    cli: Cli, verl_docker: Container, hook: Services
) -> None:
    # The one at-least-once window (references/notifications.md §4): the service got the request, the supervisor
    # died before recording the answer. Nothing is lost, and the repeat is recognisable as one.
    hook.hold = 5.0
    write_control(verl_docker, {"fail": "config", "step_seconds": STEP_S})
    run_id = cli.start(verl_docker.name)["run_id"]
    wait_until(lambda: hook.of("webhook") or None, "the request to arrive", 60, lambda: cli.explain(run_id))
    pid = cli.run_row(run_id).supervisor_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(pid), "the supervisor to die", 10)
    assert [r.status for r in cli.store.outbox_rows(run_id)] == ["pending"]
    hook.hold = 0.0
    cli.status(run_id)  # heal: a supervisor that delivers what is still owed
    wait_until(lambda: cli.store.outbox_rows(run_id)[0].status == "sent" or None, "the resend", 30,
               lambda: cli.explain(run_id))  # fmt: skip
    got = hook.of("webhook")
    assert len(got) == 2 and {r.headers["idempotency-key"] for r in got} == {got[0].headers["idempotency-key"]}
    assert [r.json()["event"] for r in got] == ["run_failed", "run_failed"]
