"""Version parsing and profile selection."""

from __future__ import annotations

import pytest

from verl_async_dapo.exceptions import VersionError
from verl_async_dapo.settings import Framework, Mode
from verl_async_dapo.verl import PROFILE_NAMES, VerlVersion, profile_for_version


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.6.1", (0, 6, 1)),
        ("v0.9.1", (0, 9, 1)),
        (" 0.9 ", (0, 9, 0)),
        ("0.8.0.dev", (0, 8, 0)),
        ("0.8.0.dev0", (0, 8, 0)),
        ("0.9.1rc1", (0, 9, 1)),
        ("0.7.0+cu124", (0, 7, 0)),
        ("0.7.1.post1", (0, 7, 1)),
    ],
)
def test_parse(text: str, release: tuple[int, int, int]) -> None:
    assert VerlVersion.parse(text).release == release


@pytest.mark.parametrize("text", ["", "abc", "latest", "main", "1", "0.9.x", "0.9.1.2", "0..1", "-0.9.1", "0.9.1 beta"])
def test_garbage_is_rejected_with_the_expected_form(text: str) -> None:
    with pytest.raises(VersionError, match=r"expected MAJOR\.MINOR\[\.PATCH\]"):
        VerlVersion.parse(text)


def test_non_string_is_rejected() -> None:
    with pytest.raises(VersionError, match="must be a string"):
        VerlVersion.parse(0.9)  # type: ignore[arg-type]


def test_ordering_ignores_suffix() -> None:
    assert VerlVersion.parse("0.7.1rc1") == VerlVersion.parse("0.7.1")
    assert VerlVersion.parse("0.7.0") < VerlVersion.parse("0.7.1") < VerlVersion.parse("0.10.0")
    assert str(VerlVersion.parse("v0.9")) == "0.9.0"


@pytest.mark.parametrize(
    ("text", "name", "mode_sync"),
    [("0.6.0", "legacy", True), ("0.6.1", "legacy", True), ("0.7.0", "legacy", False), ("0.7.1", "current", False),
     ("0.8.0", "current", False), ("0.9.1", "current", False), ("0.9.9", "current", False)],
)  # fmt: skip
def test_profile_for_version(text: str, name: str, mode_sync: bool) -> None:
    profile = profile_for_version(text)
    assert profile.name == name and name in PROFILE_NAMES
    assert profile.facts.rollout_mode == ("sync" if mode_sync else "async")


@pytest.mark.parametrize("text", ["0.5.0", "0.4.1", "0.10.0", "1.0.0"])
def test_unsupported_release_is_refused(text: str) -> None:
    with pytest.raises(VersionError, match="is not supported"):
        profile_for_version(text)


def test_legacy_entries() -> None:
    p = profile_for_version("0.6.1")
    assert (p.entry(Mode.DAPO).module, p.entry(Mode.DAPO).config_path) == (
        "recipe.dapo.main_dapo",
        "recipe/dapo/config",
    )
    assert p.entry(Mode.DAPO).config_name(Framework.FSDP) == "dapo_trainer"
    assert p.entry(Mode.DAPO).config_name(Framework.MEGATRON) == "dapo_megatron_trainer"
    one = p.entry(Mode.ONE_STEP_OFF)
    assert one.module == "recipe.one_step_off_policy.main_ppo"
    assert one.config_path == "recipe/one_step_off_policy/config"
    assert one.config_name(Framework.MEGATRON) == "one_step_off_ppo_megatron_trainer"
    assert not p.needs_recipe_submodule


def test_current_entries() -> None:
    p = profile_for_version("0.9.1")
    assert p.entry(Mode.DAPO).module == "recipe.dapo.main_dapo"
    one = p.entry(Mode.ONE_STEP_OFF)
    assert one.module == "verl.experimental.one_step_off_policy.main_ppo"
    assert one.config_path == "verl/experimental/one_step_off_policy/config"
    assert one.config_name(Framework.FSDP) == "one_step_off_ppo_trainer"
    assert p.needs_recipe_submodule


def test_facts_per_release() -> None:
    assert profile_for_version("0.7.1").facts.fsdp_grad_clip_key == "actor_rollout_ref.actor.grad_clip"
    assert profile_for_version("0.8.0").facts.fsdp_grad_clip_key == "actor_rollout_ref.actor.optim.clip_grad"
    assert profile_for_version("0.8.0").facts.megatron_grad_offload
    assert not profile_for_version("0.9.1").facts.megatron_grad_offload
    assert not profile_for_version("0.6.1").facts.megatron_remove_padding
    assert profile_for_version("0.7.0").facts.megatron_remove_padding
