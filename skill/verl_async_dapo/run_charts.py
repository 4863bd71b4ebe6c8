"""A run's curves as a PNG, for get_progress(chart=true) and ``verl-async-dapo status --plot FILE``.

The points come from each attempt's own log in the target. ``grep`` runs there, so a multi-GB log sends only
its metrics lines (a few KiB per step); where grep is missing the last CHART_TAIL_BYTES are read instead.
Only numeric metrics reach the chart, so nothing a log may hold (keys, tokens, dataset rows) can be drawn.
"""

from __future__ import annotations

import importlib.util
import sys

import anyio

from verl_async_dapo.charts import AttemptSeries, render_png
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.logs.series import METRICS_LINE_GREP, parse_series
from verl_async_dapo.runs import resolve_run
from verl_async_dapo.store import AttemptRow
from verl_async_dapo.targets.base import Target
from verl_async_dapo.targets.registry import get_target

CHART_TAIL_BYTES = 8 << 20
GREP_TIMEOUT_S = 60.0


# Named with this Python, so the line installs into the venv that runs the server (not the system's pip).
CHARTS_MISSING = (f"cannot draw: charts need matplotlib, an optional extra: `python3 scripts/install.py --with charts` "
                  f"from the checkout, or `{sys.executable} -m pip install matplotlib`")


async def metrics_text(target: Target, log_path: str) -> str:
    """The log's metrics lines (grep in the target), or its last CHART_TAIL_BYTES where grep cannot run."""
    try:
        res = await target.run(["grep", "-a", "-E", METRICS_LINE_GREP, "--", log_path], timeout=GREP_TIMEOUT_S)
        if res.exit_code in (0, 1):  # 1: no metrics line yet
            return res.stdout
    except TargetError:
        pass
    return (await target.read_tail(log_path, CHART_TAIL_BYTES)).decode("utf-8", "replace")


def _label(previous: AttemptRow | None, attempt: AttemptRow) -> str:
    decided = previous.supervisor_decision if previous else None
    changes = decided.changes if decided else []
    return ", ".join(changes) if changes else ", ".join(attempt.override_diff[:2])


async def progress_chart(ctx: AppContext, run_id: str | None) -> tuple[bytes | None, str]:
    """(PNG bytes, a one-line note on what was drawn); (None, why) when there is nothing to draw yet."""
    run = resolve_run(ctx, run_id)
    attempts = ctx.store.attempts(run.id)
    drawn: list[AttemptSeries] = []
    notes: list[str] = []
    for i, attempt in enumerate(attempts):
        if not attempt.job:
            continue
        handle = attempt.handle
        try:
            text = await metrics_text(get_target(handle.target), handle.log_path)
        except TargetError as exc:
            notes.append(f"attempt {attempt.n}: log not readable ({ctx.scrub(str(exc))[:120]})")
            continue
        series = parse_series(text)
        drawn.append(AttemptSeries(attempt.n, series, _label(attempts[i - 1] if i else None, attempt)))
    points = sum(len(a.series.points) for a in drawn)
    if not points:
        return None, "; ".join(["no metrics line in the log yet (verl prints one per step)", *notes])
    if importlib.util.find_spec("matplotlib") is None:  # the optional `charts` extra (README: install size)
        return None, CHARTS_MISSING
    title = f"{run.id} · {run.status} · {len(drawn)} attempt(s)"
    png = await anyio.to_thread.run_sync(lambda: render_png(drawn, title=title))
    # What was not drawn as the log printed it (downsampled, clamped, left out) is said, per attempt.
    notes += [f"attempt {a.n}: {note}" for a in drawn for note in a.series.notes()]
    return png, "; ".join([f"{points} step(s) over {len(drawn)} attempt(s)", *notes])
