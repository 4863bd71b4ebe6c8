"""The stall window and the stall state shown by get_progress / check_errors (pure: times are arguments)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from verl_async_dapo.exceptions import StallConfigError
from verl_async_dapo.watchman import budget, evidence
from verl_async_dapo.watchman.stall import StallSettings, StallTracker, stall_decision
from verl_async_dapo.watchman.view import stall_state

S = StallSettings(factor=5.0, min_seconds=60.0, startup_seconds=600.0)


def test_window_is_the_startup_floor_until_a_step_then_m_then_k_times_the_median() -> None:
    t = StallTracker(S, started_at=0.0)
    assert t.window() == 600.0
    t.output(10.0, 1)
    assert t.window() == 60.0  # one step: no gap yet, the floor M
    for step, at in ((2, 40.0), (3, 70.0), (4, 100.0)):  # 30 s per step
        t.output(at, step)
    assert t.median_step_seconds() == 30.0 and t.window() == 150.0  # 5 x 30 s > 60 s
    assert not t.newly_stalled(249.0)
    assert t.newly_stalled(250.0)
    assert not t.newly_stalled(400.0)  # flagged once per silence
    assert t.output(401.0, 4) is True  # output again: the stall is over
    assert not t.newly_stalled(402.0)


def test_log_growth_without_a_new_step_keeps_it_alive() -> None:
    t = StallTracker(S, started_at=0.0)
    t.output(1.0, 1)
    t.output(50.0, 1)  # warnings, no step
    assert not t.newly_stalled(100.0)
    assert t.newly_stalled(110.0)


def test_a_jump_of_several_steps_counts_per_step() -> None:
    t = StallTracker(S, started_at=0.0)
    t.output(0.0, 1)
    t.output(100.0, 5)  # the parser saw 4 steps in one chunk
    assert t.median_step_seconds() == 25.0


@pytest.mark.parametrize(("env", "message"), [({"VAD_STALL_FACTOR": "x"}, "must be a number"),
                                              ({"VAD_STALL_MIN_SECONDS": "0"}, "at least 1")])  # fmt: skip
def test_bad_settings_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(StallConfigError, match=message):
        StallSettings.from_env(env)


def test_settings_from_env() -> None:
    got = StallSettings.from_env({"VAD_STALL_FACTOR": "3", "VAD_STALL_MIN_SECONDS": "90", "VAD_STALL_RELAUNCH": "1"})
    assert (got.factor, got.min_seconds, got.relaunch, got.startup_seconds) == (3.0, 90.0, True, 1800.0)
    assert StallSettings.from_env({}) == StallSettings()


def test_stall_decision_uses_the_one_budget() -> None:
    cfg: Any = object()
    assert not stall_decision(cfg, relaunches_so_far=0, max_retries=2, relaunch=False).relaunch
    again = stall_decision(cfg, relaunches_so_far=2, max_retries=2, relaunch=True)
    assert not again.relaunch and "reached" in again.reason and again.suggestions
    go = stall_decision(cfg, relaunches_so_far=1, max_retries=2, relaunch=True)
    assert go.relaunch and go.next_config is cfg


@dataclass
class Ev:
    ts: float
    kind: str
    data: dict[str, Any] | None


def test_stall_state_follows_the_current_attempt() -> None:
    stalled = Ev(100.0, "run_stalled", {"attempt": 1, "silent_seconds": 60.0, "window_seconds": 60.0, "step": 3,
                                        "evidence": {"py_spy": "hint"}})  # fmt: skip
    state = stall_state([stalled], attempt=1, active=True, now=130.0)
    assert state is not None and state["stalled"] and state["stalled_for_seconds"] == 90.0
    assert state["evidence"] == {"py_spy": "hint"}
    assert stall_state([stalled, Ev(140.0, "stall_cleared", {"attempt": 1})], 1, True, 150.0) is None
    assert stall_state([stalled], attempt=2, active=True, now=130.0) is None  # a relaunch is a new attempt
    ended = stall_state([stalled], attempt=1, active=False, now=130.0)
    assert ended is not None and ended["stalled"] is False and ended["stalled_for_seconds"] is None


def test_the_gpu_hour_cap() -> None:
    assert budget.max_gpu_hours({}) is None and budget.max_gpu_hours({"VAD_MAX_GPU_HOURS": "12.5"}) == 12.5
    with pytest.raises(budget.BudgetConfigError, match="number of GPU-hours"):
        budget.max_gpu_hours({"VAD_MAX_GPU_HOURS": "lots"})
    with pytest.raises(budget.BudgetConfigError, match="above 0"):
        budget.max_gpu_hours({"VAD_MAX_GPU_HOURS": "0"})
    used = budget.gpu_hours_used([(0.0, 1800.0), (2000.0, None)], gpus=8, now=3800.0)  # 0.5 h + 0.5 h, 8 GPUs
    assert used == 8.0
    assert budget.over_gpu_hours(used, None) is None and budget.over_gpu_hours(used, 8.5) is None
    refusal = budget.over_gpu_hours(used, 8.0)
    assert refusal is not None and "8.00 of VAD_MAX_GPU_HOURS=8 used" in refusal


def test_gpu_summary_reads_nvidia_smis_csv() -> None:
    # `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader` (units kept)
    csv = "0, 0 %, 139012 MiB, 143771 MiB\n1, 97 %, 120554 MiB, 143771 MiB\n"
    assert evidence.gpu_summary(csv) == "GPU0 0 %, 139012 MiB/143771 MiB; GPU1 97 %, 120554 MiB/143771 MiB"
    assert evidence.gpu_summary("NVIDIA-SMI has failed because it couldn't communicate with the driver") is None


def test_the_evidence_log_lines_of_the_real_h200_hang_read_cleanly() -> None:
    # The last 8 KiB of verl's log when the watchman flagged the SIGSTOPped trainer (bench/gpu/results/hang): Ray's
    # colour codes and prefix-only lines made the excerpt in check_errors and the notice hard to read.
    log = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "results" / "hang" / "attempt1.log"
    raw = log.read_bytes()
    marker = raw.index(b"*** SIGTERM received")  # what the log held before the watchman stopped the attempt
    tail = raw[max(0, marker - evidence.LOG_TAIL_BYTES) : marker].decode("utf-8", errors="replace")
    assert "\x1b[36m" in tail
    lines = evidence.log_lines(tail)
    assert lines and not any("\x1b" in line for line in lines)
    assert all(line.split(")", 1)[-1].strip() for line in lines)  # no line that is only "(DAPOTaskRunner pid=N)"
    assert lines[-2].startswith("(DAPOTaskRunner pid=") and " step:5 - " in lines[-2]
    assert lines[-1].startswith("Training Progress:  50%|")
