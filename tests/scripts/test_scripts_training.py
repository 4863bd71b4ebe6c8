"""The training scripts end to end: bash runs scripts/*.sh, which drive the verl-async-dapo CLI, which launches the
verl stand-in in a real container under the detached supervisor.

Failures are injected through /verl/standin_control.json (schema: tests/standin/entry/standin_control.py).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

from docker.models.containers import Container
from script_helpers import ACTIVE, SCRIPTS_DIR, ScriptResult, ScriptRunner, write_control

from harness.fixtures import REPO_ROOT
from harness.records import checkpoint_dir
from verl_async_dapo.store import Store

RUN_ID = re.compile(r"^run id:\s+(run_[A-Za-z0-9_-]+)\s*$", re.MULTILINE)


def run_id_of(result: ScriptResult) -> str:
    found = RUN_ID.findall(result.stdout)
    assert len(found) == 1, f"expected exactly one 'run id:' line\n{result.describe()}"
    return found[0]


def in_container(scripts: ScriptRunner, *argv: str) -> str:
    """stdout of a fixed command (no shell) in the scripts' container, asserting it succeeded."""
    proc = subprocess.run(["docker", "exec", scripts.container_name, *argv], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def assert_monitoring(result: ScriptResult, container: str) -> None:
    """The original skill's commands (with the container filled in) and the CLI equivalents."""
    for command in (
        f'docker exec {container} grep "Training Progress" /verl/train.log | tail -1',
        f"docker exec {container} tail -F /verl/train.log",
        f'docker exec {container} grep -E "Error|error|OOM|Exception" /verl/train.log | tail -10',
        "verl-async-dapo status --follow",
        "verl-async-dapo errors",
    ):
        assert command in result.stdout, f"missing monitoring command {command!r}\n{result.describe()}"


def test_quick_start_returns_at_once_and_the_run_succeeds(scripts: ScriptRunner, prepared_container: Container) -> None:
    # Long enough (12 x 0.2 s) that a script waiting for the end could not return while the run is active.
    write_control(prepared_container, step_seconds=0.2)
    result = scripts.run("quick_start.sh", env={"TRAIN_STEPS": "12"})
    assert result.returncode == 0, result.describe()
    run_id = run_id_of(result)
    right_after = scripts.cli_json("status", run_id)
    assert right_after["status"] in ACTIVE, f"quick_start.sh should return while training runs: {right_after}"

    # Preflight ran first and printed its checks; then the start summary.
    assert "[ok] MODEL_PATH: /verl/models/Qwen3-8B" in result.stdout, result.describe()
    assert result.stdout.index("[ok] MODEL_PATH") < result.stdout.index("run id:")
    assert "SwanLab:  SwanLab is disabled for this run" in result.stdout, result.describe()
    assert "features: flash_attn, dynamic_batch, remove_padding, gradient_checkpointing" in result.stdout
    assert_monitoring(result, scripts.container_name)

    final = scripts.wait_until_final(run_id)
    assert final["status"] == "succeeded", final
    assert (final["step"], final["total_steps"], final["attempt"]) == (12, 12, 1)

    # The original monitoring command, exactly as printed, works after the run (no shell: the "| tail -1" is
    # done here on the output of the docker exec argv).
    printed = next(line.strip() for line in result.stdout.splitlines() if '"Training Progress"' in line)
    grep_part, _, tail_part = printed.partition(" | ")
    assert tail_part == "tail -1"
    argv = shlex.split(grep_part)
    assert argv == ["docker", "exec", scripts.container_name, "grep", "Training Progress", "/verl/train.log"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert "Training Progress" in last and "12/12" in last, last


def test_run_dapo_follows_an_oom_recovery_to_success(scripts: ScriptRunner, prepared_container: Container) -> None:
    """The first rung of the OOM ladder end to end in a container, as the script's user meets it: the detached
    supervisor follows the stand-in's log, classifies the OOM, relaunches with offload and resumes from the last
    checkpoint; the store, the container's files and the CLI's views all say so. And EXTRA_OVERRIDES reach every
    attempt, the OOM relaunch's too. (The rest of the ladder, the budget and host-RAM OOMs are decided in-process:
    tests/decisions/test_oom_ladder.py; the host target's run of the same rung: tests/bench/test_gpu_harness.py.)"""
    # OOM at step 3 unless parameters are offloaded: attempt 1 fails, the supervisor appends offload and resumes.
    # The stand-in decides from each attempt's composed config, as real memory pressure would.
    write_control(prepared_container, oom_at_step=3, oom_unless=["offload"], step_seconds=0.05)
    extra = "actor_rollout_ref.actor.optim.lr=3e-6 \"trainer.project_name='my-project'\""
    result = scripts.run("run_dapo.sh", env={"EXTRA_OVERRIDES": extra})
    assert result.returncode == 0, result.describe()
    run_id = run_id_of(result)
    store = Store(scripts.state_dir / "state.db")
    try:
        attempts = store.attempts(run_id)
        run = store.run(run_id)
    finally:
        store.close()
    assert len(attempts) == 2, [a.status for a in attempts]  # the OOM relaunch
    for attempt in attempts:
        assert "actor_rollout_ref.actor.optim.lr=3e-6" in attempt.overrides
        assert "trainer.project_name='my-project'" in attempt.overrides
    # It followed to the end: the run is over when the script returns, and the follow output shows the retry.
    status = scripts.cli_json("status", run_id)
    assert status["status"] == "succeeded", status
    assert (status["attempt"], status["resumed_from_step"]) == (2, 2)  # SAVE_FREQ=2, the OOM hit step 3
    assert (status["step"], status["total_steps"], status["percent"]) == (6, 6, 100.0)
    assert "offload" in status["features"]
    assert "[succeeded] attempt 2" in result.stdout, result.describe()
    assert f"run {run_id} succeeded" in result.stderr, result.describe()
    assert_monitoring(result, scripts.container_name)

    # `errors`: the OOM, its override diff and what the supervisor did about it.
    report = scripts.cli_json("errors", run_id)
    assert report["status"] == "succeeded"
    first, second = report["attempts"]
    assert (first["status"], first["category"], first["kind"]) == ("failed", "gpu_oom", "torch_cuda_oom"), first
    assert first["exit_code"] not in (None, 0) and "CUDA out of memory" in first["excerpt"]
    assert first["supervisor_action"] == "gpu_oom: relaunching with +offload"
    assert first["changes_next_attempt"] == ["+offload"], first
    assert "offload" not in first["features"]
    assert (second["status"], second["exit_code"], second["category"]) == ("succeeded", 0, None), second
    assert second["features"] == [*first["features"], "offload"], second
    assert "actor_rollout_ref.actor.fsdp_config.param_offload: False → True" in second["override_diff"]
    assert second["reason_started"] == "gpu_oom: relaunching with +offload; resuming from step 2", second

    # The store: one row per attempt with features, diff, reason, exit code, start/end and its own log.
    a1, a2 = attempts
    assert a1.config.oom_appended == [] and a2.config.oom_appended == ["offload"]
    assert a1.override_diff == [] and a2.override_diff == second["override_diff"]
    assert (a1.exit_code, a2.exit_code) == (first["exit_code"], 0)
    assert a1.started_at <= a1.ended_at <= a2.started_at <= a2.ended_at  # type: ignore[operator]
    assert a1.job and a2.job and a1.job["log_path"] != a2.job["log_path"]
    assert a1.decision and a1.decision["relaunch"] is True
    assert run is not None and run.final_reason == "training finished (exit code 0)" and run.ended_at is not None

    # Inside the container: attempt 1 started from scratch and died of the OOM; attempt 2 loaded step 2.
    log1, log2 = in_container(scripts, "cat", a1.job["log_path"]), in_container(scripts, "cat", a2.job["log_path"])
    assert "Training from scratch" in log1 and "CUDA out of memory" in log1
    ckpt = checkpoint_dir(a2)
    assert checkpoint_dir(a1) == ckpt  # the same root, or the resume would start over
    for line in (f"Load from checkpoint folder: {ckpt}/global_step_2", "Setting global step to 2",
                 f"Resuming from {ckpt}/global_step_2"):  # fmt: skip
        assert line in log2, f"{line!r} missing from attempt 2's log"
    assert "CUDA out of memory" not in log2
    in_container(scripts, "test", "-d", f"{ckpt}/global_step_2/actor")
    assert in_container(scripts, "cat", f"{ckpt}/latest_checkpointed_iteration.txt").strip() == "6"  # the last save
    # /verl/train.log follows the current attempt, so the original skill's monitoring command still works.
    assert in_container(scripts, "readlink", "--", "/verl/train.log").strip() == a2.job["log_path"]

    # The human views of the same run: `status --follow` ends at once on a finished run, exit 0 = succeeded.
    follow = scripts.cli("status", run_id, "--follow", "--interval", "0.2")
    assert follow.returncode == 0, follow.stdout + follow.stderr
    assert "| 6/6 100.0%" in follow.stdout and "resumed from step 2" in follow.stdout
    text = scripts.cli("errors", run_id).stdout
    assert "attempt 1: failed (exit 1)" in text and "  error: gpu_oom" in text, text
    assert "  supervisor: gpu_oom: relaunching with +offload" in text, text


def test_run_one_step_off_policy_uses_the_gpu_split(scripts: ScriptRunner, prepared_container: Container) -> None:
    write_control(prepared_container, step_seconds=0.05)
    split = {"TRAINER_GPUS": "2", "ROLLOUT_GPUS": "1", "ROLLOUT_TP": "1"}
    result = scripts.run("run_one_step_off_policy.sh", env=split)
    assert result.returncode == 0, result.describe()
    run_id = run_id_of(result)
    assert "(one_step_off_policy, fsdp, verl 0.9.1)" in result.stdout, result.describe()
    assert scripts.cli_json("status", run_id)["status"] == "succeeded"

    store = Store(scripts.state_dir / "state.db")
    try:
        run = store.run(run_id)
        attempts = store.attempts(run_id)
    finally:
        store.close()
    assert run is not None and run.spec.settings["mode"] == "one_step_off_policy"
    assert len(attempts) == 1
    overrides = attempts[0].overrides
    for expected in ("trainer.n_gpus_per_node=2", "rollout.n_gpus_per_node=1", "trainer.nnodes=1", "rollout.nnodes=1"):
        assert expected in overrides, f"{expected} not in {overrides}"

    # The job that ran is the one-step-off entry point, and its composed config carries the rollout group.
    job = attempts[0].job
    assert job is not None
    log = subprocess.run(["docker", "exec", scripts.container_name, "cat", job["log_path"]],
                         capture_output=True, text=True, timeout=30, check=False).stdout  # fmt: skip
    assert "OneStepTaskRunner" in log
    assert "'rollout': {'n_gpus_per_node': 1, 'nnodes': 1}" in log


def test_a_bad_extra_override_starts_nothing(scripts: ScriptRunner, prepared_container: Container) -> None:
    """(EXTRA_OVERRIDES reaching every attempt: test_run_dapo_follows_an_oom_recovery_to_success.)"""
    bad = scripts.run("run_dapo.sh", env={"EXTRA_OVERRIDES": "actor_rollout_ref.actor.optim.lrr=3e-6"})
    assert bad.returncode != 0, bad.describe()
    assert "verl rejected the overrides, nothing was started" in bad.stderr, bad.describe()
    assert "EXTRA_OVERRIDES" in bad.stderr


def test_run_dapo_exits_non_zero_when_training_fails(scripts: ScriptRunner, prepared_container: Container) -> None:
    """The original skill's set -euo pipefail bug made failure handling dead code; ours reports the failure."""
    write_control(prepared_container, fail="config", step_seconds=0.05)
    result = scripts.run("run_dapo.sh")
    assert result.returncode != 0, result.describe()
    run_id = run_id_of(result)
    assert f"run {run_id} did not succeed" in result.stderr, result.describe()
    assert f"verl-async-dapo errors {run_id}" in result.stderr
    assert "nothing was started" not in result.stderr  # it did start: the message must not claim otherwise

    report = scripts.cli_json("errors", run_id)
    assert report["status"] == "failed"
    assert [a["category"] for a in report["attempts"]] == ["config_error"]  # not retried: it cannot help


def test_detached_run_dapo_returns_while_training_runs(scripts: ScriptRunner, prepared_container: Container) -> None:
    # The trainer hangs at step 3 until stopped: the run is still going when the test looks, however loaded the
    # machine (40 steps of 0.25 s were over before `status` and `stop` in a fresh-clone CI run).
    write_control(prepared_container, step_seconds=0.1, hang=True, fail_at_step=3)
    result = scripts.run("run_dapo.sh", env={"DETACH": "1", "TRAIN_STEPS": "40"})
    assert result.returncode == 0, result.describe()
    run_id = run_id_of(result)
    assert scripts.cli_json("status", run_id)["status"] in ACTIVE
    assert "following" not in result.stderr
    stopped = scripts.cli_json("stop", run_id)
    assert stopped["status"] == "stopped", stopped


def test_ctrl_c_stops_following_not_training(
    scripts: ScriptRunner, prepared_container: Container, tmp_path: Path
) -> None:
    write_control(prepared_container, step_seconds=0.1, hang=True, fail_at_step=3)  # going until stopped
    stderr_path = tmp_path / "stderr.txt"
    argv = ["bash", str(SCRIPTS_DIR / "run_dapo.sh")]
    with stderr_path.open("w") as stderr:
        # Its own process group, like a terminal's foreground job: Ctrl-C sends SIGINT to the whole group. And, like a
        # terminal's job, SIGINT not ignored: a suite started in the background (`bash tests/run.sh &`) inherits it
        # ignored, an ignored signal stays ignored across exec, and bash cannot undo that; a handled one is reset.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen(argv, env={**scripts.env, "TRAIN_STEPS": "40"}, cwd=REPO_ROOT,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                    start_new_session=True)  # fmt: skip
        finally:
            signal.signal(signal.SIGINT, previous)
        try:
            deadline = time.monotonic() + 60
            while "[INFO] following run_" not in stderr_path.read_text() and time.monotonic() < deadline:
                assert proc.poll() is None, stderr_path.read_text()
                time.sleep(0.2)
            time.sleep(1.0)
            os.killpg(proc.pid, signal.SIGINT)
            try:
                stdout, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                # What still runs in the script's group, and what it printed: a hang here says nothing by itself.
                group = subprocess.run(["ps", "-o", "pid,ppid,stat,etime,args", "-g", str(proc.pid)],
                                       capture_output=True, text=True, check=False).stdout  # fmt: skip
                output = stderr_path.read_text()
                raise AssertionError(f"Ctrl-C did not end the script within 30 s:\n{group}\n{output}") from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    err = stderr_path.read_text()
    assert proc.returncode == 130, err
    run_id = RUN_ID.findall(stdout)[0]
    assert f"stopped following; {run_id} keeps training" in err, err
    # The supervisor is not in the script's process group: the run goes on.
    assert scripts.cli_json("status", run_id)["status"] in ACTIVE
    assert scripts.cli_json("stop", run_id)["status"] == "stopped"
