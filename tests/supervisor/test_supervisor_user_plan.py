"""The user's own run end to end, in a real container with the verl stand-in: per-run parameters and Hydra
overrides from the CLI, the plan preview equal to what start launches, the user's overrides kept on every OOM
relaunch (and the ladder's change to a key the user pinned left out, with a note), refusals before anything
starts, and a failed or stopped run resumed from its last checkpoint as a new attempt.
"""

from __future__ import annotations

import json

from docker.models.containers import Container
from sv_helpers import Cli, cat, checkpoint_dir, override_value, write_control

LR = "actor_rollout_ref.actor.optim.lr"
REF_OFFLOAD = "actor_rollout_ref.ref.fsdp_config.param_offload"
USER_FLAGS = ("--override", f"{LR}=2e-6", "--override", f"{REF_OFFLOAD}=False", "--train-batch-size", "16")


def test_plan_shows_exactly_what_start_launches(cli: Cli, verl_docker: Container) -> None:
    flags = ("--experiment-name", "same-answers", "--save-freq", "3", *USER_FLAGS)
    plan = cli.json("plan", *flags)
    run_id = cli.start(verl_docker.name, *flags)["run_id"]
    assert cli.wait_final(run_id)["status"] == "succeeded", cli.explain(run_id)
    (attempt,) = cli.attempts(run_id)
    # The run id (and the checkpoint dir named after it) is the only thing a preview cannot know.
    previewed = [o.replace(plan["run_id"], run_id) for o in plan["overrides"]]
    assert attempt.overrides == previewed
    assert override_value(attempt, LR) == "2e-6" and override_value(attempt, "trainer.save_freq") == "3"
    assert attempt.config.override_sources == plan["sources"]
    assert plan["sources"][LR] == "user" and plan["sources"]["trainer.save_freq"] == "recipe"
    assert plan["settings_sources"]["save_freq"] == "argument"
    assert plan["settings_sources"]["train_steps"] == "environment"  # TRAIN_STEPS=6 in the test env
    assert plan["settings_sources"]["rollout_tp"] == "default"


