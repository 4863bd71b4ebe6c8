"""What the supervisor reads from an attempt's log as it follows it, in-process: step lines glued onto a newline-less
tqdm bar still count (issue 26 item 4), a crafted 24 KB line freezes nothing (issue 27 item 4), and a config error
verl raises in the job ends the run at once with its cause, without a relaunch.

Moved here from tests/supervisor/test_supervisor_progress_truth.py and test_supervisor_failures.py, which keep the
host end to end of a broken log stream and the start-up phases on the wall clock, and a stale key refused by the
pre-launch compose inside a container."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.inprocess_runs import InProcessRuns, write_control

STEPS = 10


async def test_step_lines_glued_after_a_newline_less_tqdm_bar_still_end_at_the_last_step(
    inprocess: InProcessRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen over MCP on a container: from step 7 on the stand-in prints its bar as a terminal-less tqdm under Ray did,
    # without a newline, so each metrics line is glued onto it. The run showed 6/10, 60 %.
    # 0.1 s steps, as apart as a real run's: several steps in one piece of the stream are announced as a backlog (last 5).
    write_control(inprocess.tree, {"step_seconds": 0.1, "glue_tqdm_from_step": 7})
    for name, value in {"TRAIN_STEPS": str(STEPS), "SAVE_FREQ": "5", "VAD_NOTIFY_EVERY_N_STEPS": "1"}.items():
        monkeypatch.setenv(name, value)
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    # The supervisor saw every step as it came, the glued ones too (each is a progress_step event).
    steps = [e.data["step"] for e in inprocess.ctx.store.events(run_id, limit=1000) if e.kind == "progress_step"]  # type: ignore[index]
    assert steps == list(range(1, STEPS + 1)), steps
    (attempt,) = inprocess.ctx.store.attempts(run_id)
    text = Path(attempt.job["log_path"]).read_text(encoding="utf-8")  # type: ignore[index]
    assert re.search(r"(s/it|it/s)\]\(\w*TaskRunner pid=\d+\) step:7 - ", text), text[-3000:]
    status = await inprocess.progress(run_id)
    assert (status["step"], status["total_steps"], status["percent"], status["eta_seconds"]) == (STEPS, STEPS, 100.0, 0.0)
    assert status["metrics_step"] == STEPS


async def test_a_crafted_line_does_not_freeze_the_supervisor(inprocess: InProcessRuns) -> None:
    # One 24 KB line of this shape kept the supervisor busy 452 s in the SwanLab-link regex, with no OOM relaunch.
    # Now the OOM at step 3 is recovered as usual.
    crafted = "swanlab:View run  athttp://" * 900  # 24 KB; 8 KB of it took the old regex 4.8 s here, 24 KB ~2 min
    write_control(inprocess.tree, {"step_seconds": 0.01, "echo_lines": [crafted], "oom_at_step": 3,
                                   "oom_unless": ["offload"]})  # fmt: skip
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id, timeout=60) == "succeeded", inprocess.explain(run_id)
    status = await inprocess.progress(run_id)
    assert (status["attempt"], status["step"], status["parsing_cut_short"]) == (2, 6, False)
    first = inprocess.ctx.store.attempts(run_id)[0]
    assert crafted in Path(first.job["log_path"]).read_text(encoding="utf-8")  # type: ignore[index]


async def test_config_error_in_the_job_fails_without_relaunch(inprocess: InProcessRuns) -> None:
    write_control(inprocess.tree, {"fail": "config", "step_seconds": 0.01})
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "failed", inprocess.explain(run_id)
    status = await inprocess.progress(run_id)
    assert status["final_reason"].startswith("config_error") and status["suggestions"]
    (only,) = inprocess.errors(run_id)
    assert (only["status"], only["category"], only["changes_next_attempt"]) == ("failed", "config_error", [])
    assert only["exit_code"] not in (None, 0)
    assert "divisible" in only["excerpt"]  # verl's own check (stand-in: batch size vs GPUs)
    (attempt,) = inprocess.ctx.store.attempts(run_id)
    assert attempt.supervisor_decision and attempt.supervisor_decision.relaunch is False
    assert not any(job.running for job in inprocess.target.jobs.values())
