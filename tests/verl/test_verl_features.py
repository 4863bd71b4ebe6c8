"""The eight features and the memory tweaks, including user-explicit choices, composed against real configs."""

from __future__ import annotations

from typing import Any

import pytest
from verl_compose import MAIN_VERSIONS, compose_plan, key_exists, plan_for, select

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.features import Feature, FeatureSet, parse_feature_names
from verl_async_dapo.policy import AttemptConfig, MemoryTweaks, decide
from verl_async_dapo.settings import Framework, Mode
from verl_async_dapo.verl import override_diff
from verl_async_dapo.verl.feature_overrides import SequenceBudget, micro_batches, token_caps

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
M = "actor_rollout_ref.model"
TF = f"{A}.megatron.override_transformer_config"


def test_token_caps_scale_and_floor() -> None:
    budget = SequenceBudget(2048, 8192)
    assert token_caps(budget, 1.0) == (20480, 30720)
    assert token_caps(budget, 0.5) == (10240, 15360)
    # Never below one whole sequence, or verl cannot place a single sample.
    assert token_caps(budget, 0.25) == (10240, 10240)


def test_micro_batches_shrink_with_budget() -> None:
    assert micro_batches(1.0) == (2, 4)
    assert micro_batches(0.5) == (1, 2)
    assert micro_batches(0.25) == (1, 1)


USER_CHOICE = parse_feature_names(
    [
        "no_flash_attn",
        "prefix_cache",
        "chunked_prefill",
        "no_dynamic_batch",
        "no_gradient_checkpointing",
        "no_remove_padding",
    ]
)


@pytest.mark.downloads
@pytest.mark.parametrize("version", MAIN_VERSIONS)
@pytest.mark.parametrize("framework", list(Framework))
@pytest.mark.parametrize("mode", list(Mode))
def test_user_explicit_features(verl_trees: Any, version: str, framework: Framework, mode: Mode) -> None:
    tree = verl_trees(version)
    plan = plan_for(tree, version, mode=mode, framework=framework, rollout_gpus=2, explicit=USER_CHOICE,
                    max_response_length=16384)  # fmt: skip
    cfg = compose_plan(tree, plan)
    assert plan.features["explicit"] == [
        "prefix_cache", "chunked_prefill", "no_flash_attn", "no_dynamic_batch", "no_remove_padding",
        "no_gradient_checkpointing",
    ]  # fmt: skip
    assert select(cfg, f"{R}.enable_prefix_caching") is True
    assert select(cfg, f"{R}.enable_chunked_prefill") is True
    assert select(cfg, f"{R}.max_num_batched_tokens") == 2048 + 16384
    # no_dynamic_batch: explicit micro batches instead of token budgets.
    assert select(cfg, f"{A}.use_dynamic_bsz") is False
    assert select(cfg, f"{REF}.log_prob_use_dynamic_bsz") is False
    assert select(cfg, f"{R}.log_prob_use_dynamic_bsz") is False
    assert select(cfg, f"{A}.ppo_micro_batch_size_per_gpu") == 2
    assert select(cfg, f"{REF}.log_prob_micro_batch_size_per_gpu") == 4
    assert select(cfg, f"{R}.log_prob_micro_batch_size_per_gpu") == 4
    if framework is Framework.FSDP:
        assert select(cfg, f"{M}.override_config.attn_implementation") == "sdpa"
        assert select(cfg, f"{M}.enable_gradient_checkpointing") is False
        assert select(cfg, f"{M}.use_remove_padding") is False
    else:
        assert select(cfg, f"{TF}.attention_backend") == "fused"
        assert select(cfg, f"{TF}.recompute_granularity") is None
        if version == "0.6.1":
            assert any("remove_padding" in note for note in plan.notes)
            assert not key_exists(cfg, f"{A}.megatron.use_remove_padding")
        else:
            assert select(cfg, f"{A}.megatron.use_remove_padding") is False


@pytest.mark.downloads
@pytest.mark.parametrize("version", MAIN_VERSIONS)
@pytest.mark.parametrize("framework", list(Framework))
def test_no_offload_user_gets_recompute_first(verl_trees: Any, version: str, framework: Framework) -> None:
    """The OOM ladder skips a feature the user turned off; the plan keeps it off explicitly."""
    tree = verl_trees(version)
    start = AttemptConfig(features=FeatureSet(explicit=parse_feature_names(["no_offload"])))
    decision = decide(start, ErrorCategory.GPU_OOM, relaunches_so_far=0, max_retries=2, base_gpu_memory_utilization=0.6)
    assert decision.next_config is not None
    assert decision.next_config.features.effective.count(Feature.RECOMPUTE) == 1
    plan = plan_for(tree, version, framework=framework, features=decision.next_config.features)
    cfg = compose_plan(tree, plan)
    if framework is Framework.FSDP:
        assert select(cfg, f"{A}.fsdp_config.param_offload") is False
        assert select(cfg, f"{M}.enable_activation_offload") is True
        # Gradient checkpointing is its own (default-on) feature; recompute does not re-set it.
        assert select(cfg, f"{M}.enable_gradient_checkpointing") is True
    else:
        assert select(cfg, f"{A}.megatron.param_offload") is False
        assert select(cfg, f"{TF}.recompute_granularity") == "full"
        assert select(cfg, f"{TF}.recompute_method") == "uniform"
        assert select(cfg, f"{TF}.recompute_num_layers") == 1


def test_recompute_under_fsdp_is_not_gradient_checkpointing() -> None:
    base = plan_for("/verl", "0.9.1", framework=Framework.FSDP)
    more = plan_for("/verl", "0.9.1", framework=Framework.FSDP, features=FeatureSet(oom_appended=(Feature.RECOMPUTE,)))
    changed = {line.split(":")[0] for line in _diff(base.overrides, more.overrides)}
    assert changed == {
        f"{M}.enable_activation_offload",
        f"{A}.entropy_checkpointing",
        f"{A}.entropy_from_logits_with_chunking",
    }


def test_tweaks_only_touch_their_keys() -> None:
    base = plan_for("/verl", "0.6.1", framework=Framework.MEGATRON)
    tweaked = plan_for(
        "/verl", "0.6.1", framework=Framework.MEGATRON,
        tweaks=MemoryTweaks(rollout_gpu_memory_utilization=0.45, rollout_enforce_eager=True, token_budget_scale=0.5),
    )  # fmt: skip
    assert _diff(base.overrides, tweaked.overrides) == [
        f"{A}.ppo_max_token_len_per_gpu: 20480 → 10240",
        f"{REF}.log_prob_max_token_len_per_gpu: 30720 → 15360",
        f"{R}.log_prob_max_token_len_per_gpu: 30720 → 15360",
        f"{R}.gpu_memory_utilization: 0.6 → 0.45",
        f"{R}.enforce_eager: False → True",
    ]


def test_every_feature_is_explicit_on_and_off() -> None:
    """Turning any single feature off changes the plan: no feature silently relies on a verl default."""
    for framework in Framework:
        base = plan_for("/verl", "0.9.1", framework=framework)
        for feature in Feature:
            name = ("no_" if base.features["effective"].count(feature.value) else "") + feature.value
            other = plan_for("/verl", "0.9.1", framework=framework, explicit=parse_feature_names([name]))
            assert set(base.override_keys()) == set(other.override_keys()) or feature is Feature.DYNAMIC_BATCH
            assert _diff(base.overrides, other.overrides), f"{framework.value}: {name} changed nothing"


def _diff(prev: tuple[str, ...], new: tuple[str, ...]) -> list[str]:
    return override_diff(list(prev), list(new))
