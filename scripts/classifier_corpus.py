#!/usr/bin/env python3
"""Print the classifier's figure on the real-log corpus: right / total per category.

    python3 scripts/classifier_corpus.py [CORPUS_DIR] [--split train|test|all] [--wrong]

Expectations come from the corpus index (INDEX.tsv, by a human reading), the split from
SPLIT.json (by source, seeded; scripts/corpus_split.py). The default is the train split: the
test split is held out (no rule is written from it) and scored once, on purpose (--split test).
--wrong also lists the logs classified wrong.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "skill"))

from verl_async_dapo.logs.corpus_eval import figure, judge, parse_index, render, source_key, source_of


def main(argv: list[str]) -> int:
    show_wrong = "--wrong" in argv
    which = argv[argv.index("--split") + 1] if "--split" in argv else "train"
    args = [a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or argv[i - 1] != "--split")]
    corpus = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "tests" / "logs" / "corpus"
    if not corpus.is_dir() or which not in ("train", "test", "all"):
        print("usage: classifier_corpus.py [CORPUS_DIR] [--split train|test|all] [--wrong]", file=sys.stderr)
        return 2
    index = parse_index((corpus / "INDEX.tsv").read_text(encoding="utf-8"))
    test_sources = set(json.loads((corpus / "SPLIT.json").read_text(encoding="utf-8"))["test_sources"])
    verdicts = []
    for path in sorted(corpus.glob("*.log")):
        text = path.read_text(encoding="utf-8", errors="replace")
        source = source_of(text)
        if source is None or path.name not in index:
            continue
        in_test = source_key(source) in test_sources
        if which == "all" or (which == "test") == in_test:
            verdicts.append(judge(path.stem, text, index[path.name]))
    table = figure(verdicts)
    right, total = table["all"]
    print(f"classifier on the {which} split ({total} real logs): {right} / {total} right ({100 * right / total:.1f} %)")
    print(render(table))
    if show_wrong:
        for verdict in verdicts:
            if not verdict.right:
                want = verdict.expected.category or "none"
                print(f"wrong: {verdict.name} -> {verdict.got_category}/{verdict.got_kind} (want {want})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
