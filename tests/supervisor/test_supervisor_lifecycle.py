"""The supervisor's life apart from its run: training survives the supervisor's death (the next CLI call starts
a new one that reattaches instead of launching a second copy), survives the death of the CLI that started it
(the supervisor is detached in its own session), and `stop` ends the job's whole process group, even when
neither the supervisor nor the container is left.
"""

from __future__ import annotations

import os
import signal
import subprocess

from docker.models.containers import Container
from sv_helpers import (
    Cli,
    cat,
    is_our_supervisor,
    last_bar,
    launchers,
    proc_alive,
    processes,
    trainers,
    write_control,
)

from harness.waiting import wait_until

LONG_STEP_S = 0.3
LONG_STEPS = 40  # ~12 s of training: long enough to kill things mid-run, short enough for the suite


def _bar_step(container: Container, log_path: str) -> int:
    found = last_bar(cat(container, log_path))
    return found[0] if found else 0


def test_killed_supervisor_is_replaced_and_reattaches(cli: Cli, verl_docker: Container) -> None:
    write_control(verl_docker, {"step_seconds": LONG_STEP_S})
    cli.set(TRAIN_STEPS=LONG_STEPS, SAVE_FREQ=10)
    run_id = cli.start(verl_docker.name)["run_id"]
    cli.wait_step(run_id, 2)
    old_pid = cli.run_row(run_id).supervisor_pid
    assert old_pid and is_our_supervisor(old_pid, run_id), f"pid {old_pid} is not this run's supervisor"
    (attempt,) = cli.attempts(run_id)
    assert attempt.job is not None
    log_path = attempt.job["log_path"]

    os.kill(old_pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(old_pid), f"supervisor {old_pid} to die", 10)
    # Nobody supervises now, yet the job goes on in the container.
    killed_at = _bar_step(verl_docker, log_path)
    wait_until(lambda: _bar_step(verl_docker, log_path) > killed_at, "training to advance without a supervisor", 15)
    assert cli.run_row(run_id).status == "running"  # nothing noticed yet: no process is watching

    # The next CLI call notices the free lock and starts a new supervisor ...
    assert cli.status(run_id)["status"] == "running"
    new_pid = wait_until(
        lambda: (pid if (pid := cli.run_row(run_id).supervisor_pid) != old_pid and pid else None),
        "a new supervisor to record its pid", 20, lambda: cli.explain(run_id),
    )  # fmt: skip
    assert is_our_supervisor(new_pid, run_id)
    assert [e.kind for e in cli.store.events(run_id)].count("supervisor_restarted") == 1
    supervisor_log = cli.home / "runs" / run_id / "supervisor.log"
    wait_until(lambda: "reattaching to attempt 1" in supervisor_log.read_text(errors="replace"),
               "the new supervisor to reattach (supervisor.log)", 20, lambda: cli.explain(run_id))  # fmt: skip
    # ... which reattaches: still one attempt, one launcher and one trainer in the container.
    step_now = _bar_step(verl_docker, log_path)
    assert step_now < LONG_STEPS, "the run ended before the reattach could be checked; make it longer"
    assert len(cli.attempts(run_id)) == 1 and cli.attempts(run_id)[0].status == "running"
    assert len(launchers(verl_docker)) == 1, processes(verl_docker)
    assert len(trainers(verl_docker)) == 1, processes(verl_docker)

    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded", cli.explain(run_id)
    assert (status["attempt"], status["step"]) == (1, LONG_STEPS)
    (attempt,) = cli.attempts(run_id)
    assert attempt.status == "succeeded" and attempt.exit_code == 0
    assert cli.run_row(run_id).supervisor_pid == new_pid  # no third supervisor was needed
    assert wait_until(lambda: not proc_alive(new_pid), "the new supervisor to exit after the run", 15)


