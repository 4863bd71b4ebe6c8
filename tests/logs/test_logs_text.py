"""Pre-processing of raw Ray/verl console output."""

from __future__ import annotations

from verl_async_dapo.logs.text import (
    LogLine,
    clean_line,
    clean_lines,
    clean_log_lines,
    clean_text,
    split_lines,
    split_ray_prefix,
    strip_ansi,
    strip_ray_prefix,
)


def test_strip_ansi_removes_colours_cursor_moves_and_hyperlinks() -> None:
    raw = (
        "\x1b[36m(TaskRunner pid=1)\x1b[0m \x1b[1m\x1b[34mswanlab\x1b[0m: "
        "\x1b]8;id=1;https://swanlab.cn/x\x1b\\https://swanlab.cn/x\x1b]8;;\x1b\\\x1b[2K done\x07"
    )
    assert strip_ansi(raw) == "(TaskRunner pid=1) swanlab: https://swanlab.cn/x done\x07"


def test_strip_ansi_drops_a_stray_escape_left_by_a_cut_chunk() -> None:
    assert strip_ansi("step:1\x1b") == "step:1"
    assert strip_ansi("plain text") == "plain text"


def test_ray_prefixes_are_removed_and_reported_as_the_source() -> None:
    assert split_ray_prefix("(WorkerDict pid=2211) hello") == LogLine("hello", "WorkerDict")
    assert split_ray_prefix("(TaskRunner pid=9, ip=10.0.0.2) step:1") == LogLine("step:1", "TaskRunner")
    assert split_ray_prefix("(raylet) A worker died") == LogLine("A worker died", "raylet")
    assert split_ray_prefix("(raylet, ip=10.0.0.3) msg") == LogLine("msg", "raylet")
    assert split_ray_prefix("(pid=77) msg") == LogLine("msg", "pid")
    assert split_ray_prefix("(autoscaler +1m2s) Tip: use ray status") == LogLine("Tip: use ray status", "autoscaler")


def test_text_that_only_looks_like_a_prefix_is_kept() -> None:
    # Content in parentheses at the start is not a Ray prefix unless it has the pid shape.
    assert strip_ray_prefix("(bloom) room for zoom") == "(bloom) room for zoom"
    assert strip_ray_prefix("x (WorkerDict pid=1) y") == "x (WorkerDict pid=1) y"


def test_clean_line_drops_rays_dedup_marker() -> None:
    raw = "\x1b[36m(WorkerDict pid=5)\x1b[0m Model loaded [repeated 7x across cluster]"
    assert clean_line(raw) == "Model loaded"


def test_lines_split_on_lf_crlf_and_lone_cr() -> None:
    assert split_lines("a\nb\r\nc\rd") == ["a", "b", "c", "d"]


def test_tqdm_redraws_become_lines_that_inherit_the_physical_lines_source() -> None:
    raw = "(TaskRunner pid=3) \rTraining Progress:   1%| | 1/100\rTraining Progress:   2%| | 2/100\nnext"
    lines = clean_log_lines(raw)
    assert lines == [
        LogLine("", "TaskRunner"),
        LogLine("Training Progress:   1%| | 1/100", "TaskRunner"),
        LogLine("Training Progress:   2%| | 2/100", "TaskRunner"),
        LogLine("next", None),
    ]


def test_clean_text_numbering_matches_clean_lines() -> None:
    raw = "\x1b[31m(raylet)\x1b[0m one\r\ntwo\rthree\n(WorkerDict pid=1) four"
    assert clean_lines(raw) == ["one", "two", "three", "four"]
    assert clean_text(raw).split("\n") == clean_lines(raw)
