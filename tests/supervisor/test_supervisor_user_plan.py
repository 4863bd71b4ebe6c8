"""The user's own run end to end, in a real container with the verl stand-in: per-run parameters and Hydra
overrides from the CLI, the plan preview equal to what start launches, the user's overrides kept on every OOM
relaunch (and the ladder's change to a key the user pinned left out, with a note), refusals before anything
starts, and a stopped run resumed from its last checkpoint as a new attempt. The overrides through the OOM
ladder and a failed run's resume are decided in-process in tests/decisions/test_user_plan.py.
"""

from __future__ import annotations

import json

from docker.models.containers import Container
from sv_helpers import Cli, override_value, write_control

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


def test_a_stopped_run_resumes(cli: Cli, verl_docker: Container) -> None:
    # The trainer hangs after step 3 until stopped: the stop lands mid-run however loaded the machine is (30 steps
    # of 1 s did too, in up to 30 s; with the default steps a busy 2-core CI machine finished the run first).
    write_control(verl_docker, {"step_seconds": 0.1, "hang": True, "fail_at_step": 4})
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
