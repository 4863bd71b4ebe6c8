"""An attempt's steady pace and what a memory feature costs (issue 31 item 4), in verl's own figures (pure)."""

from __future__ import annotations

from pathlib import Path

from verl_async_dapo.logs.pace import feature_cost, pace_of
from verl_async_dapo.logs.progress import parse_progress

REAL = Path(__file__).resolve().parent / "real"


def test_the_steady_pace_leaves_the_first_steps_warm_up_out_on_the_real_h200_log() -> None:
    # step 1 took 40.5 s there (compile, CUDA graphs, the first rollout), steps 2-6 about 1.7 s.
    shot = parse_progress((REAL / "dapo-fsdp-healthy-6-steps.log").read_text(encoding="utf-8"))
    assert shot.steady_steps == 5 and shot.steady_seconds_per_step is not None
    assert 1.0 < shot.steady_seconds_per_step < 3.0
    pace = pace_of(shot.to_dict())
    assert pace is not None and pace["seconds_per_step"] == shot.steady_seconds_per_step and pace["steps"] == 5
    assert pace["max_memory_gb"] is not None


def test_the_cost_says_how_much_slower_and_what_it_saved() -> None:
    before = {"seconds_per_step": 1.7, "steps": 5, "throughput": 4100.0, "max_memory_gb": 61.87}
    after = {"seconds_per_step": 5.1, "steps": 3, "throughput": 1400.0, "max_memory_gb": 38.42}
    assert feature_cost(["offload"], before, after) == (
        "+offload: 1.70 s → 5.10 s a step (3.0x slower), tokens/s 4,100 → 1,400, peak GPU memory 61.9 → 38.4 GiB")
    assert feature_cost(["offload", "recompute"], {"seconds_per_step": 12.0}, {"seconds_per_step": 12.3, "steps": 2}) == (
        "+offload, +recompute: 12 s → 12 s a step (as fast)")  # fmt: skip
    assert feature_cost(["offload"], before, {**after, "steps": 1}) is None  # one step says too little
    assert feature_cost([], before, after) is None  # nothing was added (a stall's relaunch)
    assert feature_cost(["offload"], None, after) is None
    assert pace_of({"steady_seconds_per_step": None}) is None and pace_of(None) is None
