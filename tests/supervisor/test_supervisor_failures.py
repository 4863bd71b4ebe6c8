"""Failures that no retry can fix stop the run at once, with the cause and the fix, and launch nothing more: a
stale Hydra key refused *before* launch (validated inside the container against its real configs, with Hydra's own
message), and a GPU split the plan cannot build. verl's own config validation failing in the job is decided
in-process in tests/decisions/test_following.py.
"""

from __future__ import annotations

import time

from docker.models.containers import Container
from sv_helpers import CONTAINER_HOME, Cli, exists, processes, trainers


def test_stale_override_is_rejected_before_launch(cli: Cli, verl_docker: Container) -> None:
    # Planning for verl 0.6.1 against the 0.9.1 tree: the legacy `reward_model.overlong_buffer.*` keys are stale.
    cli.set(VERL_VERSION="0.6.1")
    began = time.monotonic()
    run_id = cli.start(verl_docker.name)["run_id"]

    status = cli.wait_final(run_id, timeout=30)
    assert time.monotonic() - began < 30, "a rejected launch must fail in seconds"
    assert status["status"] == "failed", cli.explain(run_id)
    # Hydra's real text from composing in the target, not a guess of ours.
    reason = status["final_reason"]
    assert reason.startswith("verl rejected the overrides before launch: Could not override 'reward_model.")
    assert "is not in struct" in reason
    assert status["attempt"] == 1 and status["step"] is None

    (only,) = cli.errors(run_id)["attempts"]
    assert (only["status"], only["category"], only["kind"]) == ("rejected", "config_error", "prelaunch_validation")
    assert only["exit_code"] is None
    assert "Key 'overlong_buffer' is not in struct" in only["excerpt"]
    (attempt,) = cli.attempts(run_id)
    assert attempt.job is None and attempt.ended_at is not None

    # Nothing ran: no job dir, no log, no trainer, no train.log link.
    run_dir = cli.run_row(run_id).spec.run_dir
    assert not exists(verl_docker, f"{run_dir}/attempt-1")
    assert not exists(verl_docker, f"{CONTAINER_HOME}/train.log")
    assert trainers(verl_docker) == [] and not any("vad-launch" in p.args for p in processes(verl_docker))


def test_impossible_gpu_split_is_refused_before_anything_starts(cli: Cli, verl_docker: Container) -> None:
    # ROLLOUT_TP=2 cannot divide one rollout GPU: the plan refuses it. `start` must say so and create no run,
    # rather than leave a run "starting" forever behind a supervisor that crashes on every restart.
    cli.set(MODE="one_step_off_policy", TRAINER_GPUS=2, ROLLOUT_GPUS=1, ROLLOUT_TP=2)
    proc = cli.run("start", "--container", verl_docker.name, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ROLLOUT_TP=2 must divide the 1 rollout GPUs" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert cli.store.runs() == []
    # `plan` (no side effects) names the same problem the same way.
    planned = cli.run("plan", "--json")
    assert planned.returncode == 1 and "Traceback" not in planned.stderr, planned.stderr
    assert planned.stderr.startswith("error: ROLLOUT_TP=2 must divide the 1 rollout GPUs")
    # The container is not left "busy": a corrected start goes through.
    cli.set(ROLLOUT_TP=1, TRAIN_STEPS=2)
    run_id = cli.start(verl_docker.name)["run_id"]
    assert cli.wait_final(run_id)["status"] == "succeeded", cli.explain(run_id)
