"""tests/standin/entry/standin_yaml.py reads verl's configs exactly as OmegaConf does: every YAML file of the two main trees,
loaded both ways, gives the same Python objects (values, types, key order), and a duplicate key is refused by both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from omegaconf import _utils
from verl_compose import MAIN_VERSIONS

from standin.entry.standin_yaml import c_yaml_loader


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_every_verl_yaml_reads_the_same_on_libyaml(version: str, verl_trees: Callable[[str], Path]) -> None:
    files = sorted(verl_trees(version).rglob("*.yaml"))
    assert len(files) > 20, files  # 33 in 0.6.1, more in 0.9.1
    python_loader, c_loader = _utils.get_yaml_loader(), c_yaml_loader()
    for path in files:
        text = path.read_text(encoding="utf-8")
        slow, fast = yaml.load(text, Loader=python_loader), yaml.load(text, Loader=c_loader)  # noqa: S506
        assert fast == slow and repr(fast) == repr(slow), path


def test_a_duplicate_key_is_refused_on_libyaml_too() -> None:
    for loader in (_utils.get_yaml_loader(), c_yaml_loader()):
        with pytest.raises(yaml.constructor.ConstructorError, match="found duplicate key a"):
            yaml.load("a: 1\na: 2\n", Loader=loader)  # noqa: S506
