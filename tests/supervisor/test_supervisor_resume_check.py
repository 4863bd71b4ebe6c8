"""Resume is verified, not assumed (issue #14, item 6): before a relaunch the supervisor checks that the tracker
(latest_checkpointed_iteration.txt) names a complete global_step_N; after it, that verl's log says it resumed at
N. When verl starts from scratch although steps were saved (verl #7952: async_save under FSDP never writes the
tracker; the stand-in's ``skip_tracker`` prints verl's own "skip write latest_checkpointed_iteration.txt" line),
get_progress and check_errors say "resumed from 0: N steps lost", never silently. The pure checks are here; the
runs (a normal resume, and one from scratch with the CLI's words) are in tests/decisions/test_resume_check.py."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from sv_helpers import TRACKER

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
