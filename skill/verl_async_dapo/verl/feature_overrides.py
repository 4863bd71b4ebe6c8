"""The eight features and the memory tweaks as Hydra overrides, per framework and release (pure).

Every feature is emitted explicitly whether on or off, so the original skill's defaults hold even
where verl's differ (verl turns prefix caching and chunked prefill on; the skill has them off).
Reference: verl.md §5 and §5.1; each key was checked in the release's generated trainer yaml.

* ``recompute`` under FSDP must not mean gradient checkpointing again (that is on by default): it is
  activation offload + entropy checkpointing + chunked entropy. Under Megatron it is full uniform
  recompute of every layer.
* ``gradient_checkpointing`` under Megatron is selective recompute (Megatron's cheap activation
  checkpointing of core attention); ``recompute`` upgrades it to full.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_async_dapo.features import Feature, FeatureSet
from verl_async_dapo.policy import MemoryTweaks
from verl_async_dapo.settings import Framework
from verl_async_dapo.verl.overrides import Override
from verl_async_dapo.verl.profiles import VersionProfile

ACTOR = "actor_rollout_ref.actor"
REF = "actor_rollout_ref.ref"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"
MEGATRON = f"{ACTOR}.megatron"
TRANSFORMER = f"{MEGATRON}.override_transformer_config"

# Dynamic batch budgets per GPU, in multiples of one full sequence (P+R): verl's perf guide asks for
# at least 2x for training; forward-only log-prob passes use 3x as in verl's DAPO/one-step-off scripts.
ACTOR_TOKEN_FACTOR = 2
LOG_PROB_TOKEN_FACTOR = 3
# Without dynamic batching: per-GPU micro batches (verl's Megatron DAPO script uses 2 and 4).
ACTOR_MICRO_BATCH = 2
LOG_PROB_MICRO_BATCH = 4
# vLLM's default batch-token budget; with chunked prefill off it must cover a whole sequence.
MIN_BATCHED_TOKENS = 8192
# Megatron attention when flash_attn is off: TransformerEngine's cuDNN fused attention (the
# Megatron counterpart of PyTorch sdpa under FSDP).
MEGATRON_NON_FLASH_BACKEND = "fused"
FSDP_NON_FLASH_ATTENTION = "sdpa"


@dataclass(frozen=True)
class SequenceBudget:
    max_prompt_length: int
    max_response_length: int

    @property
    def sequence(self) -> int:
        return self.max_prompt_length + self.max_response_length


@dataclass(frozen=True)
class FeatureOverrides:
    overrides: tuple[Override, ...]
    # Human-readable remarks (a feature with no key in this release, a value floor that applied).
    notes: tuple[str, ...]


def token_caps(budget: SequenceBudget, scale: float) -> tuple[int, int]:
    """(actor, log-prob) per-GPU token caps; never below one full sequence or verl cannot place it."""
    seq = budget.sequence
    actor = max(seq, int(ACTOR_TOKEN_FACTOR * seq * scale))
    log_prob = max(seq, int(LOG_PROB_TOKEN_FACTOR * seq * scale))
    return actor, log_prob


def micro_batches(scale: float) -> tuple[int, int]:
    """(actor, log-prob) micro batch sizes; the OOM ladder's token-budget halving shrinks them too."""
    return max(1, int(ACTOR_MICRO_BATCH * scale)), max(1, int(LOG_PROB_MICRO_BATCH * scale))


