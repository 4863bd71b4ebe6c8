"""What the supervisor does after an attempt fails: the OOM escalation policy (pure).

GPU OOM in training climbs the ladder offload → recompute (skipping rungs the attempt already
has or the user turned off), then halves the per-GPU token budget. A rollout (vLLM/SGLang)
OOM never touches training features: it lowers the rollout's memory share, then turns CUDA
graphs off. A host-RAM OOM never adds CPU offload (that moves more into host RAM); it stops
with suggestions, like every non-OOM failure. At most ``max_retries`` relaunches in all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from verl_async_dapo.categories import CATEGORY_INFO, ErrorCategory
from verl_async_dapo.features import GPU_OOM_LADDER, Feature, FeatureSet

ROLLOUT_UTIL_STEP = 0.1
ROLLOUT_UTIL_FLOOR = 0.3
TOKEN_BUDGET_FLOOR = 0.5  # below half, caps hit the one-sequence floor and change nothing


@dataclass(frozen=True)
class MemoryTweaks:
    """Memory changes that are not features: the rollout share and the token budget."""

    # None = the configured GPU_MEMORY_UTILIZATION.
    rollout_gpu_memory_utilization: float | None = None
    rollout_enforce_eager: bool = False
    # Multiplies every *_max_token_len_per_gpu (dynamic batch) budget.
    token_budget_scale: float = 1.0

    def describe(self) -> dict[str, object]:
        return {
            "rollout_gpu_memory_utilization": self.rollout_gpu_memory_utilization,
            "rollout_enforce_eager": self.rollout_enforce_eager,
            "token_budget_scale": self.token_budget_scale,
        }


@dataclass(frozen=True)
class AttemptConfig:
    """Everything about an attempt that recovery may change."""

    features: FeatureSet
    tweaks: MemoryTweaks = field(default_factory=MemoryTweaks)


@dataclass(frozen=True)
class Decision:
    relaunch: bool
    reason: str
    next_config: AttemptConfig | None = None
    # What changed for the next attempt, in words ("+offload", "rollout util 0.6 → 0.5").
    changes: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()


def decide(
    current: AttemptConfig,
    category: ErrorCategory | None,
    *,
    relaunches_so_far: int,
    max_retries: int,
    base_gpu_memory_utilization: float,
) -> Decision:
    """Decide the next step after a failed attempt (``category`` None = failed with no finding)."""
    cat = category or ErrorCategory.UNKNOWN
    if cat not in (ErrorCategory.GPU_OOM, ErrorCategory.ROLLOUT_OOM):
        return Decision(False, f"{cat.value}: {CATEGORY_INFO[cat].explanation}", suggestions=_suggestions(cat, current))
    if relaunches_so_far >= max_retries:
        return Decision(
            False,
            f"{cat.value} again after {relaunches_so_far} relaunch(es); MAX_OOM_RETRIES={max_retries} reached",
            suggestions=_suggestions(cat, current),
        )
    step = (
        _gpu_oom_step(current)
        if cat is ErrorCategory.GPU_OOM
        else _rollout_oom_step(current, base_gpu_memory_utilization)
    )
    if step is None:
        return Decision(
            False, f"{cat.value}: every memory-saving step is already applied", suggestions=_suggestions(cat, current)
        )
    next_config, changes = step
    return Decision(True, f"{cat.value}: relaunching with {', '.join(changes)}", next_config, changes)


def _gpu_oom_step(current: AttemptConfig) -> tuple[AttemptConfig, tuple[str, ...]] | None:
    for feature in GPU_OOM_LADDER:
        if current.features.has(feature) or feature in current.features.explicit.disabled:
            continue
        return replace(current, features=current.features.with_appended(feature)), (f"+{feature.value}",)
    scale = current.tweaks.token_budget_scale
    if scale / 2 >= TOKEN_BUDGET_FLOOR:
        tweaks = replace(current.tweaks, token_budget_scale=scale / 2)
        return replace(current, tweaks=tweaks), (f"token budget per GPU ×{scale / 2:g}",)
    return None


def _rollout_oom_step(current: AttemptConfig, base_util: float) -> tuple[AttemptConfig, tuple[str, ...]] | None:
    util = current.tweaks.rollout_gpu_memory_utilization or base_util
    lowered = round(util - ROLLOUT_UTIL_STEP, 2)
    if lowered >= ROLLOUT_UTIL_FLOOR:
        tweaks = replace(current.tweaks, rollout_gpu_memory_utilization=lowered)
        return replace(current, tweaks=tweaks), (f"rollout gpu_memory_utilization {util:g} → {lowered:g}",)
    if not current.tweaks.rollout_enforce_eager:
        tweaks = replace(current.tweaks, rollout_enforce_eager=True)
        return replace(current, tweaks=tweaks), ("rollout enforce_eager (no CUDA graphs)",)
    return None


def _suggestions(cat: ErrorCategory, current: AttemptConfig) -> tuple[str, ...]:
    """Concrete next steps for a human, given what the last attempt already had."""
    tips: list[str] = [CATEGORY_INFO[cat].fix]
    if cat is ErrorCategory.GPU_OOM:
        if Feature.OFFLOAD in current.features.explicit.disabled:
            tips.append("allow offload (remove no_offload from USER_FEATURES)")
        tips += [
            "lower MAX_RESPONSE_LENGTH (e.g. halve it) or TRAIN_BATCH_SIZE / PPO_MINI_BATCH_SIZE",
            "use more GPUs (TRAINER_GPUS) or a larger sequence-parallel size",
            "lower GPU_MEMORY_UTILIZATION so the rollout leaves more room for training",
        ]
    elif cat is ErrorCategory.ROLLOUT_OOM:
        tips += [
            "raise ROLLOUT_TP (tensor parallel size of the rollout) to spread the model over more GPUs",
            "lower MAX_RESPONSE_LENGTH or N_RESP_PER_PROMPT",
        ]
    elif cat is ErrorCategory.HOST_OOM:
        if current.features.has(Feature.OFFLOAD):
            tips.append("turn offload off (USER_FEATURES=no_offload): it keeps parameters in host RAM")
        tips.append("lower TRAIN_BATCH_SIZE or N_RESP_PER_PROMPT; give the container more memory")
    return tuple(tips)
