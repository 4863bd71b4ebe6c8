"""A SIGKILLed supervisor is restarted by its watchdog, with no client call (issue 20, finding 4).

Before the watchdog the run stayed unwatched until the next tool call healed it: an OOM in that window was not
recovered. Here the supervisor is killed while attempt 1 runs, nothing calls the CLI or the server, and the stand-in
OOMs at step 3: the run must still be relaunched with offload and succeed, by a new supervisor the watchdog started.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from sv_helpers import Cli, prepare_host_tree, proc_alive

from harness.waiting import wait_until


def test_a_killed_supervisor_is_restarted_by_its_watchdog_and_recovers_an_oom(cli: Cli, host_verl_tree: Path) -> None:
    prepare_host_tree(host_verl_tree, {"step_seconds": 1.0, "oom_at_step": 3, "oom_unless": ["offload"]})
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=4, SAVE_FREQ=1,
            VERL_ASYNC_DAPO_WATCHDOG=1)  # fmt: skip
    run_id = cli.start("host")["run_id"]
    wait_until(lambda: (a := cli.attempts(run_id)) and a[0].job is not None, "attempt 1 to start", 30,
               lambda: cli.explain(run_id))  # fmt: skip
    pid = cli.run_row(run_id).supervisor_pid
    assert pid
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not proc_alive(pid), f"supervisor {pid} to die", 10)

    # No status/errors call from here on: only the store is read, which heals nothing.
    def restarted() -> int | None:
        new = cli.run_row(run_id).supervisor_pid
        return new if new and new != pid and proc_alive(new) else None

    new_pid = wait_until(restarted, "the watchdog to start a new supervisor", 30, lambda: cli.explain(run_id))
    row = wait_until(lambda: (r := cli.run_row(run_id)).status.is_terminal() and r, "the run to end", 120,
                     lambda: cli.explain(run_id))  # fmt: skip
    attempts = cli.attempts(run_id)
    assert row.status == "succeeded", cli.explain(run_id)
    assert [a.status for a in attempts] == ["failed", "succeeded"], cli.explain(run_id)
    assert attempts[0].error is not None and attempts[0].error["category"] == "gpu_oom"
    assert "offload" in attempts[1].config.effective
    kinds = [e.kind for e in cli.store.events(run_id, limit=1000)]
    assert "supervisor_restarted" in kinds  # heal's own record, made by the watchdog
    assert new_pid != pid


def _supervisor_pids(run_id: str) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"supervise" in argv and run_id.encode() in argv and any(b"verl_async_dapo" in a for a in argv):
                found.add(int(entry))
    return found


def test_a_healed_supervisor_killed_at_once_is_healed_again(cli: Cli, host_verl_tree: Path) -> None:
    """The healed supervisor is killed within a few ms of appearing, long before its imports are done: the
    watchdog that healed it had exited and the new one started its own watchdog only after its imports, so the
    run stayed unwatched. Now the watchdog comes with the supervisor (spawn_supervisor starts both)."""
    prepare_host_tree(host_verl_tree, {"step_seconds": 1.0})
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=6, SAVE_FREQ=1,
            VERL_ASYNC_DAPO_WATCHDOG=1)  # fmt: skip
    run_id = cli.start("host")["run_id"]
    wait_until(lambda: (a := cli.attempts(run_id)) and a[0].job is not None, "attempt 1 to start", 30,
               lambda: cli.explain(run_id))  # fmt: skip
    first = cli.run_row(run_id).supervisor_pid
    assert first
    os.kill(first, signal.SIGKILL)
    # Its watchdog heals it; the new supervisor is killed the moment it shows in /proc.
    second = wait_until(lambda: next(iter(_supervisor_pids(run_id) - {first}), None), "the healed supervisor", 30,
                        lambda: cli.explain(run_id))  # fmt: skip
    os.kill(second, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: not proc_alive(second) or None, f"supervisor {second} to die", 10)

    def third() -> int | None:
        new = cli.run_row(run_id).supervisor_pid
        return new if new and new not in (first, second) and proc_alive(new) else None

    wait_until(third, "a supervisor after the second kill (no client call)", 60, lambda: cli.explain(run_id))
    healed_after = time.monotonic() - killed_at
    row = wait_until(lambda: (r := cli.run_row(run_id)).status.is_terminal() and r, "the run to end", 120,
                     lambda: cli.explain(run_id))  # fmt: skip
    assert row.status == "succeeded", cli.explain(run_id)
    assert [a.status for a in cli.attempts(run_id)] == ["succeeded"], cli.explain(run_id)
    assert healed_after < 60
