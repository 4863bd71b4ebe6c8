"""Lost work is said (issue 31 item 5): what a crash cost in steps, and a save_freq that bounds it when checkpoints
are cheap, from verl's own timings (pure: policy.save_freq_advice, resume_check.lost_work); the CLI says it, and
the price of a memory feature (item 4) too."""

from __future__ import annotations

from verl_async_dapo.policy import save_freq_advice
from verl_async_dapo.supervisor.resume_check import CheckpointState, lost_work


def test_advice_only_when_steps_were_lost_and_checkpoints_are_cheap() -> None:
    # 200 steps of 60 s, a 30 s checkpoint every 50 steps, a crash lost 30: every 10 steps costs 5 % more time.
    advice = save_freq_advice(total_steps=200, save_freq=50, lost_steps=30, seconds_per_step=60.0, save_seconds=30.0)
    assert advice == ("save_freq=10 (SAVE_FREQ) bounds what a crash can cost to 10 steps (5% of the run) for ~5% more "
                      "time in checkpoints (30 s each, 60 s a step); this run saves every 50 and lost 30")  # fmt: skip
    assert save_freq_advice(total_steps=200, save_freq=50, lost_steps=0, seconds_per_step=60.0, save_seconds=30.0) is None
    assert save_freq_advice(total_steps=200, save_freq=10, lost_steps=9, seconds_per_step=60.0, save_seconds=30.0) is None
    # A 120 s checkpoint every 10 steps of 60 s would add 20 %: not cheap, no advice.
    assert save_freq_advice(total_steps=200, save_freq=50, lost_steps=30, seconds_per_step=60.0, save_seconds=120.0) is None
    # Without verl's timings nothing is claimed.
    assert save_freq_advice(total_steps=200, save_freq=50, lost_steps=30, seconds_per_step=None, save_seconds=30.0) is None
    assert save_freq_advice(total_steps=200, save_freq=50, lost_steps=30, seconds_per_step=60.0, save_seconds=None) is None


def test_lost_work_counts_the_steps_past_the_resumed_checkpoint() -> None:
    ckpt = CheckpointState(tracker_step=4, complete=True, saved_steps=(4,), last_step=6)
    assert (ckpt.expected_step, ckpt.lost_steps, ckpt.to_dict()["lost_steps"]) == (4, 2, 2)
    message, data = lost_work(ckpt, 1, save_freq=4, total_steps=8,
                              progress={"seconds_per_step": 10.0, "save_checkpoint_seconds": 0.5})  # fmt: skip
    assert message == "attempt 1 trained to step 6; the relaunch resumes from step 4: 2 steps trained again"
    assert (data["lost_steps"], data["resume_step"], data["last_step"]) == (2, 4, 6)
    assert data["advice"] is not None and data["advice"].startswith("save_freq=1 ")
    scratch = CheckpointState(tracker_step=None, complete=False, saved_steps=(), last_step=3)
    assert lost_work(scratch, 2, save_freq=5, total_steps=8, progress={})[0].endswith("resumes from scratch: 3 steps "
                                                                                        "trained again")  # fmt: skip
    assert CheckpointState(tracker_step=2, complete=True, saved_steps=(2,), last_step=None).lost_steps == 0


def test_the_cli_says_it() -> None:
    from verl_async_dapo.cli.status_view import render_errors, render_status

    item = {"attempt": 1, "status": "failed", "exit_code": 1, "features": [], "override_diff": [], "category": None,
            "supervisor_action": None, "lost_steps": 2, "save_freq_advice": "save_freq=1 (SAVE_FREQ) bounds …",
            "feature_cost": "+offload: 1.70 s → 5.10 s a step (3.0x slower)"}  # fmt: skip
    text = render_errors({"run_id": "run_x", "status": "succeeded", "attempts": [item]})
    assert "  lost: 2 step(s) trained past the last checkpoint, trained again" in text
    assert "  tip: save_freq=1 (SAVE_FREQ) bounds …" in text
    assert "  cost: +offload: 1.70 s → 5.10 s a step (3.0x slower)" in text
    shown = render_status({"run_id": "run_x", "status": "succeeded", "attempt": 2, "lost_steps": 2,
                           "feature_cost": "+offload: 1.70 s → 5.10 s a step (3.0x slower)"})  # fmt: skip
    assert "lost to crashes: 2 step(s) trained again (details: errors)" in shown
    assert "cost: +offload: 1.70 s → 5.10 s a step (3.0x slower)" in shown
