"""What a stall notice says: the silence and the window in units a reader can use (seen on the H200 harness run:
a 60 s window rendered as "1 min" and the CPU scenario's 2 s one as "0 min")."""

from __future__ import annotations

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.notify.events import ERROR_EVENTS, recovery_event_kind, render


def _stalled(silent: float, window: float) -> str:
    event = {"kind": "run_stalled", "level": "warning", "message": "attempt 1: no output", "run_id": "run_x",
             "id": 1, "data": {"attempt": 1, "silent_seconds": silent, "window_seconds": window, "step": 4,
                               "action": "Left running."}}  # fmt: skip
    return render(event, "host", None).text


def test_short_stalls_are_told_in_seconds() -> None:
    text = _stalled(62.4, 60.0)
    assert "for 62 s (window 60 s) at step 4" in text and "Left running." in text


def test_long_stalls_are_told_in_minutes() -> None:
    assert "for 22 min (window 20 min)" in _stalled(1300, 1200)


def test_stopped_processes_are_named_in_the_notice() -> None:
    # The evidence row of the SIGSTOPped trainer on the H200 (bench/gpu/results/hang), as evidence.collect keeps it.
    event = {"kind": "run_stalled", "level": "warning", "message": "attempt 1: no output", "run_id": "run_x", "id": 1,
             "data": {"attempt": 1, "silent_seconds": 60.2, "window_seconds": 60.0, "step": 5,
                      "gpu_util": "GPU0 0 %, 2397 MiB/143771 MiB",
                      "evidence": {"stopped_processes": ["2705 TNl 04:30 30.0 9000000 ray::WorkerDict"]}}}  # fmt: skip
    text = render(event, "host", None).text
    assert "GPU utilisation GPU0 0 %" in text and "stopped processes (state T): 2705 ray::WorkerDict" in text


def test_a_relaunch_is_recorded_as_what_caused_it() -> None:
    # The H200 hang (bench/gpu/results/hang/webhook.jsonl): the stall's relaunch went out as "oom_recovery".
    assert recovery_event_kind(ErrorCategory.STALLED) == "stall_recovery"
    assert recovery_event_kind(ErrorCategory.GPU_OOM) == recovery_event_kind(ErrorCategory.ROLLOUT_OOM) == "oom_recovery"
    assert "stall_recovery" in ERROR_EVENTS  # notified by default, like an OOM relaunch
    event = {"kind": "stall_recovery", "level": "warning", "message": "attempt 1 failed (stalled: relaunching)",
             "run_id": "run_x", "id": 2, "data": {"attempt": 1, "changes": [], "category": "stalled", "relaunch": 1,
                                                  "max_relaunches": 2}}  # fmt: skip
    notice = render(event, "host", None)
    assert notice.title == "[verl] stalled in attempt 1: relaunching (relaunch 1 of 2)"
    assert "same settings" in notice.text and "OOM" in notice.text and "hit" not in notice.text
