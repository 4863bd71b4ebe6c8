"""Resume is verified, not assumed (issue #14, item 6): before a relaunch the supervisor checks that the tracker
(latest_checkpointed_iteration.txt) names a complete global_step_N; after it, that verl's log says it resumed at
N. When verl starts from scratch although steps were saved (verl #7952: async_save under FSDP never writes the
tracker; the stand-in's ``skip_tracker`` prints verl's own "skip write latest_checkpointed_iteration.txt" line),
get_progress and check_errors say "resumed from 0: N steps lost", never silently."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from sv_helpers import TRACKER, Cli, checkpoint_dir

from harness.standin_files import parquet_bytes, write_model
from verl_async_dapo.supervisor.resume_check import ResumeVerdict, inspect, verify
from verl_async_dapo.targets.registry import get_target


def _host_tree(tree: Path, control: dict[str, object]) -> None:
    write_model(tree / "models" / "Qwen3-8B")
    (tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (tree / "data" / name).write_bytes(parquet_bytes())
    (tree / "standin_control.json").write_text(json.dumps(control), "utf-8")


def _save(root: Path, step: int, *, data: bool = True) -> None:
    (root / f"global_step_{step}" / "actor").mkdir(parents=True)
    if data:
        (root / f"global_step_{step}" / "data.pt").write_bytes(b"x")


def test_inspect_reads_the_tracker_and_the_saved_steps(tmp_path: Path) -> None:
    target = get_target("host")
    root = tmp_path / "ckpt"
    root.mkdir()

    def check(last: int | None = 6) -> object:
        return anyio.run(lambda: inspect(target, str(root), save_freq=2, last_step=last))

    empty = check()
    assert (empty.tracker_step, empty.saved_steps, empty.expected_step, empty.note) == (None, (), 0, None)
    _save(root, 2)
    _save(root, 4)
    missing = check()
    assert (missing.expected_step, missing.saved_steps) == (0, (2, 4))
    assert "is missing although global_step_4 is saved" in missing.note and "verl #7952" in missing.note
    (root / TRACKER).write_text("4")
    good = check()
    assert (good.tracker_step, good.complete, good.expected_step, good.note) == (4, True, 4, None)
    _save(root, 6, data=False)  # the tracker is written last: one naming an incomplete dir is a broken save
    (root / TRACKER).write_text("6")
    broken = check()
    assert (broken.complete, broken.expected_step) == (False, 0) and "not complete" in broken.note


def test_verify_compares_what_verl_printed_with_what_was_saved() -> None:
    expected = {"saved_steps": [2, 4], "expected_step": 4}
    assert verify(expected, {}) is None  # verl has not said yet
    assert verify(expected, {"resumed_from_step": 4}) == ResumeVerdict("resumed from step 4 as expected", 0)
    assert verify(expected, {"training_from_scratch": True}) == ResumeVerdict(
        "resumed from 0: 4 steps lost (global_step_4 was saved)", 4)
    assert verify(expected, {"resumed_from_step": 3}) == ResumeVerdict(
        "resumed from 3: 1 step lost (global_step_4 was saved)", 1)
    assert verify(None, {"training_from_scratch": True}) is None  # attempt 1: nothing to compare with
    assert verify({"saved_steps": [], "expected_step": 0}, {"training_from_scratch": True}) is None


def test_a_relaunch_that_starts_from_scratch_says_how_many_steps_were_lost(cli: Cli, host_verl_tree: Path) -> None:
    _host_tree(host_verl_tree, {"oom_at_step": 5, "oom_unless": ["offload"], "step_seconds": 0.1, "skip_tracker": True})
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=6, SAVE_FREQ=2)
    run_id = cli.start("host")["run_id"]
    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded" and status["attempt"] == 2, cli.explain(run_id)
    assert status["resume_check"] == "resumed from 0: 4 steps lost (global_step_4 was saved)"
    a1, a2 = cli.attempts(run_id)
    assert a2.job and "Training from scratch" in Path(a2.job["log_path"]).read_text()
    assert (Path(checkpoint_dir(a2)) / "global_step_4" / "actor").is_dir()
    assert a1.decision and a1.decision["checkpoint"]["expected_step"] == 0
    first, second = cli.errors(run_id)["attempts"]
    assert (first["category"], first["resume_check"]) == ("gpu_oom", None)
    assert second["resume_check"] == "attempt 2 resumed from 0: 4 steps lost (global_step_4 was saved)"
    assert "resuming from step" not in second["reason_started"]
    kinds = [e.kind for e in cli.store.events(run_id)]
    assert kinds.index("checkpoint_check") < kinds.index("resume_lost")  # said before the relaunch, then confirmed
    assert "4 steps lost" in cli.run("status", run_id).stdout
    assert "resume: attempt 2 resumed from 0: 4 steps lost" in cli.run("errors", run_id).stdout


def test_a_normal_resume_is_confirmed(cli: Cli, host_verl_tree: Path) -> None:
    _host_tree(host_verl_tree, {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": 0.1})
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=6, SAVE_FREQ=2)
    run_id = cli.start("host")["run_id"]
    status = cli.wait_final(run_id)
    assert (status["status"], status["resumed_from_step"]) == ("succeeded", 2), cli.explain(run_id)
    assert status["resume_check"] == "resumed from step 2 as expected"
    assert cli.errors(run_id)["attempts"][1]["resume_check"] == "resumed from step 2 as expected"
    assert "resume_lost" not in [e.kind for e in cli.store.events(run_id)]
