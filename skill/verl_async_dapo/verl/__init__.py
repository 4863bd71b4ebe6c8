"""Launch plans for verl DAPO / one-step-off training (pure: no docker, no sqlite, no subprocess).

Modules: ``versions`` (parse a verl version), ``profiles`` (entry points and per-release key facts),
``overrides`` (Hydra override rendering and diffs), ``feature_overrides`` (the eight features and
memory tweaks), ``dapo`` (algorithm/data/reward/trainer keys), ``launch_env`` (environment and
secret names), ``plan`` (``build_plan``).
"""

from verl_async_dapo.verl.overrides import Override, override_diff, render_value, split_override
from verl_async_dapo.verl.plan import (
    EntryPlan,
    LaunchPlan,
    PlanRequest,
    assert_no_secret,
    build_plan,
    checkpoint_dir_for,
)
from verl_async_dapo.verl.profiles import (
    PROFILE_NAMES,
    EntryPoint,
    RewardLayout,
    SchemaFacts,
    VersionProfile,
    profile_for_version,
)
from verl_async_dapo.verl.versions import VerlVersion

__all__ = [
    "PROFILE_NAMES",
    "EntryPlan",
    "EntryPoint",
    "LaunchPlan",
    "Override",
    "PlanRequest",
    "RewardLayout",
    "SchemaFacts",
    "VerlVersion",
    "VersionProfile",
    "assert_no_secret",
    "build_plan",
    "checkpoint_dir_for",
    "override_diff",
    "profile_for_version",
    "render_value",
    "split_override",
]
