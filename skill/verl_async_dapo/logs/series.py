"""Per-step metric series from verl's metrics lines, for charts (pure).

Fed whole metrics lines (``grep -E '(^|[] ])step:[0-9]+ - '`` in the target keeps a multi-GB log's transfer
to these lines), it keeps only the keys a chart shows, so a long run's series stay small.

A log can print anything (issue 27, finding 6: a 400-digit value raised OverflowError and broke the chart;
±1e308 broke the axes; 10^6 steps took minutes to draw). So: a value that is not a finite number is left out,
one beyond ±CLAMP is drawn at ±CLAMP, a step number beyond MAX_STEP is left out, and beyond MAX_LINES metrics
lines every k-th is read (the first and the last always). ``Series`` counts each, for the chart's note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from verl_async_dapo.logs.progress import parse_metrics_line
from verl_async_dapo.logs.text import clean_line, split_glued, strip_ansi

# Chart panels: a title and the metric keys it plots, first present wins (verl renamed a few across releases).
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("score / reward mean", ("critic/score/mean", "critic/rewards/mean")),
    ("response length mean", ("response_length/mean",)),
    ("entropy", ("actor/entropy",)),
    ("policy loss", ("actor/pg_loss", "actor/loss")),
    ("step time (s)", ("timing_s/step", "perf/time_per_step")),
    ("peak GPU memory (GiB)", ("actor/perf/max_memory_allocated_gb", "perf/max_memory_allocated_gb")),
)
CHART_KEYS = frozenset(k for _, keys in PANELS for k in keys) | {
    "actor/perf/max_memory_reserved_gb", "perf/max_memory_reserved_gb",
}
CLAMP = 1e12  # no charted metric is near this (step time, lengths, losses, GiB); beyond: junk, drawn at the edge
MAX_STEP = 10**9
MAX_LINES = 4000  # a panel is a few hundred pixels wide: more points draw nothing more, only take time

# Ray forwards each worker line with a `(TaskRunner pid=…)` prefix; the metrics line is `step:N - …` after it.
METRICS_LINE_GREP = r"(^|[] ])step:[0-9]+ - "


@dataclass
class Series:
    """One attempt's points: step → {key: value}, in the order the log printed them (a resume may go back)."""

    points: dict[int, dict[str, float]] = field(default_factory=dict)
    clamped: int = 0  # values drawn at ±CLAMP
    dropped: int = 0  # values (or steps) that were not a finite number in range
    lines_seen: int = 0  # metrics lines in the text
    lines_read: int = 0  # of them parsed (all, unless more than MAX_LINES)
    stride: int = 1  # 1 in ``stride`` parsed

    def notes(self) -> list[str]:
        """What the chart does not show as the log printed it, in words."""
        out = []
        if self.stride > 1:
            out.append(f"{self.lines_seen} metrics lines: 1 in {self.stride} drawn")
        if self.clamped:
            out.append(f"{self.clamped} value(s) beyond ±{CLAMP:.0e} drawn at the edge")
        if self.dropped:
            out.append(f"{self.dropped} value(s) that are not finite numbers (nan, inf, too many digits) left out")
        return out

    def values(self, key: str) -> tuple[list[int], list[float]]:
        steps = sorted(s for s, m in self.points.items() if key in m)
        return steps, [self.points[s][key] for s in steps]

    @property
    def first_step(self) -> int | None:
        return min(self.points) if self.points else None


def _number(value: object, series: Series) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int of hundreds of digits
        series.dropped += 1
        return None
    if not math.isfinite(number):
        series.dropped += 1
        return None
    if abs(number) > CLAMP:
        series.clamped += 1
        return math.copysign(CLAMP, number)
    return number


def parse_series(text: str) -> Series:
    series = Series()
    # A metrics line glued after tqdm's newline-less bar (``…it/s](TaskRunner pid=1) step:7 - …``) is its own.
    lines = [raw for physical in text.splitlines() if "step:" in physical
             for raw in split_glued(strip_ansi(physical)) if "step:" in raw]  # fmt: skip
    series.lines_seen = len(lines)
    if len(lines) > MAX_LINES:  # evenly spread, the last one kept (where the run is now): MAX_LINES at most
        series.stride = -(-(len(lines) - 1) // (MAX_LINES - 1))
        lines = [*lines[:-1 : series.stride], lines[-1]]
    series.lines_read = len(lines)
    for raw in lines:
        parsed = parse_metrics_line(clean_line(raw))
        if parsed is None:
            continue
        step, metrics = parsed
        if not 0 <= step <= MAX_STEP:
            series.dropped += 1
            continue
        kept = {}
        for key, value in metrics.items():
            if key in CHART_KEYS and (number := _number(value, series)) is not None:
                kept[key] = number
        if kept:
            series.points[step] = kept
    return series
