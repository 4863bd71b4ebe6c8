"""What a memory feature costs (issue 31 item 4), in verl's own figures (pure).

An attempt's pace is read from its progress snapshot: the median ``timing_s/step`` of its steps after its first
(the first carries the warm-up), and the latest ``perf/throughput`` (tokens/s per GPU) and
``actor/perf/max_memory_allocated_gb`` (``perf/…`` before verl 0.9). The price of the features a relaunch added is the pace after against the pace
before: on the H200, offload made ``update_actor`` about 3x slower and nobody was told (docs/GPU.md §2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# The relaunched attempt's pace is trusted from this many steady steps on (fewer: one slow step says too much).
MIN_STEADY_STEPS = 2
# The actor's peak GPU memory: verl 0.9.1 names it under actor/ (tests/logs/real), older releases did not.
MEMORY_KEYS = ("actor/perf/max_memory_allocated_gb", "perf/max_memory_allocated_gb")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def pace_of(progress: Mapping[str, Any] | None) -> dict[str, float | int | None] | None:
    """An attempt's pace from its stored progress snapshot; None before any steady step."""
    progress = progress or {}
    seconds = _number(progress.get("steady_seconds_per_step"))
    if seconds is None:
        return None
    metrics = progress.get("metrics") or {}
    memory = next((m for key in MEMORY_KEYS if (m := _number(metrics.get(key))) is not None), None)
    return {"seconds_per_step": seconds, "steps": int(progress.get("steady_steps") or 0),
            "throughput": _number(metrics.get("perf/throughput")), "max_memory_gb": memory}  # fmt: skip


def feature_cost(added: Sequence[str], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """``+offload: 1.7 → 5.1 s a step (3.0x slower), tokens/s 4,100 → 1,400, peak GPU memory 61.9 → 38.4 GiB``;
    None without added features or until both attempts have a steady pace (after: MIN_STEADY_STEPS steps)."""
    if not added or not before or not after or int(after.get("steps") or 0) < MIN_STEADY_STEPS:
        return None
    slow_before, slow_after = before.get("seconds_per_step"), after.get("seconds_per_step")
    if not slow_before or not slow_after:
        return None
    ratio = slow_after / slow_before
    how = f"{ratio:.1f}x slower" if ratio >= 1.05 else ("as fast" if ratio > 0.95 else f"{1 / ratio:.1f}x faster")
    parts = [f"{'+' + ', +'.join(added)}: {_seconds(slow_before)} → {_seconds(slow_after)} a step ({how})"]
    if before.get("throughput") and after.get("throughput"):
        parts.append(f"tokens/s {before['throughput']:,.0f} → {after['throughput']:,.0f}")
    if before.get("max_memory_gb") and after.get("max_memory_gb"):
        parts.append(f"peak GPU memory {before['max_memory_gb']:.1f} → {after['max_memory_gb']:.1f} GiB")
    return ", ".join(parts)


def relaunch_cost(before_appended: Sequence[str], appended: Sequence[str], before_pace: Mapping[str, Any] | None,
                  pace: Mapping[str, Any] | None) -> str | None:  # fmt: skip
    """``feature_cost`` of what an attempt appended (``appended``) beyond the attempt before (``before_appended``)."""
    return feature_cost([f for f in appended if f not in before_appended], before_pace, pace)


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"
