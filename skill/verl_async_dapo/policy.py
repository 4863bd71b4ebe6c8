"""What the supervisor does after an attempt fails: the OOM escalation policy (pure).

GPU OOM in training climbs the ladder offload → recompute (skipping rungs the attempt already
has or the user turned off), then halves the per-GPU token budget. A rollout (vLLM/SGLang)
OOM never touches training features, and its fix follows the message (rollout_policy): "no
memory for the cache blocks" raises the engine's share (then lowers max_num_seqs), "free memory
on device is less than desired" lowers it, CUDA-graph / wake-up OOMs lower it then turn CUDA
graphs off. A host-RAM OOM never adds CPU offload (that moves more into host RAM); it stops
with suggestions, like every non-OOM failure. At most ``max_retries`` relaunches in all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from verl_async_dapo.categories import CATEGORY_INFO, CategoryInfo, ErrorCategory
from verl_async_dapo.features import GPU_OOM_LADDER, Feature, FeatureSet
from verl_async_dapo.rollout_policy import fix_for_kind, rollout_oom_step

TOKEN_BUDGET_FLOOR = 0.5  # below half, caps hit the one-sequence floor and change nothing


@dataclass(frozen=True)
class MemoryTweaks:
    """Memory changes that are not features: the rollout share and the token budget."""

    # None = the configured GPU_MEMORY_UTILIZATION.
    rollout_gpu_memory_utilization: float | None = None
    rollout_enforce_eager: bool = False
    # Multiplies every *_max_token_len_per_gpu (dynamic batch) budget.
    token_budget_scale: float = 1.0
    # What earlier attempts proved about the rollout share: a "too small" failure at a share sets the floor,
    # a "too large" one the ceiling; later shares stay strictly between them, so the ladder never oscillates.
    rollout_util_floor: float | None = None
    rollout_util_ceiling: float | None = None
    # None = verl's configured rollout.max_num_seqs (only set once raising the share is no longer possible).
    rollout_max_num_seqs: int | None = None

    def describe(self) -> dict[str, object]:
        return {
            "rollout_gpu_memory_utilization": self.rollout_gpu_memory_utilization,
            "rollout_enforce_eager": self.rollout_enforce_eager,
            "token_budget_scale": self.token_budget_scale,
            "rollout_util_floor": self.rollout_util_floor,
            "rollout_util_ceiling": self.rollout_util_ceiling,
            "rollout_max_num_seqs": self.rollout_max_num_seqs,
        }


@dataclass(frozen=True)
class AttemptConfig:
    """Everything about an attempt that recovery may change."""

    features: FeatureSet
    tweaks: MemoryTweaks = field(default_factory=MemoryTweaks)


class Outcome(str, Enum):
    """What the supervisor decided after a failed attempt: stored with the decision (records.SupervisorDecision),
    so what follows (the budget notice, check_errors) reads the outcome, never the reason's words."""

    RELAUNCH = "relaunch"
    BUDGET_EXHAUSTED = "budget_exhausted"  # the run's one relaunch budget (MAX_OOM_RETRIES, OOM and stalls) is spent
    GPU_HOURS_CAP = "gpu_hours_cap"  # VAD_MAX_GPU_HOURS is used up
    LADDER_EXHAUSTED = "ladder_exhausted"  # every memory-saving step is already applied
    GIVE_UP = "give_up"  # not a failure a relaunch fixes (not an OOM; a stall left as it is)
    ENDED_WELL = "ended_well"  # no exit status kept, but the attempt's own evidence says it finished: nothing to do

    def __str__(self) -> str:
        return self.value


# A relaunch budget ran out (the retries or the GPU hours): the supervisor's relaunch_budget_exhausted notice.
BUDGET_OUTCOMES = frozenset({Outcome.BUDGET_EXHAUSTED, Outcome.GPU_HOURS_CAP})


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    reason: str
    next_config: AttemptConfig | None = None
    # What changed for the next attempt, in words ("+offload", "rollout util 0.6 → 0.5").
    changes: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()

    @property
    def relaunch(self) -> bool:
        return self.outcome is Outcome.RELAUNCH


def decide(
    current: AttemptConfig,
    category: ErrorCategory | None,
    *,
    relaunches_so_far: int,
    max_retries: int,
    base_gpu_memory_utilization: float,
    kind: str | None = None,
    evidence: str | None = None,
    gpu_used_share: float | None = None,
) -> Decision:
    """Decide the next step after a failed attempt (``category`` None = failed with no finding).

    ``kind`` / ``evidence``: the finding's kind and excerpt; a rollout OOM's fix depends on them, and a raise of
    the rollout share stays within the room ``gpu_used_share`` (the log's "device memory used/total") leaves."""
    cat = category or ErrorCategory.UNKNOWN
    if kind == TARGET_GONE:
        return Decision(Outcome.GIVE_UP, f"{TARGET_GONE}: {TARGET_GONE_INFO.explanation}", suggestions=(TARGET_GONE_INFO.fix,))
    if cat not in (ErrorCategory.GPU_OOM, ErrorCategory.ROLLOUT_OOM):
        return Decision(Outcome.GIVE_UP, f"{cat.value}: {CATEGORY_INFO[cat].explanation}", suggestions=_suggestions(cat, current))
    tips = _suggestions(cat, current, kind)
    if relaunches_so_far >= max_retries:
        return Decision(
            Outcome.BUDGET_EXHAUSTED,
            f"{cat.value} again after {relaunches_so_far} relaunch(es); MAX_OOM_RETRIES={max_retries} reached",
            suggestions=tips,
        )
    step = (
        _gpu_oom_step(current)
        if cat is ErrorCategory.GPU_OOM
        else rollout_oom_step(current, base_gpu_memory_utilization, kind, evidence, gpu_used_share)
    )
    if step is None:
        return Decision(Outcome.LADDER_EXHAUSTED, f"{cat.value}: every memory-saving step is already applied", suggestions=tips)
    next_config, changes = step
    return Decision(Outcome.RELAUNCH, f"{cat.value}: relaunching with {', '.join(changes)}", next_config, changes)


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


