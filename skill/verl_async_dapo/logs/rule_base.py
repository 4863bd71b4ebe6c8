"""What a classifier rule is, and the small checks rules share (pure data, no I/O).

Kept apart from the rule tables so that several tables (``rules.py``, ``rules_verl.py``) can
be written without importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from verl_async_dapo.categories import ErrorCategory


@dataclass(frozen=True)
class Rule:
    category: ErrorCategory
    kind: str
    needles: tuple[str, ...]
    pattern: re.Pattern[str]
    # Names the error class only (a Ray wrapper header): any fuller finding outranks it.
    weak: bool = False
    # Also printed by healthy runs (Ray's periodic notice counts idle workers that crashed on
    # start-up too): not evidence of a failure unless the log has a fatal marker as well.
    supporting: bool = False
    # Extra check on the match (e.g. a count that must be > 0).
    accept: Callable[[re.Match[str]], bool] | None = None
    # Reported while training goes on and never the reason a run failed (e.g. the tracker
    # rejecting metric uploads mid-run): a finding, never the primary.
    nonfatal: bool = False


def make_rule(
    category: ErrorCategory,
    kind: str,
    needles: str | tuple[str, ...],
    pattern: str,
    *,
    weak: bool = False,
    supporting: bool = False,
    accept: Callable[[re.Match[str]], bool] | None = None,
    nonfatal: bool = False,
) -> Rule:
    if isinstance(needles, str):
        needles = (needles,)
    return Rule(category, kind, needles, re.compile(pattern), weak, supporting, accept, nonfatal)


def first_then(first: str, rest: str) -> str:
    """A linear ``first.*rest``: ``rest`` must follow the *first* occurrence of ``first`` in the line.

    ``A.*B`` searched in a line is quadratic: from every occurrence of A the engine scans to the end for B (a crafted
    line of repeated A's froze the supervisor, issue 27; tests/logs/test_regex_fuzz.py). If B follows any A it follows
    the first one, so trying the first is enough: a lookahead (atomic in Python's ``re``) finds it, ``^`` stops the
    search there. Python 3.10 has no atomic groups, hence the lookahead-and-backreference idiom.
    """
    return rf"^(?=(?P<_first>.*?(?:{first})))(?P=_first)(?:{rest})"


def positive_count(match: re.Match[str]) -> bool:
    return int(match.group("detail")) > 0


def local_looking(match: re.Match[str]) -> bool:
    """A missing local model dir reaches the Hub as a bogus repo id; a real id has one `/`."""
    path = match.group("detail")
    return path.startswith(("/", "./", "../", "~")) or path.count("/") > 1


def not_local_looking(match: re.Match[str]) -> bool:
    return not local_looking(match)
