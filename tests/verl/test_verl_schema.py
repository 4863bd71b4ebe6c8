"""Plans against each release's schema: no stale or silently ignored keys, and Hydra's real errors.

Covers 0.6.1, 0.7.0, 0.7.1, 0.8.0 and 0.9.1 (the matrix test composes every combination for 0.6.1
and 0.9.1 and checks values).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from verl_compose import (
    ALL_VERSIONS,
    MAIN_VERSIONS,
    base_config,
    compose_full,
    compose_in_tree,
    compose_plan,
    key_exists,
    plan_for,
    select,
)

from verl_async_dapo.features import Feature, FeatureChoice, FeatureSet, parse_feature_names
from verl_async_dapo.settings import Framework, Mode
from verl_async_dapo.verl import LaunchPlan, VersionProfile, profile_for_version, split_override

pytestmark = pytest.mark.downloads

EVERYTHING_ON = FeatureSet(
    explicit=FeatureChoice(enabled=frozenset({Feature.PREFIX_CACHE, Feature.CHUNKED_PREFILL})),
    oom_appended=(Feature.OFFLOAD, Feature.RECOMPUTE),
)
EVERYTHING_OFF = FeatureSet(explicit=parse_feature_names([f"no_{f.value}" for f in Feature]))


@dataclass(frozen=True)
class Addition:
    """An override key absent from the release's schema that the release's code nevertheless reads."""

    prefix: str
    applies: Callable[[VersionProfile, Mode, Framework], bool]
    reason: str


ALLOWED_ADDITIONS = (
    Addition(
        "actor_rollout_ref.model.override_config.attn_implementation",
        lambda p, m, f: f is Framework.FSDP,
        "override_config is {} in every release; the attention implementation is read from it by "
        "verl/workers/fsdp_workers.py (<= 0.7.x) and HFModelConfig in verl/workers/config/model.py (>= 0.8)",
    ),
    Addition(
        "reward_model.reward_kwargs.",
        lambda p, m, f: p.name == "legacy" and m is Mode.ONE_STEP_OFF,
        "recipe/one_step_off_policy/main_ppo.py passes config.reward_model.get('reward_kwargs', {}) to "
        "load_reward_manager, i.e. to DAPORewardManager(overlong_buffer_cfg=..., max_resp_len=...)",
    ),
    Addition(
        "reward.reward_kwargs.",
        lambda p, m, f: p.name == "current" and m is Mode.ONE_STEP_OFF,
        "verl/experimental/reward_loop/reward_manager/dapo.py reads config.reward.reward_kwargs."
        "{overlong_buffer_cfg,max_resp_len}; only the DAPO recipe's yaml declares them",
    ),
)


def _allowed(key: str, profile: VersionProfile, mode: Mode, framework: Framework) -> Addition | None:
    for addition in ALLOWED_ADDITIONS:
        if key.startswith(addition.prefix) and addition.applies(profile, mode, framework):
            return addition
    return None


COMBOS = [(v, m, f) for v in ALL_VERSIONS for m in Mode for f in Framework]


def _plans(tree: Path, version: str, mode: Mode, framework: Framework) -> list[LaunchPlan]:
    common = {"mode": mode, "framework": framework, "rollout_gpus": 2, "trainer_gpus": 2}
    return [
        plan_for(tree, version, features=EVERYTHING_ON, swanlab_enabled=True, **common),
        plan_for(tree, version, features=EVERYTHING_OFF, **common),
    ]


def unexplained_keys(plan: LaunchPlan, schema: Any, composed: Any, profile: VersionProfile) -> list[str]:
    """Overrides that are neither in the release's schema nor a documented addition (with the right prefix)."""
    bad: list[str] = []
    for text in plan.overrides:
        prefix, key, _ = split_override(text)
        addition = _allowed(key, profile, plan.mode, plan.framework)
        if key_exists(schema, key):
            if addition is not None:
                bad.append(f"{key} is in the {profile.version} schema; drop it from ALLOWED_ADDITIONS")
            elif prefix == "+" and OmegaConf.select(schema, key) is not None:
                bad.append(f"{text}: + on a non-null key")
        elif addition is None:
            bad.append(f"{text}: not in the verl {profile.version} schema and not a documented addition")
        elif prefix not in ("+", "++") or not key_exists(composed, key):
            bad.append(f"{text}: a missing key needs + or ++")
    return bad


@pytest.mark.parametrize(("version", "mode", "framework"), COMBOS, ids=lambda x: getattr(x, "value", x))
def test_no_silently_ignored_keys(verl_trees: Any, version: str, mode: Mode, framework: Framework) -> None:
    """Every key is in the release's composed schema, or is a documented `+` addition its code reads."""
    tree = verl_trees(version)
    profile = profile_for_version(version)
    for plan in _plans(tree, version, mode, framework):
        schema = base_config(tree, Path(plan.entry.config_dir), plan.entry.config_name)
        composed = compose_plan(tree, plan)  # composes at all: no `+` on a set key, no plain missing key
        assert unexplained_keys(plan, schema, composed, profile) == []


