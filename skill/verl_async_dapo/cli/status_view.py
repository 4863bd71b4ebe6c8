"""Text rendering of progress and errors for the CLI (a live bar with ``status --follow``)."""

from __future__ import annotations

import sys
from typing import Any

import anyio

from verl_async_dapo.status import RunStatus

BAR_WIDTH = 30
FINAL = frozenset(s.value for s in RunStatus if s.is_terminal())


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def render_bar(progress: dict[str, Any]) -> str:
    step, total = progress.get("step") or 0, progress.get("total_steps") or 0
    filled = int(BAR_WIDTH * step / total) if total else 0
    bar = "█" * filled + " " * (BAR_WIDTH - filled)
    pct = progress.get("percent")
    line = (f"[{progress['status']}] attempt {progress['attempt']} |{bar}| {step}/{total or '?'} "
            f"{'' if pct is None else f'{pct:.1f}% '}ETA {_duration(progress.get('eta_seconds'))}")  # fmt: skip
    phase = progress.get("phase")
    if phase and phase not in ("training", "finishing") and progress.get("status") not in FINAL:
        # Before the first step "0/N ETA ?" says nothing: say what it is doing, and for how long.
        seconds = progress.get("phase_seconds")
        line += f" · {phase}" + (f" for {_duration(seconds)}" if seconds is not None else "")
    return line


def render_status(progress: dict[str, Any]) -> str:
    lines = [f"run {progress['run_id']}", render_bar(progress)]
    if progress.get("stalled"):
        lines.append(f"STALLED: no new step and no log output for {_duration(progress.get('stalled_for_seconds'))}"
                     f" — `verl-async-dapo errors {progress['run_id']}` shows the evidence")  # fmt: skip
    if progress.get("parsing_cut_short"):  # the log's tail took longer than its time budget to read
        lines.append("parsing cut short: the log's tail was too slow to read whole; its last 64 KiB was read")
    if progress.get("features"):
        lines.append("features: " + ", ".join(progress["features"]))
    if progress.get("startup"):  # where the attempt's start-up went (the open phase: so far)
        parts = " · ".join(f"{p['phase']} {_duration(p['seconds'])}" for p in progress["startup"])
        lines.append(f"start-up: {parts} (in all {_duration(progress.get('startup_seconds'))})")
    if progress.get("eta_basis") and progress.get("status") not in FINAL:
        per_step = progress.get("seconds_per_step")
        rate = f"{per_step:g} s/step, " if per_step is not None else ""
        lines.append(f"ETA from {rate}{progress['eta_basis']}")
    if progress.get("feature_cost"):  # the price of the OOM recovery's memory features, in verl's own figures
        lines.append(f"cost: {progress['feature_cost']}")
    if progress.get("lost_steps"):  # crashes cost what was trained since the last checkpoint
        lines.append(f"lost to crashes: {progress['lost_steps']} step(s) trained again (details: errors)")
    if progress.get("resume_check"):  # e.g. "resumed from 0: 4 steps lost": said, never silent
        lines.append(progress["resume_check"])
    elif progress.get("resumed_from_step"):
        lines.append(f"resumed from step {progress['resumed_from_step']}")
    metrics = progress.get("metrics") or {}
    for key in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "timing_s/step"):
        if key in metrics:
            lines.append(f"  {key}: {metrics[key]}")
    if progress.get("swanlab_url"):
        lines.append(f"SwanLab: {progress['swanlab_url']}")
    if progress.get("final_reason"):
        lines.append(f"result: {progress['final_reason']}")
    for tip in progress.get("suggestions") or []:
        lines.append(f"  - {tip}")
    return "\n".join(lines)


def render_errors(report: dict[str, Any]) -> str:
    lines = [f"run {report['run_id']}: {report['status']}"]
    for item in report["attempts"]:
        head = f"attempt {item['attempt']}: {item['status']}"
        if item["exit_code"] is not None:
            head += f" (exit {item['exit_code']})"
        lines.append(head + f"  features: {', '.join(item['features'])}")
        if item["override_diff"]:
            lines.append("  changed: " + "; ".join(item["override_diff"]))
        lines += _sourced(item)
        if item["category"]:
            lines.append(f"  error: {item['category']} — {item['explanation']}")
            lines.append(f"  fix: {item['fix']}")
            if item["excerpt"]:
                lines.extend("    | " + line for line in item["excerpt"].splitlines()[-12:])
        if item.get("resume_check"):
            lines.append(f"  resume: {item['resume_check']}")
        if item.get("lost_steps"):
            lines.append(f"  lost: {item['lost_steps']} step(s) trained past the last checkpoint, trained again")
        if item.get("save_freq_advice"):
            lines.append(f"  tip: {item['save_freq_advice']}")
        if item.get("feature_cost"):
            lines.append(f"  cost: {item['feature_cost']}")
        if item["supervisor_action"]:
            lines.append(f"  supervisor: {item['supervisor_action']}")
    for warning in report.get("warnings") or []:
        lines.append(f"warning (attempt {warning['attempt']}, training goes on): {warning['category']}/"
                     f"{warning['kind']} x{warning['count']} — {warning['explanation']}")  # fmt: skip
        lines.append(f"  fix: {warning['fix']}")
    lines += _stall_lines(report.get("stall"))
    if report.get("final_reason"):
        lines.append(f"result: {report['final_reason']}")
    for tip in report.get("suggestions") or []:
        lines.append(f"  - {tip}")
    return "\n".join(lines)


