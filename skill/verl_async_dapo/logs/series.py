"""Per-step metric series from verl's metrics lines, for charts (pure).

Fed whole metrics lines (``grep -E '(^|[] ])step:[0-9]+ - '`` in the target keeps a multi-GB log's transfer
to these lines), it keeps only the keys a chart shows, so a long run's series stay small.
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
# Ray forwards each worker line with a `(TaskRunner pid=…)` prefix; the metrics line is `step:N - …` after it.
METRICS_LINE_GREP = r"(^|[] ])step:[0-9]+ - "


@dataclass
class Series:
    """One attempt's points: step → {key: value}, in the order the log printed them (a resume may go back)."""

    points: dict[int, dict[str, float]] = field(default_factory=dict)

    def values(self, key: str) -> tuple[list[int], list[float]]:
        steps = sorted(s for s, m in self.points.items() if key in m)
        return steps, [self.points[s][key] for s in steps]

    @property
    def first_step(self) -> int | None:
        return min(self.points) if self.points else None


def parse_series(text: str) -> Series:
    series = Series()
    for physical in text.splitlines():
        if "step:" not in physical:
            continue
        # A metrics line glued after tqdm's newline-less bar (``…it/s](TaskRunner pid=1) step:7 - …``) is its own.
        for raw in split_glued(strip_ansi(physical)):
            _take(series, raw)
    return series


def _take(series: Series, raw: str) -> None:
    if "step:" in raw:
        parsed = parse_metrics_line(clean_line(raw))
        if parsed is None:
            return
        step, metrics = parsed
        kept = {k: float(v) for k, v in metrics.items() if k in CHART_KEYS and not isinstance(v, bool)
                and math.isfinite(float(v))}  # fmt: skip
        if kept:
            series.points[step] = kept
