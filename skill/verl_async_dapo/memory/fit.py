"""Will the plan fit on these GPUs as they are now? The decision and its fix (pure).

Two checks per GPU the run will use (Ray hands out GPU ids from the lowest, so the first N):

1. **vLLM starts** (certain, from measured numbers): vLLM refuses to start when the free memory it sees is less
   than ``gpu_memory_utilization x total`` ("Free memory on device cuda:0 (75.62/139.8 GiB) on startup is less
   than desired GPU memory utilization (0.6, 83.88 GiB)", the real H200 log). What it sees is what is free now
   minus what the trainer already holds when vLLM starts (colocated) minus CUDA contexts. The fix is the largest
   share, in steps of 0.05, that fits, when that share still holds the model's weights; otherwise the processes
   holding the GPU have to go.
2. **The peak fits** (an estimate, so a warning): the estimated peak per GPU against what other processes leave.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from verl_async_dapo.memory.estimate import CUDA_CONTEXT_GIB, GIB, MemoryEstimate
from verl_async_dapo.memory.gpus import MIB, ComputeApp, GpuMemory

UTIL_STEP = 0.05
START_MARGIN_GIB = 0.5  # allocator slack between our measurement and vLLM's
MIN_UTIL = 0.1
KV_MIN_GIB = 2.0  # below weights + this, a vLLM share is useless even if it starts
BUSY_FRACTION = 0.10  # memory already used on a GPU before we start: someone else is there


@dataclass(frozen=True)
class GpuFit:
    index: int
    total_gib: float  # CUDA's total (used + free)
    free_gib: float
    rollout_asks_gib: float | None  # util x total (None: no vLLM on this GPU)
    vllm_sees_gib: float | None  # free at vLLM's start, after the trainer and the contexts
    starts: bool
    peak_fits: bool | None  # None without an estimate
    max_util: float  # the largest share (step 0.05) that would start on this GPU
    processes: tuple[str, ...] = ()  # "pid 544 python3 64.5 GiB"


@dataclass(frozen=True)
class FitReport:
    gpus: tuple[GpuFit, ...]
    rollout_util: float
    suggested_util: float | None  # None: lowering the share cannot make it start
    min_util: float  # the least useful share (weights + KV_MIN_GIB)
    estimate: MemoryEstimate | None = None

    @property
    def starts(self) -> bool:
        return all(g.starts for g in self.gpus)

    @property
    def peak_fits(self) -> bool:
        return all(g.peak_fits is not False for g in self.gpus)

    @property
    def holders(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for g in self.gpus for p in g.processes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "starts": self.starts, "peak_fits": self.peak_fits, "rollout_util": self.rollout_util,
            "suggested_util": self.suggested_util, "min_util": round(self.min_util, 3),
            "gpus": [{**g.__dict__, "processes": list(g.processes)} for g in self.gpus],
            "holders": list(self.holders),
            "estimate": self.estimate.to_dict() if self.estimate else None,
        }  # fmt: skip


def _gib(mib: int | float) -> float:
    return mib * MIB / GIB


def _floor_util(value: float) -> float:
    return round(math.floor(round(value / UTIL_STEP, 6)) * UTIL_STEP, 2)


def describe_apps(apps: list[ComputeApp], uuid: str) -> tuple[str, ...]:
    return tuple(f"pid {a.pid} {a.process_name or '?'} " + (f"{_gib(a.used_mib):.1f} GiB" if a.used_mib else "?")
                 for a in apps if a.gpu_uuid == uuid)  # fmt: skip


def check_fit(
    gpus: list[GpuMemory],
    apps: list[ComputeApp],
    *,
    need_gpus: int,
    rollout_util: float,
    colocated: bool,
    rollout_gpus: int = 0,
    estimate: MemoryEstimate | None = None,
) -> FitReport:
    """The first ``need_gpus`` GPUs; one-step-off: vLLM on the last ``rollout_gpus`` of them, the trainer on the rest."""
    used = sorted(gpus, key=lambda g: g.index)[:need_gpus]
    trainer_at_start = estimate.trainer_at_rollout_start_gib if estimate else 0.0
    fits: list[GpuFit] = []
    min_util = MIN_UTIL
    for pos, gpu in enumerate(used):
        total, free = _gib(gpu.cuda_total_mib), _gib(gpu.free_mib)
        has_vllm = colocated or pos >= need_gpus - rollout_gpus
        has_trainer = colocated or not has_vllm
        if estimate is not None and has_vllm:
            min_util = max(min_util, (estimate.rollout_weights_gib + KV_MIN_GIB) / total)
        asks = sees = None
        starts, max_util = True, 0.95
        if has_vllm:
            asks = rollout_util * total
            # The vLLM worker's own context is created before it measures; colocated, so is the trainer's.
            sees = free - CUDA_CONTEXT_GIB * (2 if colocated else 1) - (trainer_at_start if colocated else 0.0)
            starts = sees - START_MARGIN_GIB >= asks
            max_util = min(0.95, _floor_util((sees - START_MARGIN_GIB) / total))
        peak_fits = None
        if estimate is not None:
            if colocated and estimate.peak_per_gpu_gib is not None:
                need = estimate.peak_per_gpu_gib  # both phases, contexts included
            elif has_trainer:
                need = estimate.trainer_peak_gib + CUDA_CONTEXT_GIB
            else:
                need = (asks or 0.0) + CUDA_CONTEXT_GIB
            peak_fits = need <= free
        busy = gpu.used_mib > BUSY_FRACTION * gpu.cuda_total_mib
        fits.append(GpuFit(gpu.index, round(total, 2), round(free, 2), None if asks is None else round(asks, 2),
                           None if sees is None else round(sees, 2), starts, peak_fits, max_util,
                           describe_apps(apps, gpu.uuid) if busy or not starts else ()))  # fmt: skip
    vllm_gpus = [g for g in fits if g.rollout_asks_gib is not None]
    suggested = None
    if not all(g.starts for g in fits):
        best = min(g.max_util for g in vllm_gpus)
        suggested = best if best >= min_util else None
    return FitReport(tuple(fits), rollout_util, suggested, min_util, estimate)
