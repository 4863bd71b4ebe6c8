"""SwanLab setup: one import for the rest of the package.

``values`` checks modes, hosts and keys; ``config`` resolves and stores the setting (env > config file > ask) and turns it into
container environment; ``check`` verifies the key against the server before launch.
(Inside this package ``import swanlab`` still means the SDK: imports are absolute.)
"""

from __future__ import annotations

from verl_async_dapo.swanlab.check import KeyCheck, KeyStatus, check_key
from verl_async_dapo.swanlab.config import (
    CONFIG_FILE_NAME,
    SwanlabConfig,
    default_config_path,
    launch_env,
    load_config_file,
    logger_enabled,
    resolve_configured,
    run_link,
    save_config_file,
    session_config,
)
from verl_async_dapo.swanlab.values import PUBLIC_API_HOST, PUBLIC_WEB_HOST, SwanlabMode, normalize_host, parse_mode

__all__ = [
    "CONFIG_FILE_NAME",
    "PUBLIC_API_HOST",
    "PUBLIC_WEB_HOST",
    "KeyCheck",
    "KeyStatus",
    "SwanlabConfig",
    "SwanlabMode",
    "check_key",
    "default_config_path",
    "launch_env",
    "load_config_file",
    "logger_enabled",
    "normalize_host",
    "parse_mode",
    "resolve_configured",
    "run_link",
    "save_config_file",
    "session_config",
]
