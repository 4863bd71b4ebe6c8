"""A one-minute time limit: the job SLURM ends at its limit is a scheduler_kill (kind time_limit) with the fix
"requeue from the last checkpoint or a longer limit", after training (and checkpointing) until then.

The run is started by the first SLURM test module (conftest's ``time_limit_run``): SLURM's smallest limit is one
minute and slurmctld checks limits every 30 s, so it ends 60-90 s after it started; the other modules run
meanwhile and this one, the last, waits for what is left.
"""

from __future__ import annotations

from typing import Any

from slurm_helpers import squeue_state
from sv_helpers import Cli

TIME_LIMIT_DEADLINE_S = 200.0  # 60 s limit + 30 s slurmctld's check period + KillWait, with headroom on 2 cores


def test_a_time_limit_kill_is_a_scheduler_kill(time_limit_run: tuple[Cli, str]) -> None:
    cli, run_id = time_limit_run
    status: dict[str, Any] = cli.wait_final(run_id, timeout=TIME_LIMIT_DEADLINE_S)
    assert status["status"] == "failed", cli.explain(run_id)
    assert status["step"] and status["step"] >= 2  # it trained (and checkpointed) until the limit
    (attempt,) = cli.errors(run_id)["attempts"]
    assert (attempt["category"], attempt["kind"]) == ("scheduler_kill", "time_limit"), attempt
    assert "DUE TO TIME LIMIT" in attempt["excerpt"]  # slurmstepd's own line
    row = cli.attempts(run_id)[0]
    assert row.job and squeue_state(row.job["exec_id"]) == "TIMEOUT"
    suggestions = cli.run_row(run_id).suggestions
    assert any("requeue from the last checkpoint" in s and "longer" in s for s in suggestions), suggestions
