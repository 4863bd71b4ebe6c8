"""The OOM ladder in-process (tests/harness/inprocess.py): offload, then recompute, each relaunch resuming from the
last checkpoint; the relaunch budget; a host-RAM OOM is no GPU OOM; one-step-off keeps its GPU split. The stand-in
decides from each attempt's composed config whether its OOM fires, as real memory pressure would.

Moved here from the supervisor's end-to-end files (second rung, budget, host-RAM OOM, one-step-off). The first rung
runs end to end once per target: in a container through scripts/run_dapo.sh
(tests/scripts/test_scripts_training.py), on the host through bench/gpu/drive.py (tests/bench/test_gpu_harness.py)."""

from __future__ import annotations

from pathlib import Path

from harness.inprocess_runs import InProcessRuns, write_control

STEP_S = 0.01


def override(attempt: object, key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in attempt.overrides if o.lstrip("+").split("=", 1)[0] == key), None)  # type: ignore[attr-defined]


async def test_gpu_oom_appends_offload_and_resumes_from_the_checkpoint(inprocess: InProcessRuns) -> None:
    write_control(inprocess.tree, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": STEP_S})
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    a1, a2 = inprocess.ctx.store.attempts(run_id)
    assert (a1.attempt_error.category, a1.attempt_error.kind) == ("gpu_oom", "torch_cuda_oom")  # type: ignore[union-attr]
    assert a1.supervisor_decision and a1.supervisor_decision.changes == ["+offload"]
    assert a2.config.oom_appended == ["offload"]
    assert a2.reason == "gpu_oom: relaunching with +offload; resuming from step 2"
    assert "actor_rollout_ref.actor.fsdp_config.param_offload: False → True" in a2.override_diff
    status = await inprocess.progress(run_id)
    assert (status["step"], status["total_steps"], status["resumed_from_step"]) == (6, 6, 2)
    assert "Setting global step to 2" in Path(a2.job["log_path"]).read_text()  # type: ignore[index]


async def test_second_gpu_oom_appends_recompute(inprocess: InProcessRuns) -> None:
    write_control(inprocess.tree, {"oom_at_step": 3, "oom_unless": ["offload", "recompute"], "step_seconds": STEP_S})
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    actions = [(a["status"], a["category"], a["changes_next_attempt"]) for a in inprocess.errors(run_id)]
    assert actions == [("failed", "gpu_oom", ["+offload"]), ("failed", "gpu_oom", ["+recompute"]),
                       ("succeeded", None, [])]  # fmt: skip
    third = inprocess.errors(run_id)[2]
    assert third["features"][-2:] == ["offload", "recompute"]
    assert "actor_rollout_ref.model.enable_activation_offload: False → True" in third["override_diff"]
    assert not any("param_offload" in line for line in third["override_diff"])  # offload was already on
    attempts = inprocess.ctx.store.attempts(run_id)
    assert [a.config.oom_appended for a in attempts] == [[], ["offload"], ["offload", "recompute"]]
    assert (await inprocess.progress(run_id))["resumed_from_step"] == 2


async def test_oom_past_the_limit_fails_with_suggestions_and_stops_relaunching(
    inprocess: InProcessRuns, monkeypatch: object
) -> None:
    # A predicate nothing satisfies: every attempt OOMs whatever the supervisor changes.
    write_control(inprocess.tree, {"oom_at_step": 1, "oom_unless": ["actor_rollout_ref.rollout.n=999"],
                                   "step_seconds": STEP_S})  # fmt: skip
    monkeypatch.setenv("MAX_OOM_RETRIES", "1")  # type: ignore[attr-defined]
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "failed", inprocess.explain(run_id)
    status = await inprocess.progress(run_id)
    assert "MAX_OOM_RETRIES=1 reached" in status["final_reason"]
    assert status["suggestions"] and any("MAX_RESPONSE_LENGTH" in tip for tip in status["suggestions"])
    report = inprocess.errors(run_id)
    assert [a["category"] for a in report] == ["gpu_oom", "gpu_oom"]  # MAX_OOM_RETRIES + 1
    assert report[1]["features"][-1] == "offload"
    assert "MAX_OOM_RETRIES=1 reached" in report[1]["supervisor_action"]
    # Nothing relaunches later: asking again (which heals an active run) starts no supervisor, no attempt 3.
    spawned = list(inprocess.spawned)
    assert (await inprocess.progress(run_id))["status"] == "failed"
    assert inprocess.spawned == spawned and len(inprocess.ctx.store.attempts(run_id)) == 2


async def test_host_oom_fails_without_adding_offload(inprocess: InProcessRuns) -> None:
    write_control(inprocess.tree, {"oom_at_step": 2, "oom_kind": "host", "oom_unless": ["offload"],
                                   "step_seconds": STEP_S})  # fmt: skip
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "failed", inprocess.explain(run_id)
    status = await inprocess.progress(run_id)
    assert "offload" not in status["features"] and status["final_reason"].startswith("host_oom")
    (only,) = inprocess.errors(run_id)
    assert (only["category"], only["changes_next_attempt"]) == ("host_oom", [])
    assert "ray.exceptions.OutOfMemoryError" in only["excerpt"] or "low on memory" in only["excerpt"]
    (attempt,) = inprocess.ctx.store.attempts(run_id)
    assert attempt.config.oom_appended == [] and attempt.supervisor_decision
    assert attempt.supervisor_decision.relaunch is False


async def test_one_step_off_policy_keeps_its_gpu_split_through_a_relaunch(
    inprocess: InProcessRuns, monkeypatch: object
) -> None:
    write_control(inprocess.tree, {"oom_at_step": 2, "oom_unless": ["offload"], "step_seconds": STEP_S})
    for name, value in {"MODE": "one_step_off_policy", "TRAINER_GPUS": "2", "TRAIN_STEPS": "4", "SAVE_FREQ": "1"}.items():
        monkeypatch.setenv(name, value)  # type: ignore[attr-defined]
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    assert inprocess.ctx.store.run(run_id).spec.training_settings().mode.value == "one_step_off_policy"  # type: ignore[union-attr]
    status = await inprocess.progress(run_id)
    assert (status["attempt"], status["resumed_from_step"], status["step"]) == (2, 1, 4)
    split = {"trainer.n_gpus_per_node": "2", "rollout.n_gpus_per_node": "1", "trainer.nnodes": "1",
             "rollout.nnodes": "1", "actor_rollout_ref.hybrid_engine": "False"}  # fmt: skip
    a1, a2 = inprocess.ctx.store.attempts(run_id)
    for attempt in (a1, a2):
        assert {key: override(attempt, key) for key in split} == split, f"attempt {attempt.n}"
    assert not any("n_gpus_per_node" in line for line in a2.override_diff)  # same world size: resumable
    assert a2.config.oom_appended == ["offload"]
    assert "CUDA out of memory" in Path(a1.job["log_path"]).read_text()  # type: ignore[index]
    assert "(OneStepTaskRunner pid=" in Path(a2.job["log_path"]).read_text()  # type: ignore[index]


async def test_the_price_of_the_added_offload_is_measured_and_said(inprocess: InProcessRuns, monkeypatch: object) -> None:
    """Issue 31 item 4: after the relaunch with offload (3x slower steps here, as Adam on the CPU was on the H200),
    get_progress, check_errors and the CLI say what it costs against attempt 1, from verl's own metrics."""
    monkeypatch.setenv("TRAIN_STEPS", "8")  # type: ignore[attr-defined]
    write_control(inprocess.tree, {"oom_at_step": 5, "oom_unless": ["offload"], "step_seconds": 0.05,
                                   "offload_slowdown": 3.0})  # fmt: skip
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    first, second = inprocess.errors(run_id)
    assert first["feature_cost"] is None
    cost = second["feature_cost"]
    assert cost is not None and cost.startswith("+offload: "), cost
    ratio = float(cost.split("(")[1].split("x slower")[0])
    assert 2.0 <= ratio <= 4.5, cost  # 0.05 s → 0.15 s a step, measured by the stand-in's own clock
    assert "peak GPU memory 61.9 → 38.4 GiB" in cost and "tokens/s " in cost
    assert (await inprocess.progress(run_id))["feature_cost"] == cost
    assert inprocess.ctx.store.attempts(run_id)[0].supervisor_decision.pace["steps"] == 3  # type: ignore[union-attr]
