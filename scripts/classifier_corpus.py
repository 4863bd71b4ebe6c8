#!/usr/bin/env python3
"""Print the classifier's figure on the real-log corpus: right / total per category.

    python3 scripts/classifier_corpus.py [tests/logs/corpus] [--wrong]

Only files whose first line names a source (real logs) count; the suite's synthetic fixtures
in the same directory are skipped. --wrong also lists the logs classified wrong.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "skill"))

from verl_async_dapo.logs.corpus_eval import figure, judge, render, source_of


def main(argv: list[str]) -> int:
    show_wrong = "--wrong" in argv
    args = [a for a in argv if a != "--wrong"]
    corpus = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "tests" / "logs" / "corpus"
    if not corpus.is_dir():
        print(f"error: {corpus} is not a directory of corpus logs", file=sys.stderr)
        return 2
    verdicts = []
    for path in sorted(corpus.glob("*.log")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if source_of(text) is not None:
            verdicts.append(judge(path.stem, text))
    table = figure(verdicts)
    right, total = table["all"]
    print(f"classifier on {total} real logs in {corpus}: {right} / {total} right ({100 * right / total:.1f} %)")
    print(render(table))
    if show_wrong:
        for verdict in verdicts:
            if not verdict.right:
                print(f"wrong: {verdict.name} -> {verdict.got_category}/{verdict.got_kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
