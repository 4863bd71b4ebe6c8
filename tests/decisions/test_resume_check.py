"""Resume is verified, not assumed (issue #14, item 6), in-process: a relaunch that verl starts from scratch although
steps were saved (verl #7952, the stand-in's ``skip_tracker``) says "resumed from 0: N steps lost"; a normal one is
confirmed. Moved here from tests/supervisor/test_supervisor_resume_check.py, which keeps the pure checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.inprocess_runs import InProcessRuns, write_control


async def test_a_relaunch_that_starts_from_scratch_says_how_many_steps_were_lost(inprocess: InProcessRuns) -> None:
    write_control(inprocess.tree, {"oom_at_step": 5, "oom_unless": ["offload"], "step_seconds": 0.01,
                                   "skip_tracker": True})  # fmt: skip
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    status = await inprocess.progress(run_id)
    assert status["attempt"] == 2
    assert status["resume_check"] == "resumed from 0: 4 steps lost (global_step_4 was saved)"
    a1, a2 = inprocess.ctx.store.attempts(run_id)
    assert "Training from scratch" in Path(a2.job["log_path"]).read_text()  # type: ignore[index]
    assert a1.supervisor_decision and a1.supervisor_decision.checkpoint
    assert a1.supervisor_decision.checkpoint["expected_step"] == 0
    first, second = inprocess.errors(run_id)
    assert (first["category"], first["resume_check"]) == ("gpu_oom", None)
    assert second["resume_check"] == "attempt 2 resumed from 0: 4 steps lost (global_step_4 was saved)"
    assert "resuming from step" not in second["reason_started"]
    kinds = [e.kind for e in inprocess.ctx.store.events(run_id)]
    assert kinds.index("checkpoint_check") < kinds.index("resume_lost")  # said before the relaunch, then confirmed
    # The CLI's views of the same state (the state dir is what a terminal's `verl-async-dapo` reads).
    env = {**os.environ, "VERL_ASYNC_DAPO_HOME": str(inprocess.ctx.home),
           "VERL_ASYNC_DAPO_CONFIG_DIR": str(inprocess.ctx.config_home)}  # fmt: skip
    cli = [sys.executable, "-m", "verl_async_dapo"]
    status = subprocess.run([*cli, "status", run_id], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "4 steps lost" in status.stdout, status.stdout + status.stderr
    errors = subprocess.run([*cli, "errors", run_id], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "resume: attempt 2 resumed from 0: 4 steps lost" in errors.stdout, errors.stdout + errors.stderr


async def test_a_normal_resume_is_confirmed(inprocess: InProcessRuns) -> None:
    write_control(inprocess.tree, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": 0.01})
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    status = await inprocess.progress(run_id)
    assert (status["resumed_from_step"], status["resume_check"]) == (2, "resumed from step 2 as expected")
    assert inprocess.errors(run_id)[1]["resume_check"] == "resumed from step 2 as expected"
    assert "resume_lost" not in [e.kind for e in inprocess.ctx.store.events(run_id)]


async def test_steps_trained_past_the_checkpoint_are_counted_and_a_save_freq_suggested(
    inprocess: InProcessRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 5: an OOM at step 7 with checkpoints every 4 steps costs steps 5 and 6, trained again."""
    monkeypatch.setenv("TRAIN_STEPS", "8")
    monkeypatch.setenv("SAVE_FREQ", "4")
    write_control(inprocess.tree, {"oom_at_step": 7, "oom_unless": ["offload"], "step_seconds": 0.05})
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    first, second = inprocess.errors(run_id)
    assert (first["lost_steps"], second["lost_steps"]) == (2, None)
    # 8 steps of ~0.05 s, a checkpoint of ~1 ms: saving every step bounds a crash to one step for ~2 % more time.
    assert first["save_freq_advice"] is not None and first["save_freq_advice"].startswith("save_freq=1 (SAVE_FREQ)")
    assert (await inprocess.progress(run_id))["lost_steps"] == 2
    (event,) = [e for e in inprocess.ctx.store.events(run_id) if e.kind == "steps_lost"]
    assert event.message == "attempt 1 trained to step 6; the relaunch resumes from step 4: 2 steps trained again"
