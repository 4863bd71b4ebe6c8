"""No log regex can freeze supervision (issue 27 item 4: one crafted 24 KB line kept the supervisor busy 452 s in the
SwanLab-link regex). Every compiled pattern in ``verl_async_dapo.logs`` — found by introspecting its modules, so a
pattern added later is covered without touching this file — and the SwanLab greeting parser get adversarial lines
of 10 KB to 1 MB (``PATTERN_LENGTHS``): each pattern's literal parts repeated (what makes ``.*X`` or ``[^…]*`` rescan the rest of the line
from every occurrence), long runs of spaces, digits and ``a``, no terminator. A line fails when matching it costs more
than ``BUDGET_FACTOR`` times a baseline measured in the same run, in the same child, right before, on a line of the same length: robust on a busy
machine, where an absolute wall-clock limit is not. Each pattern runs in a child process that is killed once it
overruns, so a catastrophic pattern fails the test instead of hanging it.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pkgutil
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import pytest

import verl_async_dapo.logs as logs_package
from verl_async_dapo.logs import progress

try:  # Python 3.11+: the parser behind re.compile
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]

LENGTHS = (10_000, 100_000, 1_000_000)
# Each pattern on its own gets 10 KB and 100 KB: the product never feeds a pattern more than a line cut to
# 2 x MAX_LINE_CHARS (logs/text.py, logs/progress.py), and a quadratic pattern already costs 500x on 10 KB. The entry
# points, which take raw lines and cut them, also get 1 MB; with RUN_SLOW=1 every pattern does (5x the time).
PATTERN_LENGTHS = LENGTHS if os.environ.get("RUN_SLOW", "") == "1" else LENGTHS[:2]
# Matching one line may cost this many times the baseline (a trivial pattern that touches every character of a line
# of the same length). Measured here: a linear pattern costs 1-10x, the classifier's one-pass needle filter (an
# alternation of ~120 literals, tried at every position) ~60x on a line of `a`; a quadratic one costs 500x on 10 KB
# of repeated prefixes and 5000x on 100 KB, a cubic one never finishes. 200x keeps the needle filter in and them out.
BUDGET_FACTOR = 200
# The parsers that use the patterns, per line: they run dozens of (pre-filtered) patterns, and cut long lines first.
ENTRY_BUDGET_FACTOR = 1000
MIN_BUDGET_S = 0.05  # below this a timing is noise (a scheduler tick on a loaded machine)
REPEATS = 3  # the fastest of three: one descheduling does not fail a linear pattern


def _patterns_in(value: Any, depth: int = 0, seen: set[int] | None = None) -> Iterator[re.Pattern[str]]:
    """Every compiled pattern held by a module-level value: itself, inside containers, or a rule's field."""
    seen = set() if seen is None else seen
    if id(value) in seen or depth > 4:
        return
    seen.add(id(value))
    if isinstance(value, re.Pattern):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _patterns_in(item, depth + 1, seen)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _patterns_in(item, depth + 1, seen)
    elif is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            yield from _patterns_in(getattr(value, f.name), depth + 1, seen)


