"""A run's curves as one PNG: a panel per metric, a line per attempt, each relaunch marked.

matplotlib is imported inside ``render_png`` only: importing it costs ~0.3 s and the server's cold start must
not pay that (tests/charts checks that importing the server leaves matplotlib out). The Agg backend renders
without a display.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from verl_async_dapo.logs.series import PANELS, Series

RESERVED_KEYS = {"actor/perf/max_memory_allocated_gb": "actor/perf/max_memory_reserved_gb",
                 "perf/max_memory_allocated_gb": "perf/max_memory_reserved_gb"}  # fmt: skip


MARKERS_UP_TO = 200


@dataclass(frozen=True)
class AttemptSeries:
    n: int
    series: Series
    label: str = ""  # what changed for this attempt ("+offload", "rollout util 0.6 → 0.5")


def _panel_key(attempts: list[AttemptSeries], keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if any(a.series.values(k)[0] for a in attempts)), None)


def render_png(attempts: list[AttemptSeries], *, title: str, dpi: int = 90) -> bytes:
    """The PNG bytes; panels with no data say so instead of disappearing (the user sees what is missing)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure  # the object API: no pyplot global state in a long-lived server

    fig = Figure(figsize=(12, 7), dpi=dpi, layout="constrained")
    fig.suptitle(title, fontsize=11)
    axes = fig.subplots(2, 3).flatten()
    colors = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
    for ax, (panel, keys) in zip(axes, PANELS, strict=True):
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        key = _panel_key(attempts, keys)
        if key is None:
            ax.text(0.5, 0.5, "not in the log yet", ha="center", va="center", transform=ax.transAxes, color="gray")
            continue
        for i, attempt in enumerate(attempts):
            steps, values = attempt.series.values(key)
            if not steps:
                continue
            color = colors[i % len(colors)]
            marker = "o" if len(steps) <= MARKERS_UP_TO else None  # thousands of dots are a smear and slow
            ax.plot(steps, values, marker=marker, markersize=3, linewidth=1.2, color=color, label=f"attempt {attempt.n}")
            reserved = RESERVED_KEYS.get(key)
            if reserved:
                r_steps, r_values = attempt.series.values(reserved)
                if r_steps:
                    ax.plot(r_steps, r_values, linestyle=":", linewidth=1, color=color, label=f"reserved {attempt.n}")
        for attempt in attempts[1:]:  # relaunches: where the next attempt's curve begins
            first = attempt.series.first_step
            if first is None:
                continue
            ax.axvline(first, color="gray", linestyle="--", linewidth=0.8)
            ax.annotate(f"relaunch {attempt.n}" + (f"\n{attempt.label}" if attempt.label else ""), (first, 1.0),
                        xycoords=("data", "axes fraction"), fontsize=6, color="dimgray", va="top", ha="left")  # fmt: skip
        ax.legend(fontsize=6, loc="best")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
