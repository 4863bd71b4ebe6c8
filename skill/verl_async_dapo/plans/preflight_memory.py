"""Preflight's GPU-memory checks: nvidia-smi and the model's config.json read in the target, judged by ``memory``.

Answers before launch what used to cost minutes of GPU time to find out: vLLM refusing to start beside another
process ("Free memory on device ... is less than desired GPU memory utilization"), and a plan whose estimated
peak does not fit. When a fix exists it is returned as data (``MemoryFix``), which ``start_training`` applies
only when the user agreed (``apply_memory_fix``).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

from verl_async_dapo.exceptions import NvidiaSmiError, TargetError
from verl_async_dapo.features import FeatureChoice, FeatureSet
from verl_async_dapo.memory import (
    FitReport,
    ModelShape,
    check_fit,
    estimate_from_settings,
    parse_apps_csv,
    propose_features,
)
from verl_async_dapo.memory.gpus import APPS_QUERY_ARGV, GpuMemory
from verl_async_dapo.memory.gpus import MIB as _MIB
from verl_async_dapo.settings import Mode, TrainingSettings
from verl_async_dapo.targets.base import Target

CONFIG_MAX_BYTES = 1 << 20
GIB = float(1 << 30)
FIX_HINT = "start_training with apply_memory_fix=true applies it (CLI: start --apply-memory-fix)"

# (name, status, detail, fix): preflight turns these into its Check lines.
CheckTuple = tuple[str, str, str, str | None]


@dataclass
class MemoryFix:
    """What start_training changes when the user agrees: a lower rollout share, memory features to add."""

    gpu_memory_utilization: float | None = None
    add_features: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.gpu_memory_utilization is not None or bool(self.add_features)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_memory_utilization": self.gpu_memory_utilization, "add_features": self.add_features}


@dataclass
class MemoryResult:
    checks: list[CheckTuple]
    fit: FitReport | None = None
    fix: MemoryFix = field(default_factory=MemoryFix)
    shape_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"fit": self.fit.to_dict() if self.fit else None, "fix": self.fix.to_dict() if self.fix else None,
                "model_note": self.shape_note}  # fmt: skip


async def read_model_shape(target: Target, settings: TrainingSettings) -> tuple[ModelShape | None, str | None]:
    """The model's config.json from the target; (None, why) when it is missing or not a transformer config."""
    path = posixpath.join(settings.resolved_model_path(), "config.json")
    try:
        if not (await target.paths_exist([path]))[path]:
            return None, f"no {path}: the estimate needs the model's config.json"
        data = json.loads((await target.read_tail(path, CONFIG_MAX_BYTES)).decode("utf-8", "replace"))
        if not isinstance(data, dict):
            return None, f"{path} is not a JSON object"
        return ModelShape.from_config(data), None
    except (TargetError, ValueError) as exc:  # JSONDecodeError and ShapeError are ValueErrors
        return None, f"cannot use {path}: {str(exc)[:200]}"


def _gpus_line(fit: FitReport) -> str:
    first = fit.gpus[0]
    ids = ",".join(str(g.index) for g in fit.gpus)
    asks = f"vLLM share {fit.rollout_util:g} x {first.total_gib:.1f} = {first.rollout_asks_gib:.1f} GiB" \
        if first.rollout_asks_gib is not None else "trainer only"
    return f"GPU {ids}: {asks}; free {min(g.free_gib for g in fit.gpus):.1f} GiB"


