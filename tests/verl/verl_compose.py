"""Helpers for composing launch plans against real verl config trees (imported by tests/verl).

Composition runs in-process with Hydra's compose API: ``hydra.searchpath: file://verl/trainer/config``
in the recipe configs is relative to the CWD, so each compose chdirs into the tree root and back.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from verl_async_dapo.features import FeatureChoice, FeatureSet
from verl_async_dapo.policy import AttemptConfig, MemoryTweaks
from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.verl import LaunchPlan, PlanRequest, build_plan

ROOT = Path(__file__).resolve().parents[2]
# The two releases every combination is composed against; the others get the schema checks.
MAIN_VERSIONS = ("0.6.1", "0.9.1")
ALL_VERSIONS = ("0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.1")


def _load_make_tree() -> ModuleType:
    path = ROOT / "tests" / "standin" / "make_tree.py"
    spec = importlib.util.spec_from_file_location("_verl_standin_make_tree", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


make_tree_module = _load_make_tree()


@contextmanager
def _in_dir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


_BASE: dict[tuple[str, str, str], DictConfig] = {}
_PARSER = OverridesParser.create()


def compose_full(tree: Path, config_dir: Path, config_name: str, overrides: Sequence[str]) -> DictConfig:
    """Hydra's compose API, as ``python3 -m <entry> --config-path=<dir> --config-name=<name> <overrides>``."""
    GlobalHydra.instance().clear()
    try:
        with _in_dir(tree), initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return compose(config_name=config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def compose_in_tree(tree: Path, config_dir: Path, config_name: str, overrides: Sequence[str]) -> DictConfig:
    """Same result as :func:`compose_full`, ~10x faster for many plans against one config.

    Hydra composes the defaults list into a struct config and then applies the value overrides
    with ``ConfigLoaderImpl._apply_overrides_to_config`` (config_loader_impl.py). Plans carry only
    value overrides (no config-group choices), so the base composition is cached and that same
    Hydra function is applied to a copy. test_verl_schema checks equality with :func:`compose_full`.
    """
    key = (str(tree), str(config_dir), config_name)
    if key not in _BASE:
        _BASE[key] = compose_full(tree, config_dir, config_name, [])
    parsed = _PARSER.parse_overrides(list(overrides))
    cfg = copy.deepcopy(_BASE[key])
    ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
    return cfg


def base_config(tree: Path, config_dir: Path, config_name: str) -> DictConfig:
    """The composed config without overrides (the release's schema for this entry)."""
    return compose_in_tree(tree, config_dir, config_name, [])


def compose_plan(tree: Path, plan: LaunchPlan) -> DictConfig:
    assert Path(plan.entry.cwd) == tree, "plans under test must use the tree as VERL_HOME"
    return compose_in_tree(tree, Path(plan.entry.config_dir), plan.entry.config_name, plan.overrides)


def select(cfg: DictConfig, key: str) -> Any:
    """The resolved value at ``key``; fails the test if the key does not exist."""
    assert key_exists(cfg, key), f"{key} missing from the composed config"
    return OmegaConf.select(cfg, key)


_CONTAINERS: dict[int, tuple[DictConfig, Any]] = {}


def key_exists(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` exists (unresolved: a key under an interpolated node does not count)."""
    cached = _CONTAINERS.get(id(cfg))
    if cached is None or cached[0] is not cfg:
        cached = (cfg, OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False))
        _CONTAINERS[id(cfg)] = cached
    node: Any = cached[1]
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def make_settings(tree: Path | str, **values: Any) -> TrainingSettings:
    return TrainingSettings(verl_home=str(tree), **values)


def make_request(
    settings: TrainingSettings,
    version: str,
    *,
    features: FeatureSet | None = None,
    tweaks: MemoryTweaks | None = None,
    explicit: FeatureChoice | None = None,
    **extra: Any,
) -> PlanRequest:
    feature_set = features or FeatureSet(explicit=explicit or FeatureChoice())
    attempt = AttemptConfig(features=feature_set, tweaks=tweaks or MemoryTweaks())
    extra.setdefault("run_id", "run-0001")
    return PlanRequest(settings=settings, attempt=attempt, verl_version=version, **extra)


def plan_for(tree: Path | str, version: str, **kwargs: Any) -> LaunchPlan:
    settings_values = {k: kwargs.pop(k) for k in list(kwargs) if k in TrainingSettings.model_fields}
    return build_plan(make_request(make_settings(tree, **settings_values), version, **kwargs))