def test_run_survives_the_cli_that_started_it(cli: Cli, verl_docker: Container) -> None:
    write_control(verl_docker, {"step_seconds": 0.15})
    cli.set(TRAIN_STEPS=20, SAVE_FREQ=10)
    # `start --wait` blocks until the run ends; its own session stands for a terminal we can close.
    starter = subprocess.Popen(
        cli.argv("start", "--container", verl_docker.name, "--wait"), env=cli.env, cwd=cli.home,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        row = wait_until(
            lambda: next((r for r in cli.store.runs() if r.supervisor_pid), None),
            "the CLI to create a run and spawn its supervisor", 30,
        )  # fmt: skip
        assert starter.poll() is None, "start --wait returned before the run ended"
        os.killpg(starter.pid, signal.SIGKILL)  # the CLI's whole process group, as closing its terminal would
        assert starter.wait(timeout=10) == -signal.SIGKILL
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(timeout=10)

    supervisor = row.supervisor_pid
    assert supervisor and is_our_supervisor(supervisor, row.id), "the supervisor died with the CLI's group"
    assert os.getpgid(supervisor) != starter.pid and os.getsid(supervisor) != starter.pid
    status = cli.wait_final(row.id)
    assert status["status"] == "succeeded", cli.explain(row.id)
    assert status["step"] == 20 and status["attempt"] == 1
    # The original supervisor saw it through: never replaced.
    assert cli.run_row(row.id).supervisor_pid == supervisor
    assert "supervisor_restarted" not in [e.kind for e in cli.store.events(row.id)]


def test_stop_ends_a_run_whose_supervisor_and_container_are_gone(cli: Cli, verl_docker: Container) -> None:
    # Nothing is left to supervise or to signal, yet `stop` must still end the run (and free the name).
    write_control(verl_docker, {"step_seconds": 0.2})
    cli.set(TRAIN_STEPS=200, SAVE_FREQ=50)
    run_id = cli.start(verl_docker.name)["run_id"]
    cli.wait_step(run_id, 1)
    pid = cli.run_row(run_id).supervisor_pid
    assert pid and is_our_supervisor(pid, run_id)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(pid), f"supervisor {pid} to die", 10)
    verl_docker.remove(force=True, v=True)

    result = cli.json("stop", run_id)
    assert (result["status"], result["message"]) == ("stopped", "stopped")
    run = cli.run_row(run_id)
    assert run.status == "stopped" and run.final_reason
    assert run.final_reason.startswith("stopped on request; could not reach the job:")
    assert "not found" in run.final_reason
    (attempt,) = cli.attempts(run_id)
    assert attempt.status == "stopped" and attempt.ended_at is not None  # not left "running" under a stopped run
    assert cli.status(run_id)["status"] == "stopped"
    assert "supervisor_restarted" not in [e.kind for e in cli.store.events(run_id)]  # a final run is not healed


def test_stop_ends_the_job_and_its_process_group(cli: Cli, verl_docker: Container) -> None:
    write_control(verl_docker, {"step_seconds": 0.2})
    cli.set(TRAIN_STEPS=200, SAVE_FREQ=50)
    run_id = cli.start(verl_docker.name)["run_id"]
    cli.wait_step(run_id, 1)
    (attempt,) = cli.attempts(run_id)
    assert attempt.job is not None
    pgid = int(cat(verl_docker, f"{attempt.job['job_dir']}/pgid"))
    assert any(p.pgid == pgid for p in trainers(verl_docker)), "the trainer runs in the launcher's group"

    result = cli.json("stop", run_id)
    assert result == {"run_id": run_id, "status": "stopped", "message": "stopped"}

    assert [p for p in processes(verl_docker) if p.pgid == pgid] == []
    assert trainers(verl_docker) == []
    run = cli.run_row(run_id)
    assert (run.status, run.final_reason, run.stop_requested) == ("stopped", "stopped on request", True)
    status = cli.status(run_id)
    assert status["status"] == "stopped" and 1 <= (status["step"] or 0) < 200
    (attempt,) = cli.attempts(run_id)
    assert attempt.status == "stopped" and attempt.ended_at is not None
    assert attempt.exit_code != 0  # None when the group kill took the launcher before it wrote rc
    # A stop is not a failure: `errors` shows no invented cause (e.g. "the job vanished") for it.
    (item,) = cli.errors(run_id)["attempts"]
    assert (item["status"], item["category"], item["supervisor_action"]) == ("stopped", None, None)
    # Stopped means stopped: no relaunch follows, and a second stop is a no-op.
    wait_until(lambda: not proc_alive(run.supervisor_pid or 0), "the supervisor to exit after the stop", 15)
    assert len(cli.attempts(run_id)) == 1
    assert cli.json("stop", run_id)["message"] == "run already stopped"


def test_a_removed_container_ends_the_run_instead_of_waiting_forever(cli: Cli, verl_docker: Container) -> None:
    """The job died with its container: the supervisor records that (kind target_gone) and stops; status and errors
    say target_gone from the user's seat, not the environment category's "reinstall flash-attn" (issue 28)."""
    write_control(verl_docker, {"step_seconds": LONG_STEP_S})
    cli.set(TRAIN_STEPS=LONG_STEPS, SAVE_FREQ=10)
    run_id = cli.start(verl_docker.name)["run_id"]
    cli.wait_step(run_id, 2)
    verl_docker.remove(force=True)
    final = cli.wait_final(run_id, timeout=60)
    assert final["status"] == "failed"
    assert str(final["final_reason"]).startswith("target_gone: "), final
    report = cli.errors(run_id)
    (attempt,) = report["attempts"]
    assert attempt["category"] == "target_gone" and cli.attempts(run_id)[0].attempt_error.category == "environment"
    assert attempt["kind"] == "target_gone"
    assert "flash-attn" not in f"{attempt['explanation']} {attempt['fix']} {final['final_reason']} {report['suggestions']}"
    assert "not found" in attempt["excerpt"] or "not running" in attempt["excerpt"]
    assert len(cli.attempts(run_id)) == 1  # nothing relaunched into a container that is gone
