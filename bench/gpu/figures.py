"""The figures of one scenario, from the product's state DB and verl's own log lines (stdlib only).

  python3 figures.py RESULTS_DIR        reads $VERL_ASYNC_DAPO_HOME/state.db and each attempt's log;
                                        writes RESULTS_DIR/figures.json and figures.txt, copies the attempt logs
Per run: status, reason, product overhead (run created -> attempt 1 launched: supervisor start + pre-launch Hydra
validation + launch). Per attempt: features, override diff, exit code, the classified error, the supervisor's
decision, resume line, and per training step what verl printed: timing_s/step and
actor/perf/max_memory_allocated_gb / max_memory_reserved_gb.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"\bstep:(\d+) - (.*)")
KEYS = (
    "timing_s/step",
    "timing_s/gen",
    "timing_s/update_actor",
    "timing_s/save_checkpoint",
    "actor/perf/max_memory_allocated_gb",
    "actor/perf/max_memory_reserved_gb",
    "actor/perf/cpu_memory_used_gb",
    "critic/score/mean",
    "train/num_gen_batches",
)
KV = re.compile(r"([\w/@.\-]+):(?:np\.\w+\()?(-?[\d.]+(?:e-?\d+)?|nan)\)?")
MARKS = re.compile(
    r"Training from scratch|Load from checkpoint folder.*|Resuming from.*|Setting global step to.*|"
    r"(?:torch\.)?OutOfMemoryError: CUDA out of memory\..{0,200}|ray::WorkerDict\.\w+|"
    r"Free memory on device .*|CUDA Error: out of memory at .*"
)


def parse_log(path: str) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    marks: list[str] = []
    with open(path, errors="replace") as fh:
        for raw in fh:
            line = ANSI.sub("", raw)
            m = STEP.search(line)
            if m:
                vals = {k: float(v) for k, v in KV.findall(m.group(2)) if k in KEYS}
                steps.append({"step": int(m.group(1)), **vals})
                continue
            for mark in MARKS.findall(line):
                if mark not in marks[-50:]:
                    marks.append(mark[:300])
    return {"steps": steps, "marks": marks[:40]}


def main(res: Path) -> None:
    home = Path(os.environ["VERL_ASYNC_DAPO_HOME"])
    db = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    out: list[dict[str, Any]] = []
    for run in db.execute("SELECT * FROM runs ORDER BY created_at"):
        attempts = []
        first_launch = None
        for a in db.execute("SELECT * FROM attempts WHERE run_id=? ORDER BY n", (run["id"],)):
            job = json.loads(a["job"]) if a["job"] else {}
            first_launch = first_launch or a["started_at"]
            item: dict[str, Any] = {
                "n": a["n"],
                "status": a["status"],
                "exit_code": a["exit_code"],
                "reason": a["reason"],
                "features": json.loads(a["config"]).get("effective"),
                "override_diff": json.loads(a["override_diff"]),
                "error": json.loads(a["error"]) if a["error"] else None,
                "decision": json.loads(a["decision"]) if a["decision"] else None,
                "started_after_run_created_s": round(a["started_at"] - run["created_at"], 2),
                "duration_s": round(a["ended_at"] - a["started_at"], 1) if a["ended_at"] else None,
            }
            log = job.get("log_path")
            if log and os.path.exists(log):
                item.update(parse_log(log))
                shutil.copy(log, res / f"attempt{a['n']}.log")
            attempts.append(item)
        events = [
            dict(e)
            for e in db.execute("SELECT ts, level, kind, message FROM events WHERE run_id=? ORDER BY id", (run["id"],))
        ]
        for e in events:
            e["t_s"] = round(e.pop("ts") - run["created_at"], 1)
        out.append(
            {
                "run_id": run["id"],
                "status": run["status"],
                "final_reason": run["final_reason"],
                "overhead_run_created_to_launch_s": round(first_launch - run["created_at"], 2)
                if first_launch
                else None,
                "wall_s": round(run["ended_at"] - run["created_at"], 1) if run["ended_at"] else None,
                "attempts": attempts,
                "events": events,
            }
        )
    (res / "figures.json").write_text(json.dumps(out, indent=1, default=str))
    lines = []
    for r in out:
        lines.append(
            f"run {r['run_id']}: {r['status']} ({r['final_reason']}); wall {r['wall_s']} s; "
            f"created->launch {r['overhead_run_created_to_launch_s']} s"
        )
        for a in r["attempts"]:
            err = a["error"] or {}
            lines.append(
                f"  attempt {a['n']}: {a['status']} rc={a['exit_code']} {a['duration_s']} s; "
                f"features {a['features']}; diff {a['override_diff']}; error {err.get('category')} "
                f"{err.get('rule') or err.get('kind') or ''} {err.get('phase') or ''}"
            )
            for s in a.get("steps", []):
                lines.append(
                    "    step {step}: step {t:.1f} s, max_alloc {ma} GiB, max_reserved {mr} GiB".format(
                        step=s["step"],
                        t=s.get("timing_s/step", float("nan")),
                        ma=round(s.get("actor/perf/max_memory_allocated_gb", float("nan")), 2),
                        mr=round(s.get("actor/perf/max_memory_reserved_gb", float("nan")), 2),
                    )
                )
            lines += [f"    | {m}" for m in a.get("marks", [])[:12]]
        lines += [f"  event +{e['t_s']}s {e['level']} {e['kind']}: {e['message'][:200]}" for e in r["events"]]
    (res / "figures.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
