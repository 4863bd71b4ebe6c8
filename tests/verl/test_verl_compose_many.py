"""The launch check composes several override sets in one process, sharing the YAML files Hydra parsed
(plans/prelaunch.py SHARE_PARSED_FILES): each set must compose exactly as it would alone, failures included."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.config_repository import ConfigRepository
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from test_verl_compose_matrix import STEPS
from verl_compose import compose_full, make_request, make_settings

from verl_async_dapo.plans.prelaunch import SHARE_PARSED_FILES
from verl_async_dapo.settings import Framework, Mode
from verl_async_dapo.verl import build_plan

pytestmark = pytest.mark.downloads

STALE = "actor_rollout_ref.actor.no_such_key=1"


def _outcome(compose_one: Any) -> str:
    """A set's composed config as YAML (unresolved), or its error's message chain."""
    try:
        return OmegaConf.to_yaml(compose_one(), resolve=False)
    except Exception as exc:
        messages = []
        cause: BaseException | None = exc
        while cause is not None:
            messages.append(str(cause).strip())
            cause = cause.__cause__
        return "error: " + "\n".join(messages)


@pytest.fixture
def file_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every YAML file Hydra's repository loads (below its per-compose cache)."""
    loads: list[str] = []
    load = ConfigRepository.load_config

    def counted(self: ConfigRepository, config_path: str) -> Any:
        loads.append(config_path)
        return load(self, config_path)

    monkeypatch.setattr(ConfigRepository, "load_config", counted)
    yield loads


@pytest.mark.parametrize(("version", "mode", "framework"), [
    ("0.9.1", Mode.DAPO, Framework.FSDP), ("0.6.1", Mode.ONE_STEP_OFF, Framework.MEGATRON),
])  # fmt: skip
def test_each_set_composes_as_it_would_alone(verl_trees: Any, file_loads: list[str], version: str, mode: Mode,
                                            framework: Framework) -> None:  # fmt: skip
    tree: Path = verl_trees(version)
    settings = make_settings(tree, mode=mode, framework=framework, rollout_gpus=2, trainer_gpus=6)
    plans = [build_plan(make_request(settings, version, features=c.features, tweaks=c.tweaks)) for c in STEPS.values()]
    entry = plans[0].entry
    sets = [list(p.overrides) for p in plans]
    # A stale key between good sets, and a set that moves hydra's search path (other files behind the same names).
    sets[2:2] = [[*sets[0], STALE]]
    sets.append([*sets[0], "hydra.searchpath=[]"])

    alone = [_outcome(lambda s=s: compose_full(tree, Path(entry.config_dir), entry.config_name, s)) for s in sets]
    loads_alone = len(file_loads)
    file_loads.clear()

    scope: dict[str, Any] = {}
    exec(SHARE_PARSED_FILES, scope)  # noqa: S102 - the product's own script text
    GlobalHydra.instance().clear()
    cwd = Path.cwd()
    try:
        os.chdir(tree)
        with initialize_config_dir(config_dir=entry.config_dir, version_base=None):
            scope["share_parsed_files"]()
            together = [_outcome(lambda s=s: compose(config_name=entry.config_name, overrides=s)) for s in sets]
    finally:
        os.chdir(cwd)
        GlobalHydra.instance().clear()

    assert together == alone
    assert alone[2].startswith("error: ") and "no_such_key" in alone[2]
    assert alone[-1].startswith("error: ")
    assert not any(o.startswith("error: ") for i, o in enumerate(alone) if i not in (2, len(sets) - 1))
    # The sharing took place: the files were parsed for the first set (and again under the moved search path).
    assert len(file_loads) < loads_alone / 3, (len(file_loads), loads_alone)