# A target that vanished mid-run is a supervisor fact, not a log finding: the attempt's record says category
# environment, kind target_gone (supervisor/watch.py), and every face shows it as target_gone with these words
# instead of the environment category's "reinstall flash-attn" (issue 28).
TARGET_GONE = "target_gone"
TARGET_GONE_INFO = CategoryInfo(
    "The target (container) was removed or stopped while training ran; the training process went with it.",
    "recreate or start the container (docker start NAME; same mounts), then resume the run: it continues from its "
    "last checkpoint",
    False,
)


def info_for(category: ErrorCategory, kind: str | None) -> CategoryInfo:
    """The explanation and fix of a finding: the kind's where it has its own (target_gone), else the category's."""
    return TARGET_GONE_INFO if kind == TARGET_GONE else CATEGORY_INFO[category]


def shown_category(category: str, kind: str | None) -> str:
    """The category a face shows: target_gone for a vanished target, else the recorded one."""
    return TARGET_GONE if kind == TARGET_GONE else category


def fix_text(category: ErrorCategory, kind: str | None) -> str:
    """The fix shown to the user for a finding: for a rollout OOM it is the kind's, the one the ladder applies."""
    return fix_for_kind(kind) if category is ErrorCategory.ROLLOUT_OOM else info_for(category, kind).fix


def _suggestions(cat: ErrorCategory, current: AttemptConfig, kind: str | None = None) -> tuple[str, ...]:
    """Concrete next steps for a human, given what the last attempt already had."""
    tips: list[str] = [fix_text(cat, kind)]
    if cat is ErrorCategory.GPU_OOM and _gpu_oom_step(current) is None:
        # The ladder is exhausted: "relaunch with offload, then recompute" would lead with what is already applied.
        applied = [f.value for f in GPU_OOM_LADDER if current.features.has(f)]
        tips = [f"the memory-saving steps are all applied ({', '.join(applied) or 'none allowed'}, the smallest token "
                "budget): the run needs less memory per GPU or more GPUs"]  # fmt: skip
    if cat is ErrorCategory.GPU_OOM:
        if Feature.OFFLOAD in current.features.explicit.disabled:
            tips.append("allow offload (remove no_offload from USER_FEATURES)")
        tips += [
            "lower MAX_RESPONSE_LENGTH (e.g. halve it) or TRAIN_BATCH_SIZE / PPO_MINI_BATCH_SIZE",
            "use more GPUs (TRAINER_GPUS) or a larger sequence-parallel size",
            "lower GPU_MEMORY_UTILIZATION so the rollout leaves more room for training",
        ]
    elif cat is ErrorCategory.ROLLOUT_OOM and kind == "vllm_startup_memory":
        tips += [
            "free the GPU before starting: nvidia-smi shows which processes hold its memory (a leftover vLLM/Ray?)",
            "turn offload on (USER_FEATURES=offload) so the colocated trainer holds less GPU memory at engine start",
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


# What a crash may cost, as a share of the run, before the supervisor suggests checkpointing more often; and the most
# the extra checkpoints may add to the run's time for the suggestion to be worth it ("when checkpoints are cheap").
LOSS_SHARE = 0.05
CHECKPOINT_OVERHEAD_MAX = 0.10


def save_freq_advice(*, total_steps: int, save_freq: int, lost_steps: int, seconds_per_step: float | None,
                     save_seconds: float | None) -> str | None:  # fmt: skip
    """A save_freq that bounds a crash's loss to LOSS_SHARE of the run, when steps were lost and saving that often
    costs at most CHECKPOINT_OVERHEAD_MAX more time (verl's own timing_s/save_checkpoint and step time); else None."""
    freq = max(1, int(total_steps * LOSS_SHARE))
    if lost_steps <= 0 or save_freq <= freq or not seconds_per_step or save_seconds is None or seconds_per_step <= 0:
        return None
    overhead = save_seconds / (freq * seconds_per_step)
    if overhead > CHECKPOINT_OVERHEAD_MAX:
        return None
    return (f"save_freq={freq} (SAVE_FREQ) bounds what a crash can cost to {freq} step{'s' if freq != 1 else ''} "
            f"({LOSS_SHARE:.0%} of the run) for ~{overhead:.0%} more time in checkpoints ({save_seconds:.0f} s each, "
            f"{seconds_per_step:.0f} s a step); this run saves every {save_freq} and lost {lost_steps}")