def test_ignored_key_check_catches_a_stale_added_key(verl_trees: Any) -> None:
    tree = verl_trees("0.9.1")
    plan = plan_for(tree, "0.9.1", mode=Mode.DAPO, framework=Framework.FSDP)
    stale = plan.model_copy(update={"overrides": (*plan.overrides, "++reward_model.overlong_buffer.enable=True")})
    schema = base_config(tree, Path(plan.entry.config_dir), plan.entry.config_name)
    composed = compose_plan(tree, stale)  # ++ hides the stale key from Hydra ...
    assert key_exists(composed, "reward_model.overlong_buffer.enable")
    # ... but not from this check.
    assert unexplained_keys(stale, schema, composed, profile_for_version("0.9.1")) == [
        "++reward_model.overlong_buffer.enable=True: not in the verl 0.9.1 schema and not a documented addition"
    ]


# Keys that exist in some schema but that the release's code does not read for this workflow.
IGNORED = (
    (
        "actor_rollout_ref.actor.grad_clip",
        lambda v, m, f: f is Framework.MEGATRON or v >= (0, 8, 0),
        "only the legacy dp_actor (<= 0.7.1) reads it; the engine workers read actor.optim.clip_grad",
    ),
    (
        "reward_model.",
        lambda v, m, f: v >= (0, 7, 1),
        "legacy placeholders (legacy_reward_impl.yaml): silently ignored by 0.9.x main_ppo",
    ),
    ("reward.", lambda v, m, f: v < (0, 7, 1), "no reward.* section before 0.7.1"),
    (
        "algorithm.filter_groups.",
        lambda v, m, f: m is Mode.ONE_STEP_OFF,
        "the one-step-off trainer has no dynamic sampling",
    ),
    (
        "data.gen_batch_size",
        lambda v, m, f: m is Mode.ONE_STEP_OFF,
        "0.9.x RayPPOTrainer would size the dataloader with it (no filtering to shrink it back)",
    ),
    (
        "actor_rollout_ref.model.enable_gradient_checkpointing",
        lambda v, m, f: f is Framework.MEGATRON,
        "Megatron recomputation is configured in override_transformer_config",
    ),
    (
        "actor_rollout_ref.model.enable_activation_offload",
        lambda v, m, f: f is Framework.MEGATRON,
        "FSDP only (verl/utils/activation_offload.py asserts fsdp/fsdp2)",
    ),
    (
        "actor_rollout_ref.model.use_remove_padding",
        lambda v, m, f: f is Framework.MEGATRON,
        "Megatron reads actor.megatron.use_remove_padding",
    ),
    (
        "actor_rollout_ref.model.override_config.",
        lambda v, m, f: f is Framework.MEGATRON,
        "Megatron selects attention via override_transformer_config.attention_backend",
    ),
)


@pytest.mark.parametrize(("version", "mode", "framework"), COMBOS, ids=lambda x: getattr(x, "value", x))
def test_no_keys_the_release_ignores(version: str, mode: Mode, framework: Framework) -> None:
    release = profile_for_version(version).version.release
    for plan in _plans(Path("/verl"), version, mode, framework):
        for key in plan.override_keys():
            for prefix, ignored, reason in IGNORED:
                assert not (key.startswith(prefix) and ignored(release, mode, framework)), f"{key}: {reason}"


@pytest.mark.parametrize(
    ("version", "mode", "framework"),
    [
        ("0.6.1", Mode.DAPO, Framework.MEGATRON),
        ("0.6.1", Mode.ONE_STEP_OFF, Framework.FSDP),
        ("0.9.1", Mode.DAPO, Framework.FSDP),
        ("0.9.1", Mode.ONE_STEP_OFF, Framework.MEGATRON),
    ],
    ids=str,
)
def test_fast_compose_equals_hydra_compose(verl_trees: Any, version: str, mode: Mode, framework: Framework) -> None:
    tree = verl_trees(version)
    plan = plan_for(tree, version, mode=mode, framework=framework, features=EVERYTHING_ON, rollout_gpus=2)
    entry = (tree, Path(plan.entry.config_dir), plan.entry.config_name)
    full = compose_full(*entry, plan.overrides)
    fast = compose_in_tree(*entry, plan.overrides)
    assert OmegaConf.to_container(full, resolve=False) == OmegaConf.to_container(fast, resolve=False)


STALE = [
    # (release, mode, override, message fragments from Hydra)
    (
        "0.9.1",
        Mode.DAPO,
        "reward_model.overlong_buffer.enable=True",
        [
            "Could not override 'reward_model.overlong_buffer.enable'.",
            "To append to your config use +reward_model.overlong_buffer.enable=True",
            "Key 'overlong_buffer' is not in struct",
            "full_key: reward_model.overlong_buffer",
        ],
    ),
    (
        "0.9.1",
        Mode.ONE_STEP_OFF,
        "reward.reward_kwargs.max_resp_len=8192",
        ["Could not override 'reward.reward_kwargs.max_resp_len'.", "Key 'reward_kwargs' is not in struct"],
    ),
    (
        "0.6.1",
        Mode.DAPO,
        "reward.reward_manager.name=dapo",
        ["Could not override 'reward.reward_manager.name'.", "Key 'reward' is not in struct"],
    ),
    (
        "0.9.1",
        Mode.DAPO,
        "actor_rollout_ref.actor.megatron.grad_offload=True",
        ["Could not override 'actor_rollout_ref.actor.megatron.grad_offload'."],
    ),
    (
        "0.6.1",
        Mode.DAPO,
        "+actor_rollout_ref.rollout.enable_prefix_caching=False",
        [
            "Could not append to config. An item is already at 'actor_rollout_ref.rollout.enable_prefix_caching'.",
            "Or add a second + to add or override",
        ],
    ),
]


