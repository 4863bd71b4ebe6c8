"""Parsing has a time budget and long lines a cap (issue 27 item 4): a crafted log cannot keep the supervisor or a
status call busy. The budget is tested with a clock that the test advances (no wall-clock threshold); the cap and
the SwanLab greeting with the line shape that froze the supervisor."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from verl_async_dapo.cli.status_view import render_status
from verl_async_dapo.logs.greeting import swanlab_greeting
from verl_async_dapo.logs.progress import TAIL_ON_CUT_CHARS, ProgressParser, parse_progress
from verl_async_dapo.logs.text import MAX_LINE_CHARS, clean_lines, strip_repeated_suffix
from verl_async_dapo.records import JobHandle
from verl_async_dapo.runs import progress as run_progress

TR = "(TaskRunner pid=196) "


def _log(steps: int) -> str:
    lines = [f"{TR}Total training steps: {steps}"]
    for step in range(1, steps + 1):
        lines.append(f"{TR}step:{step} - actor/pg_loss:-0.01 - timing_s/step:1.0")
        lines.append(f"{TR}\rTraining Progress: {100 * step // steps}%|█| {step}/{steps} [00:10<00:10,  1.00s/it]")
    return "\n".join(lines) + "\n"


class Ticks:
    """A clock that moves one second per look: the budget runs out after a known number of looks."""

    def __init__(self) -> None:
        self.counter = itertools.count()
        self.looks = 0

    def __call__(self) -> float:
        self.looks += 1
        return float(next(self.counter))


def test_out_of_budget_the_rest_is_skipped_but_its_end_is_read() -> None:
    text = _log(5000)  # ~550 KB: far more than the tail read after a cut
    clock = Ticks()
    snap = parse_progress(text, budget_s=2.5, clock=clock)
    assert snap.parsing_cut_short and snap.to_dict()["parsing_cut_short"] is True
    assert (snap.step, snap.total_steps, snap.percent) == (5000, 5000, 100.0)  # the end: last step line and bar
    assert clock.looks < 10  # it stopped looking: the rest was not parsed line by line
    assert len(text) > 4 * TAIL_ON_CUT_CHARS


def test_within_budget_nothing_is_cut() -> None:
    snap = parse_progress(_log(50), budget_s=1e9, clock=Ticks())
    assert not snap.parsing_cut_short and snap.step == 50
    assert not parse_progress(_log(50)).parsing_cut_short  # no budget: no clock at all


def test_a_cut_stays_reported_while_the_stream_goes_on() -> None:
    parser = ProgressParser(Ticks())
    parser.feed(_log(3000), budget_s=0.5)
    parser.feed(f"{TR}step:3001 - actor/pg_loss:-0.02\n", budget_s=1e9)
    snap = parser.snapshot()
    assert snap.parsing_cut_short and snap.step == 3001


async def test_status_reads_a_tail_within_its_budget_and_says_so(tmp_path: Path, monkeypatch: object) -> None:
    log = tmp_path / "attempt.log"
    log.write_text(_log(4000), encoding="utf-8")
    handle = JobHandle(target="host", job_dir=str(tmp_path), log_path=str(log))
    fresh = await run_progress._progress_from_tail(handle)
    assert fresh is not None and fresh["step"] == 4000 and fresh["parsing_cut_short"] is False
    monkeypatch.setattr(run_progress, "STATUS_PARSE_BUDGET_S", -1.0)  # type: ignore[attr-defined]
    cut = await run_progress._progress_from_tail(handle)
    assert cut is not None and cut["parsing_cut_short"] is True and cut["step"] == 4000
    shown = render_status({"run_id": "run_x", "status": "running", "attempt": 1, "step": 4000, "total_steps": 4000,
                           "percent": 100.0, **{k: cut[k] for k in ("parsing_cut_short",)}})  # fmt: skip
    assert "parsing cut short" in shown


def test_long_lines_are_cut_before_any_pattern_sees_them() -> None:
    crafted = "swanlab:View run  athttp://" * 45_000  # the shape of the 24 KB line that froze the supervisor, 1.2 MB
    lines = clean_lines(crafted + "\nnext line\n")
    assert len(lines[0]) == MAX_LINE_CHARS and lines[1] == "next line"
    snap = parse_progress(crafted + "\n")  # returns at once: the greeting is read from the line's first 32 KiB
    assert snap.swanlab_run_name is None and snap.swanlab_url is None


def test_the_swanlab_greeting_reads_as_before() -> None:
    url = "https://swanlab.cn/@alice/verl-dapo/runs/abc123"
    assert swanlab_greeting(f"swanlab: 🚀 View run dapo-qwen3-8b at {url}") == ("run", "dapo-qwen3-8b", url)
    assert swanlab_greeting("swanlab: 🚀 View run dapo-qwen3-8b at ") == ("run", "dapo-qwen3-8b", None)  # wrapped
    assert swanlab_greeting("swanlab: 🏠 View project at https://swanlab.cn/@alice/verl-dapo") == (
        "project", None, "https://swanlab.cn/@alice/verl-dapo")  # fmt: skip
    assert swanlab_greeting("swanlab: 🏠 View project at") == ("project", None, None)
    assert swanlab_greeting("View run x at https://a.b/c") is None  # no `swanlab:` before it
    assert swanlab_greeting("swanlab: Tracking run with swanlab version 0.7.19") is None
    # The regex it replaces, on random lines of its own pieces: the same answers (the cubic cases included).
    old_run = re.compile(r"swanlab:.*View run (?P<name>.*?) at(?:\s+(?P<url>https?://\S+))?\s*$")
    old_project = re.compile(r"swanlab:.*View project at(?:\s+(?P<url>https?://\S+))?\s*$")
    pieces = ["swanlab:", " ", "\t", "View run ", "View project at", " at", "at", url, "http://", "n", "🚀"]
    for combo in itertools.islice(itertools.product(pieces, repeat=5), 0, None, 7):
        line = "".join(combo)
        run, project = old_run.search(line), old_project.search(line)
        expected = (("run", run.group("name"), run.group("url")) if run else
                    ("project", None, project.group("url")) if project else None)  # fmt: skip
        assert swanlab_greeting(line) == expected, line


def test_the_dedup_marker_is_stripped_as_before() -> None:
    assert strip_repeated_suffix("(raylet) A worker died [repeated 3x across cluster]") == "(raylet) A worker died"
    assert strip_repeated_suffix("x   [repeated 12x across cluster]  ") == "x"
    assert strip_repeated_suffix("x [repeated many x across cluster]") == "x [repeated many x across cluster]"
    assert strip_repeated_suffix("[repeated 3x across cluster] then text") == "[repeated 3x across cluster] then text"
