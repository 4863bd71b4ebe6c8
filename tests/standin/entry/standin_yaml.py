"""OmegaConf's YAML loader on libyaml's C parser: for the verl stand-in's own Hydra, and for the tests that compose
verl's configs in the test process (tests/harness/inprocess.py, tests/verl).

verl's config tree is ~150 YAML files and every Hydra compose reads them again; with PyYAML's pure-Python scanner
one compose costs ~0.5 s of CPU (profiled: most of it in ``yaml.scanner``), and the suite composes hundreds. The
loader here is OmegaConf's own (``omegaconf._utils.get_yaml_loader``) with the C parser underneath: the same implicit
resolvers (its float rule, no timestamps), the same constructors, the same duplicate-key refusal.
tests/verl/test_verl_fast_yaml.py checks that it reads every YAML file of the verl trees exactly as OmegaConf does.
Only the test double and the test process use it: the product composes inside the target, with verl's own Hydra.
Self-contained (yaml and omegaconf only): the stand-in trees carry it as ``verl_standin/standin_yaml.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def c_yaml_loader() -> Any:
    import yaml
    from omegaconf import _utils

    python_loader = _utils.get_yaml_loader()

    class OmegaConfCLoader(yaml.CSafeLoader):  # type: ignore[misc, name-defined]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            keys: set[str] = set()
            for key_node, _ in node.value:
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                            f"found duplicate key {key_node.value}", key_node.start_mark)
                keys.add(key_node.value)
            return super().construct_mapping(node, deep=deep)

    OmegaConfCLoader.yaml_implicit_resolvers = python_loader.yaml_implicit_resolvers
    OmegaConfCLoader.yaml_constructors = dict(python_loader.yaml_constructors)
    return OmegaConfCLoader


@contextlib.contextmanager
def libyaml_for_omegaconf() -> Iterator[None]:
    """While open, OmegaConf (so Hydra) loads YAML with ``c_yaml_loader``; the original loader afterwards."""
    from omegaconf import _utils

    saved = _utils.get_yaml_loader
    loader = c_yaml_loader()
    _utils.get_yaml_loader = lambda: loader
    try:
        yield
    finally:
        _utils.get_yaml_loader = saved


def use_libyaml_for_omegaconf() -> None:
    """``libyaml_for_omegaconf`` for the rest of the process, with no way back: the stand-in's own process.

    (Entering the context manager and dropping it is not the same: the dropped generator is closed at once and its
    ``finally`` puts the pure-Python loader back. The stand-in did exactly that until 2026-12-04.)"""
    from omegaconf import _utils

    loader = c_yaml_loader()
    _utils.get_yaml_loader = lambda: loader


def compose_once_under_hydra_main() -> None:
    """@hydra.main composes the config twice: once only to read ``hydra.mode`` (``Hydra.get_mode``), once to run.
    verl's configs never set ``hydra.mode`` (so that first compose answers None, as it does when composing fails,
    and Hydra then runs in RUN mode); the stand-in skips it unless an override names ``hydra.mode``. The run's
    compose, its errors and its messages are Hydra's own, unchanged; a stand-in process on the host costs ~0.65 instead
    of ~0.81 s of CPU (best of 5 each, 2026-12-04)."""
    try:
        from hydra._internal.hydra import Hydra
    except ImportError:  # another Hydra layout: compose as usual
        return
    read_mode = Hydra.get_mode

    def get_mode(self: Any, config_name: Any, overrides: Any) -> Any:
        if any("hydra.mode" in str(o).split("=", 1)[0] for o in overrides):
            return read_mode(self, config_name, overrides)
        return None

    Hydra.get_mode = get_mode  # type: ignore[method-assign]
