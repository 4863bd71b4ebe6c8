"""Version profiles: where the entry points live and which keys a verl release has (pure).

Two layouts exist (reference verl.md §1-§4):

* ``legacy`` (verl 0.6.x-0.7.0): the DAPO and one-step-off recipes are plain directories in the verl
  tree (``recipe.dapo.main_dapo``, ``recipe.one_step_off_policy.main_ppo``); the DAPO reward is
  configured with ``reward_model.reward_manager`` + ``reward_model.overlong_buffer.*``.
* ``current`` (verl 0.7.1-0.9.x): ``recipe/`` is the verl-recipe submodule (DAPO only) and one-step-off
  ships as ``verl.experimental.one_step_off_policy``; the reward lives under ``reward.*``.

A few keys change *inside* a layout, so a profile is resolved per release into :class:`SchemaFacts`.
Every fact below was checked against the wheel's ``verl/trainer/config/_generated_*.yaml`` and the
Python code that reads the key, for 0.6.1, 0.7.0, 0.7.1, 0.8.0 and 0.9.1 (0.6.0 and 0.9.0 are assumed
to match the checked release of their minor line).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from verl_async_dapo.exceptions import VersionError
from verl_async_dapo.settings import Framework, Mode
from verl_async_dapo.verl.versions import V, VerlVersion

ACTOR = "actor_rollout_ref.actor"


class RewardLayout(str, Enum):
    LEGACY = "legacy"  # reward_model.reward_manager / reward_model.overlong_buffer.* / reward_model.reward_kwargs
    CURRENT = "current"  # reward.reward_manager.name / reward.reward_kwargs.*


@dataclass(frozen=True)
class EntryPoint:
    """How to start one workflow: ``cd VERL_HOME && python3 -m <module> --config-path ... --config-name ...``."""

    module: str
    fsdp_config_name: str
    megatron_config_name: str
    config_path: str  # relative to the verl root (VERL_HOME)

    def config_name(self, framework: Framework) -> str:
        return self.megatron_config_name if framework is Framework.MEGATRON else self.fsdp_config_name


@dataclass(frozen=True)
class SchemaFacts:
    """Keys whose presence or meaning changes between releases of one layout."""

    # actor_rollout_ref.rollout.mode: one-step-off asserts "sync" on 0.6.x Megatron and "async" from 0.7.0.
    rollout_mode: str
    # The FSDP actor's gradient-clip key that the code reads: the legacy dp_actor (<= 0.7.1) reads
    # actor.grad_clip; the engine workers (>= 0.8.0, the only FSDP workers left) read actor.optim.clip_grad.
    fsdp_grad_clip_key: str
    # actor.megatron.grad_offload exists and is read up to 0.8.x; 0.9.x removed the key.
    megatron_grad_offload: bool
    # actor.megatron.use_remove_padding exists from 0.7.0 (0.6.x Megatron always packs; there is no key).
    megatron_remove_padding: bool


@dataclass(frozen=True)
class VersionProfile:
    """A layout resolved for one verl release."""

    name: str
    version: VerlVersion
    reward_layout: RewardLayout
    dapo: EntryPoint
    one_step_off: EntryPoint
    facts: SchemaFacts
    # DAPO/one-step-off code is not in `pip install verl`: for `current` it needs the recipe submodule.
    needs_recipe_submodule: bool

    def entry(self, mode: Mode) -> EntryPoint:
        return self.dapo if mode is Mode.DAPO else self.one_step_off


_LEGACY_DAPO = EntryPoint("recipe.dapo.main_dapo", "dapo_trainer", "dapo_megatron_trainer", "recipe/dapo/config")
_LEGACY_ONE_STEP = EntryPoint(
    "recipe.one_step_off_policy.main_ppo",
    "one_step_off_ppo_trainer",
    "one_step_off_ppo_megatron_trainer",
    "recipe/one_step_off_policy/config",
)
_CURRENT_ONE_STEP = EntryPoint(
    "verl.experimental.one_step_off_policy.main_ppo",
    "one_step_off_ppo_trainer",
    "one_step_off_ppo_megatron_trainer",
    "verl/experimental/one_step_off_policy/config",
)

_LEGACY_GRAD_CLIP = f"{ACTOR}.grad_clip"
_ENGINE_GRAD_CLIP = f"{ACTOR}.optim.clip_grad"

# (first release, facts); each row holds until the next row's release.
_FACTS: tuple[tuple[VerlVersion, SchemaFacts], ...] = (
    (V("0.6.0"), SchemaFacts("sync", _LEGACY_GRAD_CLIP, megatron_grad_offload=True, megatron_remove_padding=False)),
    (V("0.7.0"), SchemaFacts("async", _LEGACY_GRAD_CLIP, megatron_grad_offload=True, megatron_remove_padding=True)),
    (V("0.8.0"), SchemaFacts("async", _ENGINE_GRAD_CLIP, megatron_grad_offload=True, megatron_remove_padding=True)),
    (V("0.9.0"), SchemaFacts("async", _ENGINE_GRAD_CLIP, megatron_grad_offload=False, megatron_remove_padding=True)),
)

MIN_SUPPORTED = V("0.6.0")
# Exclusive: a newer minor may rename keys again, so it is refused rather than guessed.
MAX_SUPPORTED_EXCLUSIVE = V("0.10.0")
# Where the recipe moved out of the tree (verl commit 2bb42bae6, first released in 0.7.1).
CURRENT_LAYOUT_FROM = V("0.7.1")

PROFILE_NAMES: tuple[str, ...] = ("legacy", "current")


def _facts_for(version: VerlVersion) -> SchemaFacts:
    chosen = _FACTS[0][1]
    for first, facts in _FACTS:
        if version >= first:
            chosen = facts
    return chosen


def profile_for_version(text: str | VerlVersion) -> VersionProfile:
    """The profile for a verl release; raises :class:`VersionError` for garbage or unsupported releases."""
    version = text if isinstance(text, VerlVersion) else VerlVersion.parse(text)
    if version < MIN_SUPPORTED or version >= MAX_SUPPORTED_EXCLUSIVE:
        raise VersionError(
            f"verl {version} is not supported: this launcher knows verl {MIN_SUPPORTED} up to (not including) "
            f"{MAX_SUPPORTED_EXCLUSIVE}; its Hydra keys differ between releases and are never guessed"
        )
    facts = _facts_for(version)
    if version < CURRENT_LAYOUT_FROM:
        return VersionProfile(
            name="legacy",
            version=version,
            reward_layout=RewardLayout.LEGACY,
            dapo=_LEGACY_DAPO,
            one_step_off=_LEGACY_ONE_STEP,
            facts=facts,
            needs_recipe_submodule=False,
        )
    return VersionProfile(
        name="current",
        version=version,
        reward_layout=RewardLayout.CURRENT,
        # Same module path: it now comes from the verl-recipe submodule checked out at recipe/.
        dapo=_LEGACY_DAPO,
        one_step_off=_CURRENT_ONE_STEP,
        facts=facts,
        needs_recipe_submodule=True,
    )
