"""Fixtures for tests/verl: stand-in verl trees built from real wheels.

Trees are built by tests/standin/make_tree.py from verl wheels downloaded once into
~/.cache/verl-async-dapo-tests/wheels; tests that need them are marked ``downloads``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from verl_compose import make_tree_module

from standin.entry.standin_yaml import libyaml_for_omegaconf


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "downloads: downloads verl wheels from PyPI once (cached)")


@pytest.fixture(autouse=True)
def _libyaml() -> Iterator[None]:
    """Hydra reads verl's ~150 YAML files per compose: on libyaml (tests/standin/entry/standin_yaml.py), ~4x less CPU."""
    with libyaml_for_omegaconf():
        yield


@pytest.fixture(scope="session")
def verl_trees(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """version -> a stand-in verl root for that release (built on first use)."""
    built: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in built:
            wheel = make_tree_module.wheel_cache(version)
            dest = tmp_path_factory.mktemp(f"verl-{version}")
            built[version] = make_tree_module.make_tree(version, wheel, dest)
        return built[version]

    return get
