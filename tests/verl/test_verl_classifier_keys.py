"""The config keys the error classifier names (logs/exception_hints.py) exist in verl's real schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from verl_compose import MAIN_VERSIONS, base_config, key_exists, plan_for

from verl_async_dapo.logs.exception_hints import KEY_ALIASES, config_key_hint
from verl_async_dapo.settings import Framework, Mode

pytestmark = pytest.mark.downloads


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_every_key_the_classifier_names_is_in_the_schema(verl_trees: Any, version: str) -> None:
    tree = verl_trees(version)
    plan = plan_for(tree, version, mode=Mode.DAPO, framework=Framework.FSDP)
    schema = base_config(tree, Path(plan.entry.config_dir), plan.entry.config_name)
    missing = sorted({key for key in KEY_ALIASES.values() if not key_exists(schema, key)})
    assert missing == []
    # A key the message spells out is passed on qualified, as it stands in the schema.
    assert key_exists(schema, config_key_hint("Please increase rollout.gpu_memory_utilization") or "")
