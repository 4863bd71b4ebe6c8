"""OOM recovery end to end, in a real container: the detached supervisor follows the stand-in's log, classifies
the failure and climbs the ladder (offload, then recompute), resuming from the last checkpoint; it gives up with
suggestions past MAX_OOM_RETRIES, and never adds CPU offload for a host-RAM OOM (peers.md §2.4).

The stand-in decides whether its injected OOM fires from the *composed* config of each attempt, the way real
memory pressure would: only a relaunch with the right overrides gets past it.

This file keeps the first rung end to end in a container (logs, checkpoints and the CLI's views there); the rest
of the ladder (recompute, the budget, host OOM) is decided in-process in tests/decisions/test_oom_ladder.py.
"""

from __future__ import annotations

from docker.models.containers import Container
from sv_helpers import (
    CONTAINER_HOME,
    TRACKER,
    Cli,
    cat,
    checkpoint_dir,
    exists,
    last_bar,
    sh,
    write_control,
)

STEP_S = 0.1


def test_gpu_oom_appends_offload_and_resumes_from_the_checkpoint(cli: Cli, verl_docker: Container) -> None:
    write_control(verl_docker, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": STEP_S})
    started = cli.start(verl_docker.name)
    run_id = started["run_id"]
    assert started["status"] in ("starting", "running", "retrying")
    assert "offload" not in started["features"]

    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded", cli.explain(run_id)
    assert status["attempt"] == 2
    assert "offload" in status["features"]
    assert status["resumed_from_step"] == 2  # SAVE_FREQ=2, the OOM hit step 3
    assert (status["step"], status["total_steps"], status["percent"]) == (6, 6, 100.0)

    # `errors`: the OOM, its override diff and what the supervisor did about it.
    report = cli.errors(run_id)
    first, second = report["attempts"]
    assert (first["status"], first["category"], first["kind"]) == ("failed", "gpu_oom", "torch_cuda_oom")
    assert first["exit_code"] not in (None, 0)
    assert "CUDA out of memory" in first["excerpt"]
    assert first["supervisor_action"] == "gpu_oom: relaunching with +offload"
    assert first["changes_next_attempt"] == ["+offload"]
    assert (second["status"], second["exit_code"], second["category"]) == ("succeeded", 0, None)
    assert "actor_rollout_ref.actor.fsdp_config.param_offload: False → True" in second["override_diff"]
    assert second["reason_started"] == "gpu_oom: relaunching with +offload; resuming from step 2"
    assert second["features"] == [*first["features"], "offload"]

    # The store: one row per attempt with features, diff, reason, exit code, start/end and its own log.
    a1, a2 = cli.attempts(run_id)
    assert a1.config.oom_appended == [] and a2.config.oom_appended == ["offload"]
    assert a1.override_diff == [] and a2.override_diff == second["override_diff"]
    assert (a1.exit_code, a2.exit_code) == (first["exit_code"], 0)
    assert a1.started_at <= a1.ended_at <= a2.started_at <= a2.ended_at  # type: ignore[operator]
    assert a1.job and a2.job and a1.job["log_path"] != a2.job["log_path"]
    assert a1.decision and a1.decision["relaunch"] is True
    run = cli.run_row(run_id)
    assert run.final_reason == "training finished (exit code 0)" and run.ended_at is not None

    # Inside the container: attempt 1 started from scratch and died of the OOM; attempt 2 loaded step 2.
    log1, log2 = cat(verl_docker, a1.job["log_path"]), cat(verl_docker, a2.job["log_path"])
    assert "Training from scratch" in log1 and "CUDA out of memory" in log1
    ckpt = checkpoint_dir(a2)
    for line in (f"Load from checkpoint folder: {ckpt}/global_step_2", "Setting global step to 2",
                 f"Resuming from {ckpt}/global_step_2"):  # fmt: skip
        assert line in log2, f"{line!r} missing from attempt 2's log"
    assert "CUDA out of memory" not in log2
    assert checkpoint_dir(a1) == ckpt  # the same root, or the resume would start over
    assert exists(verl_docker, f"{ckpt}/global_step_2/actor")
    assert cat(verl_docker, f"{ckpt}/{TRACKER}").strip() == "6"  # the last save, at the final step

    # {VERL_HOME}/train.log follows the current attempt, so the original skill's monitoring command still works.
    assert sh(verl_docker, 'readlink -- "$1"', f"{CONTAINER_HOME}/train.log").strip() == a2.job["log_path"]
    line = sh(verl_docker, 'grep "Training Progress" /verl/train.log | tail -1')
    assert last_bar(line) == (6, 6), line

    # The human views of the same run: `status --follow` ends at once on a finished run, exit 0 = succeeded.
    follow = cli.run("status", run_id, "--follow", "--interval", "0.2")
    assert follow.returncode == 0, follow.stdout + follow.stderr
    assert "| 6/6 100.0%" in follow.stdout and "resumed from step 2" in follow.stdout
    text = cli.run("errors", run_id).stdout
    assert "attempt 1: failed (exit 1)" in text and "  error: gpu_oom" in text
    assert "  supervisor: gpu_oom: relaunching with +offload" in text
