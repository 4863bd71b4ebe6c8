"""``python -m bench``: run the benchmarks against the real Docker Engine and write bench/RESULTS.md.

    .venv/bin/python -m bench                 # everything (~15 min on 2 cores)
    .venv/bin/python -m bench --only 2,3      # some of them (RESULTS.md then holds only those)
    .venv/bin/python -m bench --quick         # small sizes and few repetitions (a smoke run, not for numbers)

Every target is a ratio against a baseline measured in the same run; RESULTS.md says which targets were met.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import common, report

FULL = {"sizes": {"10 MiB": 10 << 20, "100 MiB": 100 << 20, "1 GiB": 1 << 30}, "reps_fast": 30, "reps_slow": 5,
        "oom_samples": 20, "naive": 2, "cold_reps": 25, "idle_s": 60.0, "prelaunch_reps": 5, "before": True,
        "notify_samples": 9, "hang_runs": 3}  # fmt: skip
QUICK = {"sizes": {"10 MiB": 10 << 20}, "reps_fast": 10, "reps_slow": 2, "oom_samples": 2, "naive": 0,
         "cold_reps": 2, "idle_s": 10.0, "prelaunch_reps": 1, "before": False,
         "notify_samples": 3, "hang_runs": 1}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="1,2,3,4,5,6", help="comma-separated benchmark numbers (default: all)")
    parser.add_argument("--quick", action="store_true", help="smallest sizes, few repetitions")
    parser.add_argument("--out", default=str(common.BENCH_DIR / "RESULTS.md"))
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument(
        "--before",
        default=common.BEFORE_REV,
        help=f"revision timed as 'before' in benchmarks 2 and 3 (default {common.BEFORE_REV})",
    )
    args = parser.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    only = {int(x) for x in args.only.split(",") if x.strip()}
    started = time.time()
    results: dict[str, Any] = {"machine": common.machine(), "config": {**cfg, "only": sorted(only)},
                               "command": "bash bench/run.sh" + (" " + " ".join(argv) if argv else ""),
                               "head": common.head_commit(), "before": args.before}  # fmt: skip
    image = common.test_image()
    common.log(f"test image {image}")

    def attempt(key: str, fn: Any) -> None:
        """One benchmark; a failure is reported in RESULTS.md instead of losing the others."""
        try:
            results[key] = fn()
        except Exception as exc:
            common.log(f"benchmark {key} failed: {exc!r}")
            results.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"[:2000]

    if 1 in only or 4 in only:
        from bench import b1_progress, b4_idle

        def idle(state: common.State, container: Any, run_id: str) -> Any:
            return b4_idle.measure(state, container, run_id, cfg["idle_s"]) if 4 in only else None

        sizes = cfg["sizes"] if 1 in only else dict(list(cfg["sizes"].items())[:1])
        attempt("progress", lambda: b1_progress.run(image, sizes, reps_fast=cfg["reps_fast"],
                                                    reps_slow=cfg["reps_slow"], after=idle))  # fmt: skip
        if "progress" in results:
            results["idle"] = results["progress"].after
            if 1 not in only:
                results.pop("progress")
    if 2 in only:
        from bench import b2_oom

        attempt("oom", lambda: b2_oom.measure(image, cfg["oom_samples"], naive=cfg["naive"], profile=True))
        if cfg["before"]:
            with common.revision_tree(args.before) as tree:
                attempt("oom_before", lambda: b2_oom.measure(image, min(cfg["oom_samples"], 6), pythonpath=tree))
    if 3 in only:
        from bench import b3_coldstart

        if cfg["before"]:
            with common.revision_tree(args.before) as tree:
                attempt("cold", lambda: b3_coldstart.run(cfg["cold_reps"], before_pythonpath=tree))
        else:
            attempt("cold", lambda: b3_coldstart.run(cfg["cold_reps"]))
    if 5 in only:
        from bench import b5_prelaunch

        attempt("prelaunch", lambda: b5_prelaunch.run(image, cfg["prelaunch_reps"]))
    if 6 in only:
        from bench import b6_notify

        attempt("notify", lambda: b6_notify.measure(image, cfg["notify_samples"], cfg["hang_runs"]))
    results["elapsed_s"] = time.time() - started
    text = report.render(results)
    Path(args.out).write_text(text, encoding="utf-8")
    common.log(f"wrote {args.out} ({results['elapsed_s']:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(report.raw(results), indent=2, default=str), encoding="utf-8")
    print(text)
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
