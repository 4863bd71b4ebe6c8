"""Progress tells the truth (issue #14). Item 1, final progress is final: when an attempt ends the supervisor reads its log to the end
before storing the last snapshot, so a succeeded run shows N/N, 100 %, ETA 0 and the last metrics line's values,
even when the log stream broke before the file's end (seen: "succeeded at step 6/10, 60 %, ETA 1.6 s").

The stream is broken for real: the supervisor's own `tail` follower is stopped (SIGSTOP) mid-run, the job runs
to its end, then that follower is killed, so its stream ends early, cleanly, after the job is gone.

Items 2 and 3: before the first step the run reports its phase (from the stand-in's copies of verl's real start-up
markers) and the time in it; after step 1 the ETA comes from the wall clock between step lines, and says so.
Glued step lines and a crafted long line are read in-process in tests/decisions/test_following.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from sv_helpers import FINAL, Cli, proc_cmdline

from harness.standin_files import parquet_bytes, write_model
from harness.waiting import wait_until
from verl_async_dapo.logs.progress import ETA_WALL

STEPS = 10


def _host_tree(tree: Path, control: dict[str, object]) -> None:
    write_model(tree / "models" / "Qwen3-8B")
    (tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (tree / "data" / name).write_bytes(parquet_bytes())
    (tree / "standin_control.json").write_text(json.dumps(control), "utf-8")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _follower(supervisor: int, log_path: str) -> int | None:
    """The supervisor's own `tail --pid=… -F -- LOG` child (started by the host target's follow)."""
    for pid in _children(supervisor):
        cmdline = proc_cmdline(pid) or ""
        if cmdline.startswith("tail ") and "--pid=" in cmdline and log_path in cmdline:
            return pid
    return None


def test_a_broken_log_stream_still_ends_at_the_last_step(cli: Cli, host_verl_tree: Path) -> None:
    _host_tree(host_verl_tree, {"step_seconds": 0.4})
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=STEPS, SAVE_FREQ=5)
    run_id = cli.start("host")["run_id"]
    row = cli.wait_step(run_id, 2)
    supervisor = row.supervisor_pid
    (attempt,) = cli.attempts(run_id)
    assert supervisor and attempt.job
    tail = wait_until(lambda: _follower(supervisor, attempt.job["log_path"]), "the supervisor's log follower", 20)
    os.kill(tail, signal.SIGSTOP)  # the stream delivers nothing more ...
    try:
        seen = cli.run_row(run_id).progress["step"]  # type: ignore[index]
        assert seen < STEPS, "the run ended before the stream could be broken; make it longer"
        rc = Path(attempt.job["job_dir"]) / "rc"
        wait_until(rc.is_file, "the job to finish while its log stream is stalled", 60, lambda: cli.explain(run_id))
    finally:
        os.kill(tail, signal.SIGKILL)  # ... and ends early, cleanly, after the job is gone
    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded", cli.explain(run_id)
    assert (status["step"], status["total_steps"], status["percent"], status["eta_seconds"]) == (
        STEPS,
        STEPS,
        100.0,
        0.0,
    )
    assert status["metrics_step"] == STEPS
    assert status["metrics"]["training/global_step"] == STEPS
    assert status["phase"] == "finishing"


def test_start_up_phases_then_a_wall_clock_eta(cli: Cli, host_verl_tree: Path) -> None:
    _host_tree(host_verl_tree, {"step_seconds": 0.4, "startup_seconds": 9})  # 3 s each: Ray, model, vLLM
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=12, SAVE_FREQ=4)
    run_id = cli.start("host")["run_id"]
    phases: list[str] = []
    shown: list[str] = []

    def watch() -> dict[str, object] | None:
        row = cli.run_row(run_id)
        progress = row.progress or {}
        phase = progress.get("phase")
        if phase and (not phases or phases[-1] != phase):
            phases.append(phase)  # type: ignore[arg-type]
            if phase == "loading model":  # the CLI says it too, with the time spent in it
                shown.append(cli.run("status", run_id).stdout)
        if phase in ("loading model", "rollout engine start-up"):
            assert progress.get("step") is None
        return progress if (progress.get("step") or 0) >= 6 or row.status in FINAL else None

    progress = wait_until(watch, "step 6", 60, lambda: cli.explain(run_id))
    assert phases[:2] == ["loading model", "rollout engine start-up"] or phases[:3] == [
        "starting Ray", "loading model", "rollout engine start-up"]  # fmt: skip
    assert "training" in phases
    assert shown and ("· loading model for " in shown[0] or "· rollout engine start-up for " in shown[0]), shown
    assert progress["eta_basis"] == ETA_WALL
    status = cli.status(run_id)
    if status["status"] not in FINAL:
        assert status["eta_basis"] == ETA_WALL and status["seconds_per_step"] < 2.0  # warm-up (3 s of vLLM) left out
    final = cli.wait_final(run_id)
    assert (final["status"], final["step"], final["phase"], final["phase_seconds"]) == (
        "succeeded",
        12,
        "finishing",
        None,
    )
    # Where the start-up went (issue 31 item 2): the stand-in spends 3 s in each of these, as the supervisor saw.
    seconds = {p["phase"]: p["seconds"] for p in final["startup"]}
    assert [p["phase"] for p in final["startup"]][-1] == "first step (warm-up)", final["startup"]
    for phase in ("starting Ray", "loading model", "rollout engine start-up"):
        assert 2.5 <= seconds.get(phase, 0.0) <= 30.0, final["startup"]
    assert final["startup_seconds"] >= 9.0
    assert "start-up: " in cli.run("status", run_id).stdout