def test_user_overrides_stay_on_every_attempt_and_the_ladder_leaves_pinned_keys(
    cli: Cli, verl_docker: Container
) -> None:
    write_control(verl_docker, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": 0.1})
    run_id = cli.start(verl_docker.name, *USER_FLAGS)["run_id"]
    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded" and status["attempt"] == 2, cli.explain(run_id)
    a1, a2 = cli.attempts(run_id)
    for attempt in (a1, a2):  # the user's values on every attempt, verbatim
        assert override_value(attempt, LR) == "2e-6"
        assert override_value(attempt, REF_OFFLOAD) == "False"
        assert override_value(attempt, "data.train_batch_size") == "16"
        assert attempt.config.override_sources[REF_OFFLOAD] == "user"
    # +offload turned the actor's offload on (that is what got past the OOM) but not the key the user pinned.
    assert override_value(a2, "actor_rollout_ref.actor.fsdp_config.param_offload") == "True"
    assert a2.config.override_sources["actor_rollout_ref.actor.fsdp_config.param_offload"] == "oom_ladder"
    assert f"OOM recovery would set {REF_OFFLOAD}=True; kept your False" in a2.config.plan_notes
    assert all(REF_OFFLOAD not in line for line in a2.override_diff)
    report = cli.errors(run_id)
    second = report["attempts"][1]
    assert second["override_sources"][LR] == "user"
    assert any("kept your False" in note for note in second["plan_notes"])
    assert second["overrides"] == a2.overrides


def test_bad_overrides_are_refused_before_anything_starts(cli: Cli, verl_docker: Container) -> None:
    # A misspelt key: verl's own compose in the container says so, in seconds, and no run exists.
    proc = cli.run("start", "--container", verl_docker.name, "--override", "actor_rollout_ref.actor.optim.lrr=1e-6")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verl rejected the overrides, nothing was started" in proc.stderr
    assert "actor_rollout_ref.actor.optim.lrr" in proc.stderr and "--override" in proc.stderr
    # A secret, interpolation text, a second argument: refused by the settings model before any session.
    for bad, why in (("trainer.swanlab_api_key=sk-123456789abcdef", "secret"),
                     ("data.train_files=${oc.env:SWANLAB_API_KEY}", "'$'"),
                     ("trainer.save_freq=1 --config-name=x", "quoted"),
                     ("hydra.searchpath=[file:///tmp]", "hydra.*"),
                     ("data.train_files=/verl/../etc/passwd", "'..'")):  # fmt: skip
        proc = cli.run("start", "--container", verl_docker.name, "--override", bad)
        assert proc.returncode == 1 and why in proc.stderr, (bad, proc.stderr)
        assert "sk-123456789abcdef" not in proc.stderr
    # A parameter the plan refuses names the flag that changes it.
    proc = cli.run("start", "--container", verl_docker.name, "--mode", "one_step_off_policy", "--trainer-gpus", "1",
                   "--rollout-gpus", "1", "--rollout-tp", "2")  # fmt: skip
    assert proc.returncode == 1 and "--rollout-tp" in proc.stderr, proc.stderr
    assert cli.store.runs(10) == []


def test_a_failed_run_resumes_from_its_last_checkpoint(cli: Cli, verl_docker: Container) -> None:
    cli.set(MAX_OOM_RETRIES=0)
    write_control(verl_docker, {"oom_at_step": 3, "oom_unless": [], "step_seconds": 0.1})
    run_id = cli.start(verl_docker.name, *USER_FLAGS)["run_id"]
    assert cli.wait_final(run_id)["status"] == "failed", cli.explain(run_id)
    write_control(verl_docker, {"step_seconds": 0.1})  # whatever failed it is fixed now
    resumed = cli.json("resume", run_id)
    assert (resumed["run_id"], resumed["status"], resumed["attempt"]) == (run_id, "starting", 2)
    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded" and status["attempt"] == 2, cli.explain(run_id)
    assert status["resumed_from_step"] == 2  # SAVE_FREQ=2, the OOM hit step 3
    a1, a2 = cli.attempts(run_id)
    assert a2.reason == "resumed on request from step 2"
    assert a2.overrides == a1.overrides  # the same answers and parameters, the user's overrides included
    assert checkpoint_dir(a2) == checkpoint_dir(a1)
    assert f"Resuming from {checkpoint_dir(a2)}/global_step_2" in cat(verl_docker, a2.job["log_path"])  # type: ignore[index]
    # A finished run is not resumed again; the refusal says why.
    proc = cli.run("resume", run_id)
    assert proc.returncode == 1 and "only a failed or stopped run can be resumed" in proc.stderr


def test_a_stopped_run_resumes(cli: Cli, verl_docker: Container) -> None:
    # 30 steps of 1 s: a stop at step 3 lands mid-run even on a loaded machine (with the default steps the run
    # finished before the stop on a busy 2-core CI machine, and the stop found it succeeded).
    write_control(verl_docker, {"step_seconds": 1.0})
    cli.set(TRAIN_STEPS=30)
    run_id = cli.start(verl_docker.name)["run_id"]
    cli.wait_step(run_id, 3)
    assert cli.json("stop", run_id)["status"] == "stopped", cli.explain(run_id)
    write_control(verl_docker, {"step_seconds": 0.1})
    assert cli.json("resume", run_id)["attempt"] == 2
    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded", cli.explain(run_id)
    a1, a2 = cli.attempts(run_id)
    assert a1.status == "stopped" and a2.status == "succeeded"
    assert a2.reason.startswith("resumed on request from step "), a2.reason
    events = [e.kind for e in cli.store.events(run_id)]
    assert "run_resumed" in events, json.dumps(events)


def test_a_rung_the_user_pinned_entirely_is_skipped_without_spending_a_retry(cli: Cli, verl_docker: Container) -> None:
    a = "actor_rollout_ref.actor.fsdp_config"
    pins = [f"{a}.param_offload=False", f"{a}.optimizer_offload=False", f"{a}.offload_policy=False",
            f"{REF_OFFLOAD}=False"]  # fmt: skip
    write_control(verl_docker, {"oom_at_step": 3, "oom_unless": ["recompute"], "step_seconds": 0.1})
    cli.set(MAX_OOM_RETRIES=1)  # one retry: +offload (all pinned) would waste it, +recompute gets past the OOM
    run_id = cli.start(verl_docker.name, *[arg for pin in pins for arg in ("--override", pin)])["run_id"]
    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded" and status["attempt"] == 2, cli.explain(run_id)
    a1, a2 = cli.attempts(run_id)
    assert a1.decision and a1.decision["changes"] == ["+recompute"]
    assert "skipped +offload: your overrides pin every key it changes" in a1.decision["reason"]
    assert "recompute" in a2.config.effective
    for pin in pins:
        assert pin in a2.overrides
