"""Text rendering of progress and errors for the CLI (a live bar with ``status --follow``)."""

from __future__ import annotations

import sys
from typing import Any

import anyio

BAR_WIDTH = 30
FINAL = frozenset({"succeeded", "failed", "stopped"})


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
    return (f"[{progress['status']}] attempt {progress['attempt']} |{bar}| {step}/{total or '?'} "
            f"{'' if pct is None else f'{pct:.1f}% '}ETA {_duration(progress.get('eta_seconds'))}")  # fmt: skip


def render_status(progress: dict[str, Any]) -> str:
    lines = [f"run {progress['run_id']}", render_bar(progress)]
    if progress.get("features"):
        lines.append("features: " + ", ".join(progress["features"]))
    if progress.get("resumed_from_step"):
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
        if item["supervisor_action"]:
            lines.append(f"  supervisor: {item['supervisor_action']}")
    if report.get("final_reason"):
        lines.append(f"result: {report['final_reason']}")
    for tip in report.get("suggestions") or []:
        lines.append(f"  - {tip}")
    return "\n".join(lines)


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
        progress = await get_progress(ctx, run_id)
        run_id = progress["run_id"]
        line = render_bar(progress)
        if tty:
            print("\r" + line.ljust(100), end="", flush=True)
        elif line != last_line:  # a log file gets a line per change, not one every interval
            print(line, flush=True)
        last_line = line
        if progress["status"] in FINAL:
            print("\n" + render_status(progress) if tty else render_status(progress))
            return 0 if progress["status"] == "succeeded" else 1
        await anyio.sleep(max(0.2, interval))
