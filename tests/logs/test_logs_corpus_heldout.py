"""The held-out test split: logs from sources no rule was written from (SPLIT.json, seed 20261201).

Scored once, after the rules were written from the train split (2026-12-01): 33 / 34 (97.1 %), the one miss
an HFValidationError that a rich traceback wraps over three lines (docs/CLASSIFIER.md). The figure is pinned
here as a floor so that later rules cannot lose what the held-out logs showed; rules must still not be
written from these logs (a rule written from one would make this split a training set).
"""

from __future__ import annotations

import json
from pathlib import Path

from verl_async_dapo.logs.corpus_eval import figure, judge, parse_index, render, source_key, source_of

CORPUS = Path(__file__).parent / "corpus"
INDEX = parse_index((CORPUS / "INDEX.tsv").read_text(encoding="utf-8"))
HELD_OUT = frozenset(json.loads((CORPUS / "SPLIT.json").read_text(encoding="utf-8"))["test_sources"])
MEASURED = (33, 34)  # right, total when the split was scored once


def test_the_held_out_split_keeps_the_figure_it_was_scored_at() -> None:
    verdicts = []
    for name, expected in INDEX.items():
        text = (CORPUS / name).read_text(encoding="utf-8")
        if source_key(source_of(text) or "") in HELD_OUT:
            verdicts.append(judge(Path(name).stem, text, expected))
    table = figure(verdicts)
    right, total = table["all"]
    wrong = [f"{v.name} -> {v.got_category}/{v.got_kind}" for v in verdicts if not v.right]
    assert total == MEASURED[1]
    assert right >= MEASURED[0], "\n".join([render(table), *wrong])
    assert right / total >= 0.95
