"""What the watchman tells a real webhook on 127.0.0.1 (tests/notify/notify_services.py checks the HMAC signature),
in-process: an OOM relaunch then success, a failure with its cause and suggestions, an exhausted relaunch budget,
the GPU-hour cap, progress every N steps, and a stall relaunch told as a stall's (not an OOM's).

Moved here from tests/supervisor/test_supervisor_notify.py, which keeps what needs processes: a hang flagged with
its evidence (process list, py-spy), a supervisor killed with a notification pending or in flight, and the state
files scanned for the signing secret."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from harness.inprocess_runs import InProcessRuns, write_control

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notify"))
from notify_services import CANARY_SECRET, Services, services

STEP_S = 0.01


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[Services]:
    with services(webhook=CANARY_SECRET) as state:
        monkeypatch.setenv("VAD_NOTIFY_WEBHOOK_URL", state.url("webhook"))
        monkeypatch.setenv("VAD_NOTIFY_WEBHOOK_SECRET", CANARY_SECRET)
        yield state


def events(hook: Services) -> list[str]:
    return [r.json()["event"] for r in hook.of("webhook") if r.verdict == "ok"]


async def supervised(inprocess: InProcessRuns) -> tuple[str, str]:
    """(run id, final status): the notifications of the final event are flushed before the supervisor returns."""
    run_id = await inprocess.start()
    return run_id, await inprocess.supervise(run_id)


async def test_oom_relaunch_then_success_notifies_exactly_those(inprocess: InProcessRuns, hook: Services,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("VAD_NOTIFY_EVENTS", "succeeded")
    write_control(inprocess.tree, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": STEP_S})
    run_id, final = await supervised(inprocess)
    assert final == "succeeded", inprocess.explain(run_id)
    # The relaunch, then what its offload costs once attempt 2 has a steady pace (issue 31 item 4), then the end.
    assert events(hook) == ["oom_recovery", "feature_cost", "run_succeeded"]
    oom, cost, done = (r.json() for r in hook.of("webhook"))
    assert oom["run_id"] == run_id and oom["target"] == "host"
    assert oom["title"] == "[verl] gpu_oom in attempt 1: relaunching (relaunch 1 of 2)"
    assert "+offload" in oom["text"]
    assert oom["look_closer"] == f"verl-async-dapo errors {run_id} (MCP: check_errors run_id={run_id})"
    assert cost["title"] == f"[verl] what the OOM recovery costs in attempt 2: run {run_id} on host"
    assert "+offload: " in cost["text"] and " a step (" in cost["text"] and "peak GPU memory 61.9 → 38.4 GiB" in cost["text"]
    assert done["title"].startswith("[verl] training finished")
    assert len({r.headers["idempotency-key"] for r in hook.of("webhook")}) == 3
    await anyio.sleep(0.5)
    assert len(hook.of("webhook")) == 3  # nothing more, nothing twice


async def test_a_failure_notifies_the_cause_excerpt_and_suggestions(inprocess: InProcessRuns, hook: Services) -> None:
    write_control(inprocess.tree, {"fail": "config", "step_seconds": STEP_S})
    run_id, final = await supervised(inprocess)
    assert final == "failed", inprocess.explain(run_id)
    assert events(hook) == ["run_failed"]  # errors only: no success, no relaunch
    failed = hook.of("webhook")[0].json()
    assert failed["level"] == "error" and failed["text"].startswith("config_error")
    assert "divisible" in failed["text"] and "Try: " in failed["text"]


async def test_oom_past_the_budget_notifies_the_exhausted_budget(inprocess: InProcessRuns, hook: Services,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("MAX_OOM_RETRIES", "1")
    write_control(inprocess.tree, {"oom_at_step": 2, "oom_unless": [], "step_seconds": STEP_S})
    run_id, final = await supervised(inprocess)
    assert final == "failed", inprocess.explain(run_id)
    assert events(hook) == ["oom_recovery", "relaunch_budget_exhausted", "run_failed"]


async def test_the_gpu_hour_cap_stops_relaunches_as_an_exhausted_budget(inprocess: InProcessRuns, hook: Services,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("VAD_MAX_GPU_HOURS", "0.0000001")  # spent by the first attempt's first moment
    write_control(inprocess.tree, {"oom_at_step": 2, "oom_unless": ["offload"], "step_seconds": 0.05})
    run_id, final = await supervised(inprocess)
    status = await inprocess.progress(run_id)
    assert final == "failed" and status["attempt"] == 1, inprocess.explain(run_id)
    assert status["final_reason"].startswith("GPU-hour budget reached")
    assert events(hook) == ["relaunch_budget_exhausted", "run_failed"]


async def test_progress_every_n_steps_is_opt_in(inprocess: InProcessRuns, hook: Services,
                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("VAD_NOTIFY_EVERY_N_STEPS", "2")
    write_control(inprocess.tree, {"step_seconds": STEP_S})
    run_id, final = await supervised(inprocess)
    assert final == "succeeded", inprocess.explain(run_id)
    assert events(hook) == ["progress_step"] * 3
    assert [r.json()["data"]["step"] for r in hook.of("webhook")] == [2, 4, 6]


async def test_stall_relaunch_opt_in_resumes_from_the_checkpoint(inprocess: InProcessRuns, hook: Services,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    for name, value in {"VAD_STALL_MIN_SECONDS": "2", "VAD_STALL_STARTUP_SECONDS": "120", "VAD_STALL_RELAUNCH": "1"}.items():
        monkeypatch.setenv(name, value)
    write_control(inprocess.tree, {"hang": True, "fail_at_step": 3, "step_seconds": STEP_S})
    run_id = await inprocess.start()

    async def unhang_the_next_attempt() -> None:
        # Attempt 1 read its control when it started; once it trains, the next attempt is told not to hang. (After
        # the stall notice was too late: in-process the relaunch can start before the test's rewrite, and hang.)
        while not (inprocess.ctx.store.run(run_id).progress or {}).get("step"):  # type: ignore[union-attr]
            await anyio.sleep(0.02)
        write_control(inprocess.tree, {"step_seconds": STEP_S})

    began = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(unhang_the_next_attempt)
        final = await inprocess.supervise(run_id)
    assert final == "succeeded", inprocess.explain(run_id)
    assert time.monotonic() - began >= 2  # never before the stall window
    status = await inprocess.progress(run_id)
    assert (status["attempt"], status["resumed_from_step"], status["stalled"]) == (2, 2, False)
    first = inprocess.errors(run_id)[0]
    assert (first["category"], first["kind"]) == ("stalled", "no_progress")
    assert first["supervisor_action"] == "stalled: relaunching from the last checkpoint"
    # The relaunch is told as what it is: a stall's, with nothing changed — no OOM happened (issue 26).
    assert events(hook) == ["run_stalled", "stall_recovery"]
    relaunch = hook.of("webhook")[1].json()
    assert relaunch["title"] == "[verl] stalled in attempt 1: relaunching (relaunch 1 of 2)"
    assert "same settings" in relaunch["text"] and "hit" not in relaunch["text"], relaunch["text"]
    kinds = [e.kind for e in inprocess.ctx.store.events(run_id, limit=1000)]
    assert "oom_recovery" not in kinds
    # The stopped attempt prints as it dies (like Ray's driver, it reports the SIGTERM): that is no recovery.
    first_job = inprocess.ctx.store.attempts(run_id)[0].job or {}
    assert "*** SIGTERM received" in Path(first_job["log_path"]).read_text()
    assert "stall_cleared" not in kinds, kinds
