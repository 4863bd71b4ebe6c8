"""Where our own state and configuration live: the two directories, without pydantic-settings.

Kept apart from ``settings`` (which builds TrainingSettings on pydantic-settings) so that the MCP server's
start-up, which only needs these paths, does not import it (cold start: bench/RESULTS.md).
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "verl-async-dapo"
STATE_DIR_ENV = "VERL_ASYNC_DAPO_HOME"
CONFIG_DIR_ENV = "VERL_ASYNC_DAPO_CONFIG_DIR"


def data_dir() -> Path:
    """Where the state DB and per-run files live (``VERL_ASYNC_DAPO_HOME`` overrides)."""
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def config_dir() -> Path:
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME))
