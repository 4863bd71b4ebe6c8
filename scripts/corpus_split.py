#!/usr/bin/env python3
"""Split the real-log corpus by source into train and test (run once; the output is committed).

    python3 scripts/corpus_split.py [--seed N] [--check]

A source is one issue/PR thread, one repository file or the named H200 run (corpus_eval.source_key).
Sources of the v1 logs (origin ``v1`` in INDEX.tsv: the rules were written from them) are train.
Of the other sources, a third (rounded) chosen at random with the seed go to the test split,
from which no rule is written. Writes tests/logs/corpus/SPLIT.json; --check only verifies that
the committed file is what the seed gives.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "skill"))

from verl_async_dapo.logs.corpus_eval import origins, source_key, source_of  # noqa: E402 (after the path insert)

CORPUS = ROOT / "tests" / "logs" / "corpus"
SEED = 20261201


def split(seed: int) -> dict[str, object]:
    origin = origins((CORPUS / "INDEX.tsv").read_text(encoding="utf-8"))
    keys: dict[str, set[str]] = {}
    for path in sorted(CORPUS.glob("*.log")):
        source = source_of(path.read_text(encoding="utf-8"))
        if source is None:
            continue
        keys.setdefault(source_key(source), set()).add(origin.get(path.name, ""))
    v1 = sorted(key for key, kinds in keys.items() if "v1" in kinds)
    fresh = sorted(key for key in keys if key not in v1)
    rng = random.Random(seed)
    shuffled = fresh[:]
    rng.shuffle(shuffled)
    test = sorted(shuffled[: round(len(fresh) / 3)])
    train = sorted(set(keys) - set(test))
    return {
        "seed": seed,
        "rule": "sources of v1 logs are train; a third of the other sources (random.Random(seed).shuffle) are test",
        "test_sources": test,
        "train_sources": train,
    }


def main(argv: list[str]) -> int:
    seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else SEED
    result = split(seed)
    target = CORPUS / "SPLIT.json"
    text = json.dumps(result, indent=1, ensure_ascii=False) + "\n"
    if "--check" in argv:
        same = target.read_text(encoding="utf-8") == text
        print("SPLIT.json matches the seed" if same else "SPLIT.json differs from what the seed gives")
        return 0 if same else 1
    target.write_text(text, encoding="utf-8")
    print(f"seed {seed}: {len(result['test_sources'])} test sources, {len(result['train_sources'])} train sources")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