@pytest.mark.parametrize(
    ("version", "mode", "override", "fragments"), STALE, ids=lambda x: getattr(x, "value", str(x)[:40])
)
def test_stale_key_fails_with_hydras_message(
    verl_trees: Any, version: str, mode: Mode, override: str, fragments: list[str]
) -> None:
    tree = verl_trees(version)
    framework = Framework.MEGATRON if "megatron" in override else Framework.FSDP
    plan = plan_for(tree, version, mode=mode, framework=framework, rollout_gpus=2)
    with pytest.raises(ConfigCompositionException) as info:
        compose_full(tree, Path(plan.entry.config_dir), plan.entry.config_name, [override, *plan.overrides])
    text = f"{info.value}\n{info.value.__cause__}"
    for fragment in fragments:
        assert fragment in text


# The launch path itself: the plan's --config-path/--config-name/overrides through @hydra.main
# (`--cfg job` composes and prints without running the task), from the tree root as CWD.
_CLI = textwrap.dedent(
    """
    import hydra

    @hydra.main(config_path=None, config_name=None, version_base=None)
    def main(cfg):
        raise SystemExit("the task must not run under --cfg job")

    main()
    """
)


def _run_cli(tree: Path, plan: LaunchPlan, extra: list[str]) -> subprocess.CompletedProcess[str]:
    script = tree / "_compose_cli.py"
    script.write_text(_CLI)
    assert plan.argv[:3] == ("python3", "-m", plan.entry.module)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run(
        [sys.executable, str(script), *plan.argv[3:], *extra, "--cfg", "job"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_argv_composes_through_hydra_main(verl_trees: Any, version: str) -> None:
    tree = verl_trees(version)
    plan = plan_for(
        tree, version, mode=Mode.ONE_STEP_OFF, framework=Framework.FSDP, rollout_gpus=2, swanlab_enabled=True
    )
    done = _run_cli(tree, plan, [])
    assert done.returncode == 0, done.stderr
    printed = OmegaConf.create(done.stdout)
    assert select(printed, "trainer.default_local_dir") == plan.checkpoint_dir
    assert list(select(printed, "trainer.logger")) == ["console", "swanlab"]
    assert select(printed, "actor_rollout_ref.hybrid_engine") is False
    assert select(printed, "actor_rollout_ref.rollout.enable_prefix_caching") is False


def test_stale_key_through_hydra_main_prints_the_documented_error(verl_trees: Any) -> None:
    tree = verl_trees("0.9.1")
    plan = plan_for(tree, "0.9.1", mode=Mode.DAPO, framework=Framework.FSDP)
    done = _run_cli(tree, plan, ["reward_model.overlong_buffer.enable=True"])
    assert done.returncode == 1
    expected = (
        "Could not override 'reward_model.overlong_buffer.enable'.\n"
        "To append to your config use +reward_model.overlong_buffer.enable=True\n"
        "Key 'overlong_buffer' is not in struct\n"
        "    full_key: reward_model.overlong_buffer\n"
        "    object_type=dict\n"
        "\n"
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    )
    assert expected in done.stderr


def test_schema_facts_match_the_releases(verl_trees: Any) -> None:
    """The per-release facts in profiles.py, read back from the composed schemas."""
    for version in ALL_VERSIONS:
        tree = verl_trees(version)
        facts = profile_for_version(version).facts
        fsdp = plan_for(tree, version, framework=Framework.FSDP)
        megatron = plan_for(tree, version, framework=Framework.MEGATRON)
        fsdp_schema = base_config(tree, Path(fsdp.entry.config_dir), fsdp.entry.config_name)
        mega_schema = base_config(tree, Path(megatron.entry.config_dir), megatron.entry.config_name)
        assert key_exists(mega_schema, "actor_rollout_ref.actor.megatron.grad_offload") is facts.megatron_grad_offload
        assert (
            key_exists(mega_schema, "actor_rollout_ref.actor.megatron.use_remove_padding")
            is facts.megatron_remove_padding
        )
        assert key_exists(fsdp_schema, facts.fsdp_grad_clip_key)
        assert key_exists(fsdp_schema, "actor_rollout_ref.actor.fsdp_config.offload_policy")
        assert key_exists(fsdp_schema, "actor_rollout_ref.rollout.enable_prefix_caching")
        # rollout.mode: the schema default matches what the one-step-off code asserts.
        assert select(fsdp_schema, "actor_rollout_ref.rollout.mode") == facts.rollout_mode
