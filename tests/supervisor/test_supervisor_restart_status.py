"""A finished attempt is never shown as running right after a supervisor restart (issue 20, finding 6).

The supervisor is SIGKILLed once attempt 1 has started; the job then runs to its end unwatched. The next ``status``
call starts a new supervisor (heal), which has not recorded the outcome yet at that instant: before the fix that
call said "running" for a job that had already exited. The job's own rc file is the ground truth here.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from sv_helpers import Cli, prepare_host_tree, proc_alive

from harness.waiting import wait_until


def test_status_right_after_a_restart_does_not_call_an_ended_job_running(cli: Cli, host_verl_tree: Path) -> None:
    prepare_host_tree(host_verl_tree, {"step_seconds": 0.3})
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=3, SAVE_FREQ=1)
    run_id = cli.start("host")["run_id"]
    # Launched and recorded: the job on the attempt, then the run marked running (two writes; a kill between them
    # under load left the run "starting", which is not the state this test is about).
    wait_until(lambda: (a := cli.attempts(run_id)) and a[0].job is not None and cli.run_row(run_id).status == "running",
               "attempt 1 to start", 30, lambda: cli.explain(run_id))  # fmt: skip
    pid = cli.run_row(run_id).supervisor_pid
    assert pid
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(pid), f"supervisor {pid} to die", 10)
    job = cli.attempts(run_id)[0].job
    assert job is not None
    rc = Path(job["job_dir"]) / "rc"
    wait_until(lambda: rc.exists(), "the unwatched job to end", 120, lambda: cli.explain(run_id))
    assert cli.run_row(run_id).status == "running" and cli.attempts(run_id)[0].status == "running"  # unrecorded

    shown = cli.status(run_id)["status"]  # this call heals: a new supervisor starts now
    assert shown != "running", f"an ended job was shown running\n{cli.explain(run_id)}"
    assert shown in ("finishing", "succeeded"), shown
    final = cli.wait_final(run_id)
    assert final["status"] == "succeeded", cli.explain(run_id)
