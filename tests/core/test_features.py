"""Feature names, priority rules and the OOM escalation policy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.exceptions import FeatureError
from verl_async_dapo.features import (
    DEFAULT_FEATURES,
    FEATURE_ORDER,
    Feature,
    FeatureChoice,
    FeatureSet,
    choice_from_env,
    parse_bool,
    parse_feature_names,
    parse_user_features,
)
from verl_async_dapo.policy import AttemptConfig, MemoryTweaks, decide


def test_eight_features_with_the_original_defaults() -> None:
    assert [f.value for f in FEATURE_ORDER] == [
        "flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing",
        "offload", "recompute", "prefix_cache", "chunked_prefill",
    ]  # fmt: skip
    assert {f.value for f in DEFAULT_FEATURES} == {
        "flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing"
    }  # fmt: skip


@pytest.mark.parametrize("names", [[], ["default"], ["默认"], ["  Default "]])
def test_default_words_mean_defaults(names: list[str]) -> None:
    choice = parse_feature_names(names)
    assert choice.is_default
    assert set(FeatureSet(explicit=choice).effective) == DEFAULT_FEATURES


def test_unknown_feature_lists_the_valid_ones() -> None:
    with pytest.raises(FeatureError) as info:
        parse_feature_names(["flashattn"])
    message = str(info.value)
    assert "flashattn" in message
    for feature in FEATURE_ORDER:
        assert feature.value in message


def test_on_and_off_at_once_is_refused() -> None:
    with pytest.raises(FeatureError, match="both enabled and disabled"):
        parse_feature_names(["offload", "no_offload"])


def test_user_features_env_and_enable_offload() -> None:
    assert parse_user_features("prefix_cache, chunked_prefill").enabled == {
        Feature.PREFIX_CACHE, Feature.CHUNKED_PREFILL
    }  # fmt: skip
    assert parse_user_features("") == FeatureChoice()
    assert Feature.OFFLOAD in choice_from_env("", "True").enabled
    assert Feature.OFFLOAD not in choice_from_env("", "False").enabled
    with pytest.raises(ValueError, match="ENABLE_OFFLOAD"):
        parse_bool("maybe", name="ENABLE_OFFLOAD")


def test_explicit_choice_beats_defaults_and_oom() -> None:
    explicit = parse_feature_names(["prefix_cache", "no_flash_attn"])
    fs = FeatureSet(explicit=explicit)
    assert Feature.PREFIX_CACHE in fs.effective  # user-enabled optional feature
    assert Feature.FLASH_ATTN not in fs.effective  # user turned a default off
    assert Feature.DYNAMIC_BATCH in fs.effective  # other defaults stay on
    grown = fs.with_appended(Feature.OFFLOAD)
    assert grown.oom_appended == (Feature.OFFLOAD,)
    assert Feature.PREFIX_CACHE in grown.effective  # never removed
    with pytest.raises(ValueError):
        FeatureSet(explicit=parse_feature_names(["no_offload"])).with_appended(Feature.OFFLOAD)


names_strategy = st.lists(
    st.sampled_from([f.value for f in FEATURE_ORDER] + ["no_" + f.value for f in FEATURE_ORDER] + ["default"]),
    max_size=6,
)


@given(names=names_strategy, appended=st.lists(st.sampled_from([Feature.OFFLOAD, Feature.RECOMPUTE]), max_size=2))
def test_priority_rules_hold_for_any_choice(names: list[str], appended: list[Feature]) -> None:
    try:
        explicit = parse_feature_names(names)
    except FeatureError:
        return  # a name both on and off: refused, covered above
    fs = FeatureSet(explicit=explicit)
    for feature in appended:
        if feature not in explicit.disabled:
            fs = fs.with_appended(feature)
    effective = set(fs.effective)
    assert explicit.enabled <= effective  # explicit choices are never removed
    assert not (explicit.disabled & effective)  # explicit "off" wins over defaults and OOM
    assert DEFAULT_FEATURES - explicit.disabled <= effective  # defaults unless turned off
    assert list(fs.effective) == [f for f in FEATURE_ORDER if f in effective]  # stable order


def _cfg(*names: str) -> AttemptConfig:
    return AttemptConfig(features=FeatureSet(explicit=parse_feature_names(list(names))))


def _decide(config: AttemptConfig, category: ErrorCategory | None, relaunches: int, max_retries: int = 2):
    return decide(config, category, relaunches_so_far=relaunches, max_retries=max_retries,
                  base_gpu_memory_utilization=0.6)  # fmt: skip


def test_gpu_oom_ladder_offload_then_recompute_then_gives_up() -> None:
    first = _decide(_cfg(), ErrorCategory.GPU_OOM, 0)
    assert first.relaunch and first.changes == ("+offload",)
    assert first.next_config is not None
    assert first.next_config.features.oom_appended == (Feature.OFFLOAD,)
    second = _decide(first.next_config, ErrorCategory.GPU_OOM, 1)
    assert second.relaunch and second.changes == ("+recompute",)
    third = _decide(second.next_config, ErrorCategory.GPU_OOM, 2)  # type: ignore[arg-type]
    assert not third.relaunch
    assert "MAX_OOM_RETRIES=2" in third.reason
    assert any("MAX_RESPONSE_LENGTH" in tip for tip in third.suggestions)


def test_ladder_skips_what_the_user_already_has_or_refused() -> None:
    assert _decide(_cfg("offload"), ErrorCategory.GPU_OOM, 0).changes == ("+recompute",)
    assert _decide(_cfg("no_offload"), ErrorCategory.GPU_OOM, 0).changes == ("+recompute",)
    both = _decide(_cfg("offload", "recompute"), ErrorCategory.GPU_OOM, 0)
    assert both.relaunch and "token budget" in both.changes[0]
    assert both.next_config.tweaks.token_budget_scale == 0.5  # type: ignore[union-attr]


def test_host_oom_never_adds_offload() -> None:
    decision = _decide(_cfg(), ErrorCategory.HOST_OOM, 0)
    assert not decision.relaunch and decision.next_config is None
    with_offload = _decide(_cfg("offload"), ErrorCategory.HOST_OOM, 0)
    assert any("offload off" in tip for tip in with_offload.suggestions)


def test_rollout_oom_lowers_rollout_memory_not_training_features() -> None:
    decision = _decide(_cfg(), ErrorCategory.ROLLOUT_OOM, 0, max_retries=10)
    assert decision.relaunch
    assert decision.next_config.features.oom_appended == ()  # type: ignore[union-attr]
    assert decision.next_config.tweaks.rollout_gpu_memory_utilization == 0.5  # type: ignore[union-attr]
    config = decision.next_config
    steps = []
    for n in range(1, 10):
        d = _decide(config, ErrorCategory.ROLLOUT_OOM, n, max_retries=10)  # type: ignore[arg-type]
        if not d.relaunch:
            break
        steps.append(d.changes[0])
        config = d.next_config
    assert steps[-1].startswith("rollout enforce_eager")
    assert config.tweaks.rollout_gpu_memory_utilization >= 0.3  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "category",
    [c for c in ErrorCategory if c not in (ErrorCategory.GPU_OOM, ErrorCategory.ROLLOUT_OOM)] + [None],
)
def test_other_failures_stop_with_a_fix(category: ErrorCategory | None) -> None:
    decision = _decide(_cfg(), category, 0)
    assert not decision.relaunch
    assert decision.suggestions  # always something concrete to do


def test_zero_retries_means_no_relaunch() -> None:
    assert not _decide(_cfg(), ErrorCategory.GPU_OOM, 0, max_retries=0).relaunch


def test_memory_tweaks_default() -> None:
    assert MemoryTweaks().describe()["token_budget_scale"] == 1.0
