"""Score the classifier on a corpus of named logs (pure: the caller reads the files).

A corpus file is named ``<category>__<kind>__<slug>.log`` (``none__<slug>.log`` for a healthy
run) and its first line names where the log comes from (``source: <url>``). A log is
classified right when the primary finding has that category and kind; healthy logs must give
no primary. Two refinements:

* a slug containing ``nonfatal`` means "training went on": the log must give *no* primary but
  a non-fatal finding of that category and kind (e.g. the tracker rejecting uploads mid-run);
* ``rollout_oom`` logs are judged on the category only: which rollout-memory kind a message
  is (and so which fix) is the rollout-OOM ladder's concern, scored by its own tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from verl_async_dapo.logs.classify import classify

SOURCE_PREFIX = "source: "
HEALTHY = "none"
CATEGORY_ONLY = frozenset({"rollout_oom"})


@dataclass(frozen=True)
class Expected:
    category: str | None  # None: a healthy run
    kind: str | None
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
    parts = stem.split("__")
    if parts[0] == HEALTHY:
        return Expected(None, None)
    if len(parts) < 3:
        raise ValueError(f"corpus name {stem!r} is not <category>__<kind>__<slug>")
    return Expected(parts[0], parts[1], nonfatal="nonfatal" in parts[2])


def source_of(text: str) -> str | None:
    """The source a corpus file names on its first line (None: not a real, sourced log)."""
    first = text.split("\n", 1)[0]
    return first[len(SOURCE_PREFIX) :].strip() if first.startswith(SOURCE_PREFIX) else None


def judge(stem: str, text: str) -> Verdict:
    expected = expected_from_name(stem)
    result = classify(text)
    primary = result.primary
    got = (primary.category.value, primary.kind) if primary is not None else (None, None)
    if expected.category is None:
        right = primary is None
    elif expected.nonfatal:
        right = primary is None and any(
            not f.fatal and (f.category.value, f.kind) == (expected.category, expected.kind) for f in result.findings
        )
        if primary is None:
            nonfatal = [f for f in result.findings if not f.fatal]
            got = (nonfatal[0].category.value, nonfatal[0].kind) if nonfatal else got
    elif expected.category in CATEGORY_ONLY:
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
