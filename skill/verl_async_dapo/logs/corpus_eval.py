"""Score the classifier on a corpus of real logs (pure: the caller reads the files).

Every corpus file's first line names where the log comes from (``source: <url>``). What a log
*should* be classified as is written in the corpus index (``INDEX.tsv``: one row per file, by a
human reading of the log), not derived from the classifier: file, category (``none`` for a
healthy run), kind (``*``: judged on the category only), nonfatal (``1``: training went on, so the
log must give *no* primary but a non-fatal finding of that category), origin (``v1``: the logs the
first rules were written from). ``rollout_oom`` logs are judged on the category only: which
rollout-memory message it is (and so which fix) is the rollout-OOM ladder's concern.

The corpus is split by *source* (one issue/PR thread, one doc page, one repository file): the
split file names the test sources, chosen at random with a recorded seed before any rule was
written from the new logs (scripts/corpus_split.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from verl_async_dapo.logs.classify import classify

SOURCE_PREFIX = "source: "
HEALTHY = "none"
ANY_KIND = "*"
CATEGORY_ONLY = frozenset({"rollout_oom"})
_THREAD_RE = re.compile(r"https://github\.com/([^/\s]+/[^/\s]+)/(?:issues|pull)/(\d+)")
_BLOB_RE = re.compile(r"https://github\.com/([^/\s]+/[^/\s]+)/blob/[0-9a-f]+/([^#\s]+)")


@dataclass(frozen=True)
class Expected:
    category: str | None  # None: a healthy run
    kind: str | None  # None: judged on the category only
    nonfatal: bool = False


@dataclass(frozen=True)
class Verdict:
    name: str
    expected: Expected
    got_category: str | None
    got_kind: str | None
    right: bool

    @property
    def label(self) -> str:
        """The category the figure is reported under (healthy runs as ``none``)."""
        return self.expected.category or HEALTHY


def expected_from_name(stem: str) -> Expected:
    """The expectation a ``<category>__<kind>__<slug>`` name encodes (the v1 naming; tests use it)."""
    parts = stem.split("__")
    if parts[0] == HEALTHY:
        return Expected(None, None)
    if len(parts) < 3:
        raise ValueError(f"corpus name {stem!r} is not <category>__<kind>__<slug>")
    return Expected(parts[0], parts[1], nonfatal="nonfatal" in parts[2])


def parse_index(text: str) -> dict[str, Expected]:
    """``INDEX.tsv`` as {file name: Expected}; lines starting with ``#`` are comments."""
    index: dict[str, Expected] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) < 4:
            raise ValueError(f"INDEX.tsv line {number}: expected file, category, kind, nonfatal")
        name, category, kind, nonfatal = cells[:4]
        index[name] = Expected(
            None if category == HEALTHY else category,
            None if kind == ANY_KIND else kind,
            nonfatal == "1",
        )
    return index


def origins(text: str) -> dict[str, str]:
    """``INDEX.tsv`` as {file name: origin} (``v1`` / ``v2``)."""
    result: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            cells = line.split("\t")
            result[cells[0]] = cells[4] if len(cells) > 4 else ""
    return result


def source_of(text: str) -> str | None:
    """The source a corpus file names on its first line (None: not a real, sourced log)."""
    first = text.split("\n", 1)[0]
    return first[len(SOURCE_PREFIX) :].strip() if first.startswith(SOURCE_PREFIX) else None


def source_key(source: str) -> str:
    """One source = one issue/PR thread, one repository file (any commit, any lines), or the named run."""
    thread = _THREAD_RE.match(source)
    if thread:
        return f"{thread.group(1)}#{thread.group(2)}"
    blob = _BLOB_RE.match(source)
    if blob:
        return f"{blob.group(1)}:{blob.group(2)}"
    return source


def judge(stem: str, text: str, expected: Expected | None = None) -> Verdict:
    """Classify ``text`` and compare with ``expected`` (default: what the v1 file name encodes)."""
    expected = expected if expected is not None else expected_from_name(stem)
    result = classify(text)
    primary = result.primary
    got = (primary.category.value, primary.kind) if primary is not None else (None, None)
    if expected.category is None:
        right = primary is None
    elif expected.nonfatal:
        right = primary is None and any(
            not f.fatal and f.category.value == expected.category and expected.kind in (None, f.kind)
            for f in result.findings
        )
        if primary is None:
            nonfatal = [f for f in result.findings if not f.fatal]
            got = (nonfatal[0].category.value, nonfatal[0].kind) if nonfatal else got
    elif expected.kind is None or expected.category in CATEGORY_ONLY:
        right = got[0] == expected.category
    else:
        right = got == (expected.category, expected.kind)
    return Verdict(stem, expected, got[0], got[1], right)


def figure(verdicts: Iterable[Verdict]) -> dict[str, tuple[int, int]]:
    """(right, total) per category, plus ``all``; categories sorted, ``all`` last."""
    per: dict[str, list[int]] = {}
    for verdict in verdicts:
        cell = per.setdefault(verdict.label, [0, 0])
        cell[0] += verdict.right
        cell[1] += 1
    result = {label: (cell[0], cell[1]) for label, cell in sorted(per.items())}
    result["all"] = (sum(r for r, _ in result.values()), sum(t for _, t in result.values()))
    return result


def render(table: dict[str, tuple[int, int]]) -> str:
    """The figure as a Markdown table (docs/CLASSIFIER.md and bench/RESULTS.md use it)."""
    rows = ["| category | right / total | share |", "| --- | --- | --- |"]
    for label, (right, total) in table.items():
        name = f"**{label}**" if label == "all" else label
        rows.append(f"| {name} | {right} / {total} | {100 * right / total:.1f} % |")
    return "\n".join(rows)
