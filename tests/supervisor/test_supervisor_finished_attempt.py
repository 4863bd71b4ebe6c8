"""A supervisor killed after its attempt ended well, before it recorded that, must not relaunch it (issue 27, item 7).

Seen: ``test_concurrency``'s heal race under load ended with attempts [1, 2]: the supervisor was killed around the
time the short attempt ended and the healed one launched a second attempt. On a GPU that is minutes of start-up
for nothing. Here the moment is made exact on the host target: the supervisor is frozen (SIGSTOP) while attempt
1 trains, so it can record nothing; the job runs to its end and the target keeps its exit status (the job dir's
``rc``); then the frozen supervisor is SIGKILLed and a new one is started, as heal starts it. It must decide from
the attempt's own evidence and end the run succeeded with one attempt.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from sv_helpers import RUN_DEADLINE_S, Cli, prepare_host_tree, proc_alive

from harness.waiting import wait_until


def _freeze_then_kill_after_the_job_ended(cli: Cli, run_id: str) -> Path:
    wait_until(lambda: (a := cli.attempts(run_id)) and a[0].job is not None and cli.run_row(run_id).supervisor_pid,
               "attempt 1 to start", 60, lambda: cli.explain(run_id))  # fmt: skip
    pid = cli.run_row(run_id).supervisor_pid
    assert pid
    os.kill(pid, signal.SIGSTOP)  # from here on it records nothing
    try:
        job = cli.attempts(run_id)[0].job
        assert job is not None
        rc = Path(job["job_dir"]) / "rc"
        wait_until(lambda: rc.exists() or None, "the job to end on its own", RUN_DEADLINE_S, lambda: cli.explain(run_id))
    finally:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(pid) or None, f"supervisor {pid} to die", 10)
    attempts = cli.attempts(run_id)
    assert rc.read_text().strip() == "0", cli.explain(run_id)
    assert [a.status for a in attempts] == ["running"], f"recorded before the kill: not this case\n{cli.explain(run_id)}"
    return rc


def test_a_supervisor_killed_after_the_attempt_exited_0_ends_the_run_succeeded_without_a_relaunch(
    cli: Cli, host_verl_tree: Path
) -> None:
    prepare_host_tree(host_verl_tree, {"step_seconds": 0.2})
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=4, SAVE_FREQ=2)
    run_id = cli.start("host")["run_id"]
    _freeze_then_kill_after_the_job_ended(cli, run_id)

    healed = subprocess.run(cli.argv("supervise", run_id), env=cli.env, cwd=cli.home, capture_output=True,
                            text=True, timeout=RUN_DEADLINE_S, check=False)  # fmt: skip
    assert healed.returncode == 0, healed.stderr
    row = cli.run_row(run_id)
    attempts = cli.attempts(run_id)
    assert [(a.n, a.status, a.exit_code) for a in attempts] == [(1, "succeeded", 0)], cli.explain(run_id)
    assert row.status == "succeeded", cli.explain(run_id)
    assert (row.progress or {}).get("step") == 4, row.progress


def _slow_setsid(bin_dir: Path, seconds: float) -> Path:
    """A ``setsid`` first on PATH that takes ``seconds`` to start (a loaded machine's bash, made exact): it marks
    that it was called, waits, then runs the real one. Returns the mark file."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    mark = bin_dir / "setsid-called"
    real = shutil.which("setsid")
    assert real, "setsid is part of util-linux"
    wrapper = bin_dir / "setsid"
    wrapper.write_text(f'#!/bin/sh\necho "$$" >> "{mark}"\nsleep {seconds}\nexec "{real}" "$@"\n', "utf-8")
    wrapper.chmod(0o755)
    return mark


def test_a_supervisor_killed_while_its_launcher_starts_is_not_followed_by_a_second_launch(
    cli: Cli, host_verl_tree: Path, tmp_path: Path
) -> None:
    """Killed after the launcher was started but before it recorded its pgid: the next supervisor waited for
    nothing, called the attempt abandoned and launched attempt 2 beside attempt 1 (two trainings at once)."""
    prepare_host_tree(host_verl_tree, {"step_seconds": 0.2})
    mark = _slow_setsid(tmp_path / "slow-bin", 6.0)
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=4, SAVE_FREQ=2,
            PATH=f"{mark.parent}{os.pathsep}{cli.env['PATH']}")  # fmt: skip
    run_id = cli.start("host")["run_id"]
    wait_until(lambda: mark.exists() or None, "the launcher of attempt 1 to be started", 60, lambda: cli.explain(run_id))
    pid = cli.run_row(run_id).supervisor_pid
    assert pid
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(pid) or None, f"supervisor {pid} to die", 10)
    assert [(a.n, a.job) for a in cli.attempts(run_id)] == [(1, None)], cli.explain(run_id)

    healed = subprocess.run(cli.argv("supervise", run_id), env=cli.env, cwd=cli.home, capture_output=True,
                            text=True, timeout=RUN_DEADLINE_S, check=False)  # fmt: skip
    assert healed.returncode == 0, healed.stderr
    attempts = cli.attempts(run_id)
    assert [(a.n, a.status, a.exit_code) for a in attempts] == [(1, "succeeded", 0)], cli.explain(run_id)
    assert cli.run_row(run_id).status == "succeeded"
    assert len(mark.read_text().split()) == 1, "a second launcher was started"
    assert not Path(attempts[0].job["job_dir"]).with_name("attempt-2").exists()  # type: ignore[index]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_attempt_that_finished_without_an_exit_status_is_judged_by_its_own_evidence(
    cli: Cli, host_verl_tree: Path
) -> None:
    """The launcher (which writes rc) dies while the trainer goes on to its last step and exits: no exit status is
    kept. The next supervisor used to read that as worker_died and relaunch; the log's last step (4/4), a clean
    tail and the checkpoint tracker at step 4 say the attempt ended well."""
    prepare_host_tree(host_verl_tree, {"step_seconds": 0.3})
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=4, SAVE_FREQ=2)
    run_id = cli.start("host")["run_id"]
    wait_until(lambda: (a := cli.attempts(run_id)) and a[0].job is not None and cli.run_row(run_id).supervisor_pid,
               "attempt 1 to start", 60, lambda: cli.explain(run_id))  # fmt: skip
    pid = cli.run_row(run_id).supervisor_pid
    assert pid
    os.kill(pid, signal.SIGSTOP)
    try:
        job = cli.attempts(run_id)[0].job
        assert job is not None
        job_dir = Path(job["job_dir"])
        pgid = int((job_dir / "pgid").read_text())
        os.kill(pgid, signal.SIGKILL)  # the launcher only: the trainer in its group trains on
        wait_until(lambda: not _group_alive(pgid) or None, "the trainer to finish on its own", RUN_DEADLINE_S,
                   lambda: cli.explain(run_id))  # fmt: skip
    finally:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(pid) or None, f"supervisor {pid} to die", 10)
    assert not (job_dir / "rc").exists() and "step:4" in (job_dir / "train.log").read_text()

    healed = subprocess.run(cli.argv("supervise", run_id), env=cli.env, cwd=cli.home, capture_output=True,
                            text=True, timeout=RUN_DEADLINE_S, check=False)  # fmt: skip
    assert healed.returncode == 0, healed.stderr
    row = cli.run_row(run_id)
    assert [(a.n, a.status) for a in cli.attempts(run_id)] == [(1, "succeeded")], cli.explain(run_id)
    assert row.status == "succeeded", cli.explain(run_id)
    assert "step 4/4 in its log" in (row.final_reason or "") and "tracker at step 4" in (row.final_reason or "")
