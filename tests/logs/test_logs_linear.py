"""Classifying is linear in the log's length and bounded per line (issue 26 item 7).

A complexity check, not a timed assertion: the CPU time for a log four times as long (several MB) must grow
about four times (less than eight: noise on a shared machine; a quadratic step would give sixteen), for logs of many ordinary lines, of a few very long lines,
and of lines built to make a careless regex backtrack (many needles, long runs of the characters the
patterns repeat over).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from verl_async_dapo.logs.classify import classify
from verl_async_dapo.logs.line_context import MAX_LINE_CHARS

CORPUS = Path(__file__).parent / "corpus"
BLOCK = (CORPUS / "none__h200_dapo_fsdp_healthy_6_steps.log").read_text(encoding="utf-8")
# Lines that carry many rules' needles and long runs of what their patterns repeat over.
HOSTILE = (
    "(" + "a" * 3000 + " pid=1) ",
    'File "' + "/x" * 2000 + '", line 1, in ' + "f" * 3000,
    " " * 5000 + "[repeated 3x across cluster]",
    "Free memory on device " + "9" * 5000 + " on startup is less than desired",
    "KeyError: '" + "k" * 5000,
    "Killing worker with the " + "w" * 5000,
    "NCCL error " * 500,
    "Traceback (most recent call last): " * 300,
    "ray::WorkerDict." + "m" * 5000 + "()",
    "EZ9999" * 1000,
    "x" * 4000 + " is not the path to a directory containing",
    "Reward" * 700 + " got an unexpected keyword argument",
    "AttributeError" + ".a" * 2000 + " has no attribute",
    "\x1b]" + "o" * 5000,
)


def _cpu_seconds(make: Callable[[int], str], n: int) -> float:
    text = make(n)
    best = float("inf")
    for _ in range(2):
        start = time.process_time()
        classify(text)
        best = min(best, time.process_time() - start)
    return max(best, 1e-4)


def _ordinary(n: int) -> str:
    return BLOCK * (4 * n)


def _long_lines(n: int) -> str:
    # n megabyte-long lines: a tqdm bar redrawn with \r, and one line without any break.
    redraws = "\r".join(f"Training Progress: {i}%|███▏ | {i}/100 [00:0{i % 10}<00:10]" for i in range(10000))
    return "\n".join([redraws, "x" * 600_000] * n) + "\n"


def _hostile(n: int) -> str:
    return "\n".join(HOSTILE * (12 * n)) + "\n"


@pytest.mark.parametrize("make", [_ordinary, _long_lines, _hostile], ids=["ordinary", "long_lines", "hostile"])
def test_classifying_grows_linearly_with_the_log(make: Callable[[int], str]) -> None:
    small, large = _cpu_seconds(make, 1), _cpu_seconds(make, 4)
    assert len(make(4)) >= 4 * len(make(1)) - 4 and len(make(4)) > 2_000_000
    assert large / small < 8, (make.__name__, small, large)


def test_a_very_long_line_is_read_only_up_to_the_bound() -> None:
    error = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    primary = classify("Traceback (most recent call last):\n" + error + " " + "y" * 10 * MAX_LINE_CHARS + "\n").primary
    assert primary is not None and primary.category.value == "gpu_oom"
    assert len(primary.message) <= 300 and len(primary.excerpt) <= 1200
    # An error past the bound on the same line is not read: the bound is real.
    hidden = classify("y" * 10 * MAX_LINE_CHARS + " " + error + "\n").primary
    assert hidden is None