def _stall_lines(stall: dict[str, Any] | None) -> list[str]:
    if not stall:
        return []
    head = "stalled" if stall.get("stalled") else "stalled earlier"
    lines = [f"{head}: at step {stall.get('step')}, window {_duration(stall.get('window_seconds'))}"
             + (f", silent for {_duration(stall['stalled_for_seconds'])}" if stall.get("stalled_for_seconds") else "")]
    evidence = stall.get("evidence") or {}
    if stall.get("gpu_util"):
        lines.append(f"  GPUs: {stall['gpu_util']}")
    for line in (evidence.get("stopped_processes") or [])[:4]:
        lines.append(f"  stopped (state T: SIGSTOP or a debugger): {line}")
    for line in (evidence.get("processes") or [])[:8]:
        lines.append(f"  proc: {line}")
    if evidence.get("py_spy"):
        lines += ["  py-spy:", *("    " + line for line in str(evidence["py_spy"]).splitlines()[:40])]
    for line in (evidence.get("last_log_lines") or [])[-8:]:
        lines.append(f"    | {line}")
    return lines


def _sourced(item: dict[str, Any]) -> list[str]:
    """The attempt's overrides that are not the recipe's own, by where they came from, and the plan's notes."""
    sources: dict[str, str] = item.get("override_sources") or {}
    by_key = {o.lstrip("+").partition("=")[0]: o for o in item.get("overrides") or []}
    lines = []
    for source, label in (("user", "yours"), ("oom_ladder", "from OOM recovery")):
        chosen = [by_key[k] for k, v in sources.items() if v == source and k in by_key]
        if chosen:
            lines.append(f"  overrides {label}: " + "; ".join(chosen))
    lines += [f"  note: {note}" for note in item.get("plan_notes") or [] if "OOM recovery would set" in note]
    return lines


async def follow_status(ctx: Any, run_id: str | None, interval: float) -> int:
    """Redraw one status line until the run ends; exit 0 only when it succeeded."""
    from verl_async_dapo.runs import get_progress

    tty = sys.stdout.isatty()
    last_line = None
    while True:
        progress = (await get_progress(ctx, run_id)).model_dump()
        run_id = progress["run_id"]
        line = render_bar(progress)
        if tty:
            print("\r" + line.ljust(100), end="", flush=True)
        elif line != last_line:  # a log file gets a line per change, not one every interval
            print(line, flush=True)
        last_line = line
        if progress["status"] in FINAL:
            print("\n" + render_status(progress) if tty else render_status(progress))
            return 0 if progress["status"] == RunStatus.SUCCEEDED else 1
        await anyio.sleep(max(0.2, interval))


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


def render_runs(rows: list[dict[str, Any]]) -> str:
    """`verl-async-dapo runs`: newest first, one line each, under a header."""
    if not rows:
        return "no runs yet: start one with `verl-async-dapo start --container NAME`"
    header = ("RUN", "STATUS", "TARGET", "STARTED (UTC)", "DURATION", "ATTEMPTS")
    body = [(r["run_id"], r["status"], r["target"], (r["started_at"] or "?").replace("T", " ").removesuffix("Z"),
             _duration(r["duration_seconds"]), str(r["attempts"])) for r in rows]  # fmt: skip
    return _table(header, body)


def render_targets(rows: list[dict[str, Any]]) -> str:
    """`verl-async-dapo containers`: the choices `start --container` takes."""
    header = ("NAME", "KIND", "STATE", "IMAGE", "GPUS")
    body = [(r["name"], r["kind"], r["state"], r["image"] or "-", r["gpus"] or "-") for r in rows]
    notes = [f"note: {r['note']}" for r in rows if r.get("note")]
    return "\n".join([_table(header, body), *notes])
