"""A supervisor started where an earlier one was killed between two steps of its own bookkeeping carries the run
on *and keeps watching it* until it ends, with no CLI call or server to restart it again.

The two points here are the gaps around a relaunch (found by the crash-safety test's random SIGKILLs): after an
attempt's failure was recorded but before the next attempt was, and after an attempt that never started was
marked abandoned but before its replacement was recorded. The earlier supervisor's death at those points is
reproduced by killing it mid-run and writing what it had written by then; the new supervisor is started directly
(``verl-async-dapo supervise RUN_ID``, as ``start`` and heal start it) and the test waits for it to exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from docker.models.containers import Container
from sv_helpers import RUN_DEADLINE_S, Cli, launchers, proc_alive, sh, trainers, wait_until, write_control

from verl_async_dapo.status import AttemptStatus

STEP_S = 0.5  # the stand-in's first steps take seconds: the supervisor is killed well before any of them


def _kill_supervisor_once_launched(cli: Cli, run_id: str) -> None:
    """SIGKILL the run's supervisor as soon as attempt 1 has started: well before the job's first step is done,
    so the supervisor cannot have seen anything of it."""
    wait_until(lambda: (a := cli.attempts(run_id)) and a[0].job is not None, "attempt 1 to start", 30,
               lambda: cli.explain(run_id))  # fmt: skip
    pid = cli.run_row(run_id).supervisor_pid
    assert pid, cli.explain(run_id)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(pid), f"supervisor {pid} to die", 10)
    attempts = cli.attempts(run_id)
    assert [a.status for a in attempts] == ["running"], f"killed too late to test this\n{cli.explain(run_id)}"


def _supervise_to_the_end(cli: Cli, run_id: str) -> None:
    """Start a supervisor for the run and wait for it to exit on its own: it must not leave the run active."""
    proc = subprocess.Popen(cli.argv("supervise", run_id), env=cli.env, cwd=cli.home,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _, err = proc.communicate(timeout=RUN_DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(
            f"the supervisor did not finish the run in {RUN_DEADLINE_S:g} s\n{cli.explain(run_id)}"
        ) from None
    assert proc.returncode == 0, f"supervise exited {proc.returncode}: {err}\n{cli.explain(run_id)}"
    assert cli.run_row(run_id).status == "succeeded", (
        f"the supervisor exited and left the run {cli.run_row(run_id).status!r}\n{cli.explain(run_id)}"
    )


def test_started_between_a_failed_attempt_and_the_next_it_relaunches_and_watches(
    cli: Cli, verl_docker: Container
) -> None:
    write_control(verl_docker, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": STEP_S})
    run_id = cli.start(verl_docker.name)["run_id"]
    _kill_supervisor_once_launched(cli, run_id)
    # Unsupervised, the job goes on, hits its OOM at step 3 and exits.
    wait_until(lambda: not launchers(verl_docker), "the job to end with its OOM", 30)
    # What the killed supervisor had recorded when it died just before deciding on a relaunch.
    error = {"category": "gpu_oom", "kind": "torch_cuda_oom", "excerpt": "torch.OutOfMemoryError: CUDA out of memory",
             "line": None}  # fmt: skip
    cli.store.update_attempt(run_id, 1, status="failed", exit_code=1, error=error, ended_at=time.time())

    _supervise_to_the_end(cli, run_id)
    first, second = cli.attempts(run_id)
    assert first.status == "failed" and first.decision is not None and first.decision["changes"] == ["+offload"]
    assert second.status == "succeeded" and second.exit_code == 0
    assert second.config.oom_appended == ["offload"]
    assert second.reason == "gpu_oom: relaunching with +offload; resuming from step 2"
    assert [e.kind for e in cli.store.events(run_id)].count("oom_recovery") == 1


def test_started_after_an_attempt_was_abandoned_it_launches_it_again_without_using_a_retry(
    cli: Cli, verl_docker: Container
) -> None:
    write_control(verl_docker, {"step_seconds": STEP_S})
    # Long enough to kill things mid-run; an abandoned attempt never ran, so relaunching it must not need a retry.
    cli.set(TRAIN_STEPS=30, MAX_OOM_RETRIES=0)
    run_id = cli.start(verl_docker.name)["run_id"]
    _kill_supervisor_once_launched(cli, run_id)
    pids = [str(p.pid) for p in launchers(verl_docker) + trainers(verl_docker)]
    assert pids, "no job to kill"
    sh(verl_docker, 'kill -9 "$@"', *pids)
    wait_until(lambda: not launchers(verl_docker) and not trainers(verl_docker), "the job to be gone", 15)
    # What a killed supervisor leaves when it died right after abandoning the attempt. Written into the DB directly:
    # the store refuses running → abandoned (status.py: only an attempt still launching is abandoned), and the
    # state under test is the abandoned row, not how this one got there.
    with cli.store.transaction() as conn:
        conn.execute("UPDATE attempts SET status=?, ended_at=? WHERE run_id=? AND n=1",
                     (AttemptStatus.ABANDONED.value, time.time(), run_id))  # fmt: skip

    _supervise_to_the_end(cli, run_id)
    first, second = cli.attempts(run_id)
    assert first.status == "abandoned"
    assert second.status == "succeeded" and second.exit_code == 0
    assert second.config == first.config
    assert second.reason == "supervisor restarted before the launch"