async def memory_checks(
    target: Target, settings: TrainingSettings, gpus: list[GpuMemory], features: FeatureChoice | None
) -> MemoryResult:
    """The fit decision for the GPUs preflight found; every failure to look is a warning, never a crash."""
    try:  # who holds the GPUs only names them in the fix: without it the decision still stands
        res = await target.run(list(APPS_QUERY_ARGV), timeout=30)
        apps = parse_apps_csv(res.stdout) if res.exit_code == 0 else []
    except (TargetError, NvidiaSmiError):
        apps = []
    colocated = settings.mode is Mode.DAPO
    need = settings.required_gpus()
    shape, note = await read_model_shape(target, settings)
    choice = features if features is not None else settings.feature_choice()
    feature_set = FeatureSet(explicit=choice)
    effective = {f.value for f in feature_set.effective}
    used = sorted(gpus, key=lambda g: g.index)[:need]
    total = min(g.cuda_total_mib for g in used) * _MIB / GIB
    # What other processes leave on the fullest GPU: the budget the estimated peak must fit.
    budget = min(g.free_mib for g in used) * _MIB / GIB
    estimate = proposed = None
    added: list[str] = []
    if shape is not None:
        estimate = estimate_from_settings(settings, shape, effective, gpu_total_gib=total)
    fit = check_fit(gpus, apps, need_gpus=need, rollout_util=settings.gpu_memory_utilization, colocated=colocated,
                    rollout_gpus=0 if colocated else settings.rollout_gpus, estimate=estimate)  # fmt: skip
    if shape is not None and not fit.peak_fits:  # propose with the share the start fix would set
        added, proposed = propose_features(
            settings, shape, effective, {f.value for f in choice.disabled}, budget_gib=budget, gpu_total_gib=total,
            rollout_util=fit.suggested_util,
        )  # fmt: skip
    out = MemoryResult(checks=[], fit=fit, shape_note=note)
    holders = ", ".join(fit.holders)
    if not fit.starts:
        sees = min(g.vllm_sees_gib or 0.0 for g in fit.gpus if g.rollout_asks_gib is not None)
        detail = (f"vLLM will refuse to start: it asks {fit.rollout_util:g} x {fit.gpus[0].total_gib:.1f} GiB = "
                  f"{fit.gpus[0].rollout_asks_gib:.1f} GiB but sees {sees:.1f} GiB free"
                  + (f"; held by {holders}" if holders else ""))  # fmt: skip
        if fit.suggested_util is not None:
            out.fix.gpu_memory_utilization = fit.suggested_util
            fix = (f"lower the rollout share to gpu_memory_utilization={fit.suggested_util:g} ({FIX_HINT}; "
                   f"or GPU_MEMORY_UTILIZATION={fit.suggested_util:g})"
                   + (f", or stop {holders}" if holders else ""))  # fmt: skip
        else:
            fix = (f"stop what holds the GPU ({holders or 'see nvidia-smi'}) or choose other GPUs: a share below "
                   f"{fit.min_util:.2f} cannot hold the model's weights")  # fmt: skip
        out.checks.append(("gpu memory", "error", detail, fix))
    elif holders:
        out.checks.append(("gpu memory", "warning", f"{_gpus_line(fit)}; other processes hold memory: {holders}",
                           "the run fits now, but they may grow: stop them or expect out-of-memory errors"))  # fmt: skip
    else:
        out.checks.append(("gpu memory", "ok", _gpus_line(fit), None))
    if estimate is None:
        out.checks.append(("memory estimate", "warning", f"no estimate: {note}", "MODEL_PATH should be a Hugging Face model dir with config.json"))
    elif fit.peak_fits:
        out.checks.append(("memory estimate", "ok", estimate.line(), None))
    else:
        detail = f"{estimate.line()}, more than the {budget:.1f} GiB free per GPU"
        if added and proposed is not None:  # the user's explicit choices are kept: no_offload is never proposed
            out.fix.add_features = added
            after = proposed.peak_per_gpu_gib or proposed.trainer_peak_gib
            still = "" if after <= budget else "; still above: also shorten MAX_RESPONSE_LENGTH or add GPUs"
            fix = f"turn on {' + '.join(added)} (estimate then {proposed.line()}{still}; {FIX_HINT})"
        else:
            fix = "use more GPUs, shorter MAX_RESPONSE_LENGTH, or a smaller model (no memory feature left to add)"
        out.checks.append(("memory estimate", "warning", detail, fix))
    return out