def all_patterns() -> dict[str, re.Pattern[str]]:
    """``module.NAME[i]`` → pattern, for every module of the logs package."""
    found: dict[str, re.Pattern[str]] = {}
    ids: set[int] = set()
    for info in pkgutil.walk_packages(logs_package.__path__, logs_package.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if getattr(value, "__module__", module.__name__) != module.__name__ and not isinstance(
                value, re.Pattern | list | tuple | dict | frozenset
            ):
                continue
            for index, pattern in enumerate(_patterns_in(value)):
                if id(pattern) not in ids:
                    ids.add(id(pattern))
                    found[f"{info.name.rsplit('.', 1)[-1]}.{name}[{index}]"] = pattern
    return found


def literal_parts(pattern: re.Pattern[str]) -> list[str]:
    """The runs of literal characters in a pattern, in order ("swanlab:", "View run ", " at", "http", "://")."""
    parts: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            parts.append("".join(current))
            current.clear()

    def walk(tree: Any) -> None:
        for op, arg in tree:
            name = str(op)
            if name == "LITERAL":
                current.append(chr(arg))
                continue
            flush()
            if name in ("SUBPATTERN",):
                walk(arg[-1])
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                walk(arg[2])
            elif name == "BRANCH":
                for branch in arg[1]:
                    walk(branch)
                    flush()
            elif name in ("ASSERT", "ASSERT_NOT"):
                walk(arg[1])
            elif name == "ATOMIC_GROUP":
                walk(arg)
        flush()

    walk(sre_parse.parse(pattern.pattern, pattern.flags))
    return [p for p in parts if p.strip()] or ["a"]


def adversarial_lines(parts: list[str], length: int) -> Iterator[tuple[str, str]]:
    """(label, line) of ``length`` characters, none with a line break."""

    def fill(unit: str) -> str:
        return (unit * (length // max(len(unit), 1) + 1))[:length]

    skeleton = "".join(parts)
    longest = sorted(parts, key=len, reverse=True)[:3]
    yield "skeleton repeated", fill(skeleton)
    yield "skeleton-with-spaces repeated", fill(" ".join(parts) + " ")
    for k in range(1, min(len(parts), 4)):  # the first k parts, the rest missing: the engine rescans for it
        yield f"first {k} parts repeated", fill("".join(parts[:k]))
        yield f"first {k} parts with spaces repeated", fill(" ".join(parts[:k]) + " ")
    yield "first part then a", parts[0] + "a" * (length - len(parts[0]))
    for part in longest:
        yield f"{part[:20]!r} repeated", fill(part)
    if length < LENGTHS[-1]:  # the plain runs are the same for every pattern: once at 1 MB is the baseline's
        yield "spaces", " " * length
        yield "digits", "1" * length
        yield "a", "a" * length
        yield "prefix then spaces", skeleton + " " * (length - len(skeleton))


_BASELINE = re.compile(r"[a-z0-9 ]\x00")  # touches every character once, matches nothing


def _fastest(run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def baseline_seconds(length: int) -> float:
    line = "a" * length
    return _fastest(lambda: _BASELINE.search(line))


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[str], object]
    parts: list[str]
    factor: float
    lengths: tuple[int, ...] = PATTERN_LENGTHS


def _child(case: Case, lines: list[tuple[int, str, str]], conn: Any) -> None:
    for length, label, line in lines:
        # The baseline again, in this process, right before: a load that comes and goes slows both alike.
        base = baseline_seconds(length)
        conn.send((length, label, _fastest(lambda line=line: case.run(line)), base))
    conn.send(None)


def check(case: Case, budgets: dict[int, float]) -> list[str]:
    """Time every adversarial line for one case in a child process; the overruns, as messages."""
    lines = [(n, label, line) for n in case.lengths for label, line in adversarial_lines(case.parts, n)]
    parent, child = multiprocessing.Pipe(duplex=False)
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(case, lines, child), daemon=True)
    proc.start()
    child.close()
    failures: list[str] = []
    try:
        for length, label, _ in lines:
            # REPEATS runs, each allowed its budget, plus the time a loaded machine takes to schedule the child.
            limit = REPEATS * budgets[length] * case.factor + 5.0
            if not parent.poll(limit):
                failures.append(f"{case.name}: {label} ({length} chars) still matching after {limit:.1f} s")
                break
            got = parent.recv()
            assert got is not None and got[0] == length
            took, base = got[2], min(got[3], budgets[length] * 10)  # a baseline slowed 10x is the noise, not the rule
            allowed = max(base * case.factor, MIN_BUDGET_S)
            if took > allowed:
                failures.append(f"{case.name}: {label} ({length} chars) took {took:.3f} s > {allowed:.3f} s "
                                f"({case.factor:g} x baseline {base:.5f} s)")  # fmt: skip
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    return failures


def _search(pattern: re.Pattern[str]) -> Callable[[str], object]:
    return lambda line: pattern.search(line)


def _cases() -> list[Case]:
    cases = [Case(name, _search(p), literal_parts(p), BUDGET_FACTOR) for name, p in sorted(all_patterns().items())]
    # The SwanLab greeting (its link was the cubic regex) and the parsers that read each line.
    greeting = ["swanlab:", " 🚀 View run ", " at", " https://swanlab.cn/@u/p/runs/r", "View project"]
    cases.append(Case("progress.swanlab_greeting", progress.swanlab_greeting, greeting, BUDGET_FACTOR, LENGTHS))
    from verl_async_dapo.logs.classify import classify

    every_literal = sorted({part for case in cases for part in case.parts}, key=len, reverse=True)[:12]
    cases.append(Case("parse_progress(line)", progress.parse_progress, every_literal, ENTRY_BUDGET_FACTOR, LENGTHS))
    cases.append(Case("classify(line)", classify, every_literal, ENTRY_BUDGET_FACTOR, LENGTHS))
    return cases


CASES = _cases()


def test_the_introspection_finds_the_patterns_it_must_cover() -> None:
    from verl_async_dapo.logs import phases, rules, rules_verl, text

    found = {id(p) for p in all_patterns().values()}
    # A few known ones (if these are missed, the walk is broken): progress, text, phases, every classifier rule.
    known = [progress._TQDM_RE, text._ANSI_RE, text._RAY_PREFIX_RE, text._GLUED_PREFIX_RE, phases._ANY_MARKER_RE,
             *(rule.pattern for rule in rules.RULES), *(p for p in vars(rules_verl).values() if isinstance(p, re.Pattern))]
    assert all(id(p) in found for p in known), [p.pattern[:60] for p in known if id(p) not in found]
    assert len(found) >= 40
    assert literal_parts(re.compile(r"swanlab:.*View run (?P<n>.*?) at")) == ["swanlab:", "View run ", " at"]


@pytest.fixture(scope="module")
def budgets() -> dict[int, float]:
    return {n: baseline_seconds(n) for n in LENGTHS}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_no_pattern_is_superlinear_on_long_adversarial_lines(case: Case, budgets: dict[int, float]) -> None:
    failures = check(case, budgets)
    assert not failures, "\n".join(failures)


def test_the_check_catches_a_cubic_pattern(budgets: dict[int, float]) -> None:
    # The SwanLab-link regex as it was before issue 27: the check must fail it (or this test checks nothing).
    cubic = re.compile(r"swanlab:.*View run (?P<name>.*?) at(?:\s+(?P<url>https?://\S+))?\s*$")
    case = Case("old swanlab link", _search(cubic), literal_parts(cubic), BUDGET_FACTOR)
    assert check(case, budgets), "the cubic SwanLab regex passed the fuzz check"


if os.environ.get("VAD_FUZZ_LIST"):  # pragma: no cover - a maintainer's aid: VAD_FUZZ_LIST=1 pytest -s …
    print("\n".join(sorted(all_patterns())))