def build_feature_overrides(
    features: FeatureSet,
    tweaks: MemoryTweaks,
    framework: Framework,
    profile: VersionProfile,
    budget: SequenceBudget,
    base_gpu_memory_utilization: float,
) -> FeatureOverrides:
    on = features.has
    out: list[Override] = []
    notes: list[str] = []
    megatron = framework is Framework.MEGATRON

    # flash_attn
    if megatron:
        out.append(
            Override(
                f"{TRANSFORMER}.attention_backend", "flash" if on(Feature.FLASH_ATTN) else MEGATRON_NON_FLASH_BACKEND
            )
        )
    else:
        # override_config is an empty dict in every release, so the key needs ++ (verl.md §5).
        attn = "flash_attention_2" if on(Feature.FLASH_ATTN) else FSDP_NON_FLASH_ATTENTION
        out.append(Override(f"{MODEL}.override_config.attn_implementation", attn, "++"))

    out += _dynamic_batch(on(Feature.DYNAMIC_BATCH), tweaks.token_budget_scale, budget, notes)

    # remove_padding
    if not megatron:
        out.append(Override(f"{MODEL}.use_remove_padding", on(Feature.REMOVE_PADDING)))
    elif profile.facts.megatron_remove_padding:
        out.append(Override(f"{MEGATRON}.use_remove_padding", on(Feature.REMOVE_PADDING)))
    else:
        notes.append(f"remove_padding: verl {profile.version} Megatron has no switch (sequences are always packed)")

    # gradient_checkpointing + recompute
    if megatron:
        out += _megatron_recompute(on(Feature.GRADIENT_CHECKPOINTING), on(Feature.RECOMPUTE))
    else:
        out.append(Override(f"{MODEL}.enable_gradient_checkpointing", on(Feature.GRADIENT_CHECKPOINTING)))
        recompute = on(Feature.RECOMPUTE)
        out += [
            Override(f"{MODEL}.enable_activation_offload", recompute),
            Override(f"{ACTOR}.entropy_checkpointing", recompute),
            Override(f"{ACTOR}.entropy_from_logits_with_chunking", recompute),
        ]

    out += _offload(on(Feature.OFFLOAD), megatron, profile)

    # Rollout engine (vLLM/SGLang) features and memory tweaks.
    util = tweaks.rollout_gpu_memory_utilization or base_gpu_memory_utilization
    out += [
        Override(f"{ROLLOUT}.enable_prefix_caching", on(Feature.PREFIX_CACHE)),
        Override(f"{ROLLOUT}.enable_chunked_prefill", on(Feature.CHUNKED_PREFILL)),
        # With chunked prefill off vLLM refuses max_num_batched_tokens < max_model_len (= P+R).
        Override(f"{ROLLOUT}.max_num_batched_tokens", max(MIN_BATCHED_TOKENS, budget.sequence)),
        Override(f"{ROLLOUT}.gpu_memory_utilization", round(util, 4)),
        Override(f"{ROLLOUT}.enforce_eager", tweaks.rollout_enforce_eager),
    ]
    if tweaks.rollout_max_num_seqs is not None:  # only once the rollout-OOM ladder lowered it (verl's default else)
        out.append(Override(f"{ROLLOUT}.max_num_seqs", tweaks.rollout_max_num_seqs))
    return FeatureOverrides(tuple(out), tuple(notes))


def _dynamic_batch(enabled: bool, scale: float, budget: SequenceBudget, notes: list[str]) -> list[Override]:
    flags = [
        Override(f"{ACTOR}.use_dynamic_bsz", enabled),
        Override(f"{REF}.log_prob_use_dynamic_bsz", enabled),
        Override(f"{ROLLOUT}.log_prob_use_dynamic_bsz", enabled),
    ]
    if enabled:
        actor_cap, log_prob_cap = token_caps(budget, scale)
        if actor_cap == budget.sequence and scale < 1.0:
            notes.append(f"token budget floored at one full sequence ({budget.sequence} tokens)")
        return [
            *flags,
            Override(f"{ACTOR}.ppo_max_token_len_per_gpu", actor_cap),
            Override(f"{REF}.log_prob_max_token_len_per_gpu", log_prob_cap),
            Override(f"{ROLLOUT}.log_prob_max_token_len_per_gpu", log_prob_cap),
        ]
    actor_mb, log_prob_mb = micro_batches(scale)
    # Without dynamic batching verl requires explicit micro batch sizes (validate_config).
    return [
        *flags,
        Override(f"{ACTOR}.ppo_micro_batch_size_per_gpu", actor_mb),
        Override(f"{REF}.log_prob_micro_batch_size_per_gpu", log_prob_mb),
        Override(f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", log_prob_mb),
    ]


def _megatron_recompute(gradient_checkpointing: bool, recompute: bool) -> list[Override]:
    # The keys exist with null values in every release, so `+` would work; `++` also survives a
    # user config that dropped them (verl.md §5.1). The ref's transformer config interpolates these.
    if recompute:
        granularity, method, layers = "full", "uniform", 1
    elif gradient_checkpointing:
        granularity, method, layers = "selective", None, None
    else:
        granularity, method, layers = None, None, None
    return [
        Override(f"{TRANSFORMER}.recompute_granularity", granularity, "++"),
        Override(f"{TRANSFORMER}.recompute_method", method, "++"),
        Override(f"{TRANSFORMER}.recompute_num_layers", layers, "++"),
    ]


def _offload(enabled: bool, megatron: bool, profile: VersionProfile) -> list[Override]:
    # The reference model is kept in parity with the actor (verl docs/perf/best_practices.rst).
    if megatron:
        out = [
            Override(f"{MEGATRON}.param_offload", enabled),
            Override(f"{MEGATRON}.optimizer_offload", enabled),
        ]
        if profile.facts.megatron_grad_offload:
            out.append(Override(f"{MEGATRON}.grad_offload", enabled))
        out.append(Override(f"{REF}.megatron.param_offload", enabled))
        return out
    return [
        Override(f"{ACTOR}.fsdp_config.param_offload", enabled),
        Override(f"{ACTOR}.fsdp_config.optimizer_offload", enabled),
        # FSDP2's CPUOffloadPolicy (this launcher always runs FSDP as FSDP2); read for the actor only.
        Override(f"{ACTOR}.fsdp_config.offload_policy", enabled),
        Override(f"{REF}.fsdp_config.param_offload", enabled),
    ]
