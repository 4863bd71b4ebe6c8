"""The user's own overrides through the ladder, in-process: kept on every attempt, a key the user pinned left out of
a rung (with a note), a rung the user pinned entirely skipped without spending a retry; a failed run resumed
from its last checkpoint with the same answers. Moved here from tests/supervisor/test_supervisor_user_plan.py,
whose container end to end keeps the CLI's plan = start, the refusals and a stopped run's resume."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_oom_ladder import override

from harness.inprocess_runs import InProcessRuns, write_control
from verl_async_dapo import runs

LR = "actor_rollout_ref.actor.optim.lr"
REF_OFFLOAD = "actor_rollout_ref.ref.fsdp_config.param_offload"
USER = {"extra_overrides": (f"{LR}=2e-6", f"{REF_OFFLOAD}=False"), "train_batch_size": 16}


async def test_user_overrides_stay_on_every_attempt_and_the_ladder_leaves_pinned_keys(inprocess: InProcessRuns) -> None:
    write_control(inprocess.tree, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": 0.01})
    run_id = await inprocess.start(**USER)
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    a1, a2 = inprocess.ctx.store.attempts(run_id)
    for attempt in (a1, a2):  # the user's values on every attempt, verbatim
        assert override(attempt, LR) == "2e-6"
        assert override(attempt, REF_OFFLOAD) == "False"
        assert override(attempt, "data.train_batch_size") == "16"
        assert attempt.config.override_sources[REF_OFFLOAD] == "user"
    # +offload turned the actor's offload on (that is what got past the OOM) but not the key the user pinned.
    assert override(a2, "actor_rollout_ref.actor.fsdp_config.param_offload") == "True"
    assert a2.config.override_sources["actor_rollout_ref.actor.fsdp_config.param_offload"] == "oom_ladder"
    assert f"OOM recovery would set {REF_OFFLOAD}=True; kept your False" in a2.config.plan_notes
    assert all(REF_OFFLOAD not in line for line in a2.override_diff)
    second = inprocess.errors(run_id)[1]
    assert second["override_sources"][LR] == "user"
    assert any("kept your False" in note for note in second["plan_notes"])
    assert second["overrides"] == a2.overrides


async def test_a_rung_the_user_pinned_entirely_is_skipped_without_spending_a_retry(
    inprocess: InProcessRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = "actor_rollout_ref.actor.fsdp_config"
    pins = (f"{a}.param_offload=False", f"{a}.optimizer_offload=False", f"{a}.offload_policy=False",
            f"{REF_OFFLOAD}=False")  # fmt: skip
    write_control(inprocess.tree, {"oom_at_step": 3, "oom_unless": ["recompute"], "step_seconds": 0.01})
    monkeypatch.setenv("MAX_OOM_RETRIES", "1")  # one retry: +offload (all pinned) would waste it, +recompute does it
    run_id = await inprocess.start(extra_overrides=pins)
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    a1, a2 = inprocess.ctx.store.attempts(run_id)
    assert a1.supervisor_decision and a1.supervisor_decision.changes == ["+recompute"]
    assert "skipped +offload: your overrides pin every key it changes" in a1.supervisor_decision.reason
    assert "recompute" in a2.config.effective
    assert all(pin in a2.overrides for pin in pins)


async def test_a_failed_run_resumes_from_its_last_checkpoint(
    inprocess: InProcessRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_OOM_RETRIES", "0")
    write_control(inprocess.tree, {"oom_at_step": 3, "oom_unless": [], "step_seconds": 0.01})
    run_id = await inprocess.start(**USER)
    assert await inprocess.supervise(run_id) == "failed", inprocess.explain(run_id)
    write_control(inprocess.tree, {"step_seconds": 0.01})  # whatever failed it is fixed now
    resumed = runs.resume_run(inprocess.ctx, run_id)
    assert (resumed["run_id"], resumed["status"], resumed["attempt"]) == (run_id, "starting", 2)
    assert inprocess.spawned[-1] == run_id  # the service asked for a supervisor
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    assert (await inprocess.progress(run_id))["resumed_from_step"] == 2  # SAVE_FREQ=2, the OOM hit step 3
    a1, a2 = inprocess.ctx.store.attempts(run_id)
    assert a2.reason == "resumed on request from step 2"
    assert a2.overrides == a1.overrides  # the same answers and parameters, the user's overrides included
    log = Path(a2.job["log_path"]).read_text()  # type: ignore[index]
    assert "Resuming from " in log and "/global_step_2" in log
    with pytest.raises(Exception, match="only a failed or stopped run can be resumed"):
        runs.resume_run(inprocess.ctx, run_id)
