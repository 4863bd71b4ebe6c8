"""The run's one relaunch budget (pure): a cap on relaunches shared by every cause — OOM recovery and stall
relaunches count against ``MAX_OOM_RETRIES`` together (policy.decide / stall_decision) — and, optionally, a cap on
the GPU-hours all attempts together may use (``VAD_MAX_GPU_HOURS``), checked before each relaunch. An attempt
abandoned by a killed supervisor never ran and costs nothing; supervisor restarts have their own cap
(runs.MAX_SUPERVISOR_RESTARTS). So no combination of policies can loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from verl_async_dapo.exceptions import BudgetConfigError


def max_gpu_hours(env: Mapping[str, str]) -> float | None:
    text = env.get("VAD_MAX_GPU_HOURS", "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise BudgetConfigError(f"VAD_MAX_GPU_HOURS must be a number of GPU-hours, not {text[:20]!r}") from None
    if value <= 0:
        raise BudgetConfigError("VAD_MAX_GPU_HOURS must be above 0")
    return value


def gpu_hours_used(spans: Iterable[tuple[float, float | None]], gpus: int, now: float) -> float:
    """``spans``: (started_at, ended_at or None while running) of every attempt that ran."""
    return sum(max(0.0, (end if end is not None else now) - start) for start, end in spans) * gpus / 3600.0


def over_gpu_hours(used: float, cap: float | None) -> str | None:
    """The reason to stop relaunching, or None."""
    if cap is None or used < cap:
        return None
    return f"GPU-hour budget reached: {used:.2f} of VAD_MAX_GPU_HOURS={cap:g} used; not relaunching"
