"""Rewrite tests/harness/scope_seconds.json from a suite run's JUnit XML: the wall seconds each xdist scope took.

    python tests/harness/scope_seconds.py /tmp/junit.xml     (from `bash tests/run.sh --junitxml=/tmp/junit.xml`)

The scheduler (tests/harness/fixtures.py) starts the longest scopes first, so that a long file does not start last
and run alone while the other workers idle. Only the order depends on these figures: a stale table costs time,
never a result. Scopes under 5 s are left out (they sort after every listed one, by test count).
"""

from __future__ import annotations

import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures import xdist_scope_of

TABLE = Path(__file__).resolve().parent / "scope_seconds.json"


def main(junit: str) -> None:
    seconds: collections.Counter[str] = collections.Counter()
    for case in ET.parse(junit).iter("testcase"):  # noqa: S314 (our own suite's report)
        path = (case.get("classname") or "").replace(".", "/") + ".py"
        seconds[xdist_scope_of(path)] += float(case.get("time") or 0)
    table = {scope: round(s) for scope, s in seconds.most_common() if s >= 5}
    TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{len(table)} scopes, {sum(table.values())} s, written to {TABLE}")


if __name__ == "__main__":
    main(sys.argv[1])
