"""What the log says about progress so far: the snapshot the parser hands out (pure data)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MetricValue = float | int | bool


@dataclass(frozen=True)
class ProgressSnapshot:
    """What the log says about progress so far. Every field is None until the log says it."""

    step: int | None = None
    total_steps: int | None = None
    percent: float | None = None
    eta_seconds: float | None = None
    seconds_per_step: float | None = None
    # The latest `step:N - k:v …` line (N is metrics_step, not repeated in here).
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    metrics_step: int | None = None
    swanlab_url: str | None = None
    swanlab_project_url: str | None = None
    swanlab_run_name: str | None = None
    resumed_from_step: int | None = None
    training_from_scratch: bool = False
    phase: str | None = None
    # Unix time the phase began (None: its marker came in text fed without a time).
    phase_since: float | None = None
    eta_basis: str | None = None
    # The trainer said it would not write the checkpoint tracker (verl #7952: async_save under FSDP).
    tracker_skipped: bool = False
    # The time budget ran out: part of the text was skipped (its end was read).
    parsing_cut_short: bool = False
    # The start-up phases in order, each with the Unix time it began, and when the first step's line came (None:
    # still starting). ``startup_breakdown`` turns them into seconds.
    startup_marks: tuple[tuple[str, float], ...] = ()
    training_since: float | None = None
    # What the latest checkpoint cost (verl's timing_s/save_checkpoint, on the steps that save).
    save_checkpoint_seconds: float | None = None
    # The median timing_s/step of this attempt's steps after its first (its warm-up), and how many there were.
    steady_seconds_per_step: float | None = None
    steady_steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: a non-finite metric (a diverged loss) becomes "nan" / "inf" / "-inf"."""
        return {
            "step": self.step,
            "total_steps": self.total_steps,
            "percent": self.percent,
            "eta_seconds": self.eta_seconds,
            "seconds_per_step": self.seconds_per_step,
            "metrics": {key: _json_number(value) for key, value in self.metrics.items()},
            "metrics_step": self.metrics_step,
            "swanlab_url": self.swanlab_url,
            "swanlab_project_url": self.swanlab_project_url,
            "swanlab_run_name": self.swanlab_run_name,
            "resumed_from_step": self.resumed_from_step,
            "training_from_scratch": self.training_from_scratch,
            "phase": self.phase,
            "phase_since": self.phase_since,
            "eta_basis": self.eta_basis,
            "tracker_skipped": self.tracker_skipped,
            "parsing_cut_short": self.parsing_cut_short,
            "startup_marks": [list(mark) for mark in self.startup_marks],
            "training_since": self.training_since,
            "save_checkpoint_seconds": self.save_checkpoint_seconds,
            "steady_seconds_per_step": self.steady_seconds_per_step,
            "steady_steps": self.steady_steps,
        }


def startup_breakdown(marks: list[list[Any]] | tuple[tuple[str, float], ...], training_since: float | None,
                      now: float) -> list[tuple[str, float]]:  # fmt: skip
    """Seconds spent in each start-up phase, in order: each until the next began, the last until training began
    (or until ``now`` while it lasts). A phase entered twice (a validation before and after the warm-up) is one
    entry per visit, as it happened."""
    out: list[tuple[str, float]] = []
    for i, (phase, since) in enumerate(marks):
        end = marks[i + 1][1] if i + 1 < len(marks) else (training_since if training_since is not None else now)
        out.append((str(phase), round(max(0.0, float(end) - float(since)), 1)))
    return out


def _json_number(value: MetricValue) -> MetricValue | str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
