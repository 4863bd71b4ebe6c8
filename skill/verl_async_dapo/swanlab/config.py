"""Where SwanLab is configured, and how that reaches verl inside the container.

Resolution order (as in the original skill): environment > config file > ask the user.
verl (``verl/utils/tracking.py``) reads only ``SWANLAB_API_KEY``, ``SWANLAB_LOG_DIR`` and
``SWANLAB_MODE`` and passes no host to ``swanlab.login``; a self-hosted server therefore has to
reach the SDK through its own ``SWANLAB_API_HOST`` / ``SWANLAB_WEB_HOST`` variables. The key goes
only into the secret half of :func:`launch_env` (never argv, never a Hydra override: verl prints
and uploads its whole config).

Facts about the SDK (checked against swanlab 0.10.3):
- hosts are reduced to ``scheme://host[:port]`` (``nrc.fmt``): a path such as ``/api`` is dropped
  by 0.10, while 0.7 expects ``SWANLAB_API_HOST`` to end in ``/api``, so ``host + "/api"`` works
  for both; with only ``SWANLAB_WEB_HOST`` set, 0.10 talks to the *public* API host, so both are set;
- an IPv6 literal loses its brackets in ``nrc.fmt`` (``http://::1:8000``), so it can't be used;
- modes: ``online|local|offline|disabled``, and ``cloud`` is mapped to ``online`` (0.7 only knew
  ``cloud``), so ``cloud`` is what we pass;
- the public cloud is ``https://api.swanlab.cn`` (API) and ``https://swanlab.cn`` (web).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError, field_validator, model_validator

from verl_async_dapo.exceptions import InsecureFileError, SecretStoreError, SwanlabConfigError
from verl_async_dapo.paths import config_dir
from verl_async_dapo.secret_store import ensure_private_dir, read_private_file, write_private_file
from verl_async_dapo.settings import check_path_text
from verl_async_dapo.swanlab.values import (
    PUBLIC_API_HOST,
    PUBLIC_WEB_HOST,
    SwanlabMode,
    check_key_text,
    normalize_host,
    parse_mode,
)

CONFIG_FILE_NAME = "swanlab.json"
# verl's default SWANLAB_LOG_DIR, relative to the trainer's working directory in the container.
VERL_DEFAULT_LOG_DIR = "swanlog"
# SwanLab prints its greeting through rich, which wraps at 80 columns when stdout is not a
# terminal (a log file): "View run <name> at <url>" then spans two or three lines and the URL can
# be folded mid-way. A wide COLUMNS keeps it on one line for the log parser.
GREETING_COLUMNS = "300"


__all__ = [
    "CONFIG_FILE_NAME",
    "PUBLIC_API_HOST",
    "PUBLIC_WEB_HOST",
    "SwanlabConfig",
    "SwanlabConfigError",
    "SwanlabMode",
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


class SwanlabConfig(BaseModel):
    """A complete SwanLab setting. The key is a SecretStr: repr, str and dumps show ``**********``."""

    # hide_input_in_errors: a rejected key must not be echoed back inside a ValidationError.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    mode: SwanlabMode
    host: str | None = None  # None = the public SwanLab cloud
    api_key: SecretStr | None = None
    log_dir: str | None = None
    source: Literal["env", "config_file", "session"] = "session"

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Any:
        return parse_mode(value) if isinstance(value, str) else value

    @field_validator("host", mode="before")
    @classmethod
    def _host(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return normalize_host(value) if isinstance(value, str) else value

    @field_validator("api_key", mode="before")
    @classmethod
    def _key(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        # Raises SwanlabConfigError (not a ValueError), so the key never lands in a ValidationError.
        return SecretStr(check_key_text(value))

    @field_validator("log_dir", mode="before")
    @classmethod
    def _log_dir(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, str):
            check_path_text(value)
        return value

    @model_validator(mode="after")
    def _cloud_needs_key(self) -> SwanlabConfig:
        if self.mode is SwanlabMode.CLOUD and self.api_key is None:
            raise SwanlabConfigError(
                "SwanLab mode cloud needs an API key (SWANLAB_API_KEY); or choose mode local or disabled"
            )
        return self

    @property
    def api_host(self) -> str:
        """The API origin (no ``/api``): the SDK posts to ``{api_host}/api/...``."""
        return self.host or PUBLIC_API_HOST

    @property
    def web_host(self) -> str:
        return self.host or PUBLIC_WEB_HOST

    @property
    def login_url(self) -> str:
        return f"{self.api_host}/api/login/api_key"

    def describe(self) -> str:
        """One line for the user, e.g. ``cloud at http://10.0.0.5:8000 (key set; from env)``."""
        where = f" at {self.web_host}" if self.mode is SwanlabMode.CLOUD else ""
        key = "; key set" if self.api_key is not None else ""
        log_dir = f"; log dir {self.log_dir}" if self.log_dir else ""
        return f"{self.mode.value}{where}{key}{log_dir} (from {self.source})"


def _errors_text(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        message = str(item.get("msg", "invalid value")).removeprefix("Value error, ")
        loc = ".".join(str(p) for p in item.get("loc", ()))
        parts.append(f"{loc}: {message}" if loc else message)
    return "; ".join(parts)


def _build(source: Literal["env", "config_file", "session"], where: str, **fields: Any) -> SwanlabConfig:
    try:
        return SwanlabConfig(source=source, **fields)
    except ValidationError as exc:
        raise SwanlabConfigError(f"invalid SwanLab settings in {where}: {_errors_text(exc)}") from None
    except SwanlabConfigError as exc:
        raise SwanlabConfigError(f"invalid SwanLab settings in {where}: {exc}") from None


def _env_value(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value.strip() or None if value else None


# Checked in this order; the first is the original skill's own variable.
_HOST_VARS = ("SWANLAB_HOST", "SWANLAB_API_HOST", "SWANLAB_WEB_HOST")


def _host_from_env(env: Mapping[str, str]) -> tuple[bool, str | None]:
    """(whether the environment names a server, that server or None for the public cloud)."""
    found: dict[str, str | None] = {}
    for name in _HOST_VARS:
        raw = _env_value(env, name)
        if raw is None:
            continue
        try:
            found[name] = normalize_host(raw)
        except SwanlabConfigError as exc:
            raise SwanlabConfigError(f"{name}: {exc}") from None
    if not found:
        return False, None
    if len(set(found.values())) > 1:
        listing = ", ".join(f"{name}={value or PUBLIC_API_HOST}" for name, value in found.items())
        raise SwanlabConfigError(
            f"the environment names different SwanLab servers ({listing}); unset all but one "
            "(this tool uses one origin for both the API and the web pages)"
        )
    return True, next(iter(found.values()))


def default_config_path() -> Path:
    return config_dir() / CONFIG_FILE_NAME


def resolve_configured(env: Mapping[str, str], config_file: Path | None = None) -> SwanlabConfig | None:
    """The SwanLab setting already in place, or None when the user must be asked.

    The environment wins when it is complete on its own (mode local/disabled, or a key). Otherwise
    the config file is used, with any host/mode/log dir from the environment laid over it; the
    file's key is kept only if the server is unchanged — like the SDK, a key is never reused for a
    different host (that would send it to the wrong server).
    """
    config_file = default_config_path() if config_file is None else config_file
    host_set, host = _host_from_env(env)
    key = _env_value(env, "SWANLAB_API_KEY")
    mode_text = _env_value(env, "SWANLAB_MODE")
    log_dir = _env_value(env, "SWANLAB_LOG_DIR")
    try:
        env_mode = parse_mode(mode_text) if mode_text else None
    except SwanlabConfigError as exc:
        raise SwanlabConfigError(f"SWANLAB_MODE: {exc}") from None
    mode = env_mode or (SwanlabMode.CLOUD if key else None)
    if mode in (SwanlabMode.LOCAL, SwanlabMode.DISABLED) or (mode is SwanlabMode.CLOUD and key):
        return _build("env", "the environment", mode=mode, host=host, api_key=key, log_dir=log_dir)

    saved = load_config_file(config_file)
    if saved is None:
        return None
    merged_host = host if host_set else saved.host
    merged_key = saved.api_key if merged_host == saved.host else None
    merged_mode = env_mode or saved.mode
    if merged_mode is SwanlabMode.CLOUD and merged_key is None:
        return None
    return _build(
        "config_file",
        f"{config_file} (with the environment)",
        mode=merged_mode,
        host=merged_host,
        api_key=merged_key,
        log_dir=log_dir or saved.log_dir,
    )


def session_config(
    *, mode: str = "cloud", host: str | None = None, api_key: str | None = None, log_dir: str | None = None
) -> SwanlabConfig:
    """The user's answer to the SwanLab question, checked; SwanlabConfigError says what to fix."""
    return _build("session", "the answer", mode=mode, host=host, api_key=api_key, log_dir=log_dir)


class _ConfigFile(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    version: Literal[1] = 1
    mode: str
    host: str | None = None
    api_key: str | None = None
    log_dir: str | None = None


def load_config_file(path: Path) -> SwanlabConfig | None:
    """Read the saved setting; None if there is no file. Refuses a file other users can read."""
    try:
        raw = read_private_file(path, what="SwanLab config file")
    except FileNotFoundError:
        return None
    except InsecureFileError as exc:
        raise SwanlabConfigError(str(exc)) from None
    except (SecretStoreError, OSError) as exc:
        raise SwanlabConfigError(f"cannot read SwanLab config file {path}: {exc}") from None
    hint = f"fix it, or delete {path} and configure SwanLab again"
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        detail = f" ({exc.msg}, line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise SwanlabConfigError(f"SwanLab config file {path} is not valid JSON{detail}: {hint}") from None
    try:
        stored = _ConfigFile.model_validate(data)
    except ValidationError as exc:
        raise SwanlabConfigError(f"SwanLab config file {path} is malformed ({_errors_text(exc)}): {hint}") from None
    return _build(
        "config_file",
        str(path),
        mode=stored.mode,
        host=stored.host,
        api_key=stored.api_key,
        log_dir=stored.log_dir,
    )


def save_config_file(cfg: SwanlabConfig, path: Path | None = None) -> Path:
    """Write ``cfg`` (key included) to an owner-only (0600) file in an 0700 directory."""
    path = default_config_path() if path is None else path
    ensure_private_dir(path.parent)
    data = {
        "version": 1,
        "mode": cfg.mode.value,
        "host": cfg.host,
        "api_key": cfg.api_key.get_secret_value() if cfg.api_key is not None else None,
        "log_dir": cfg.log_dir,
    }
    write_private_file(path, (json.dumps(data, indent=2) + "\n").encode())
    return path


def launch_env(cfg: SwanlabConfig) -> tuple[dict[str, str], dict[str, str]]:
    """(non-secret env, secret env) for the training process in the container.

    The key is only in the second dict, and only in cloud mode (local runs need no key).
    """
    public: dict[str, str] = {"SWANLAB_MODE": cfg.mode.value}
    secret: dict[str, str] = {}
    if cfg.log_dir:
        public["SWANLAB_LOG_DIR"] = cfg.log_dir
    if cfg.mode is not SwanlabMode.DISABLED:
        public["COLUMNS"] = GREETING_COLUMNS
    if cfg.mode is SwanlabMode.CLOUD:
        # Set even for the public cloud: a SWANLAB_API_HOST baked into the image must not be able
        # to redirect the key to another server.
        public["SWANLAB_API_HOST"] = f"{cfg.api_host}/api"
        public["SWANLAB_WEB_HOST"] = cfg.web_host
        assert cfg.api_key is not None  # guaranteed by the model
        secret["SWANLAB_API_KEY"] = cfg.api_key.get_secret_value()
    return public, secret


def logger_enabled(cfg: SwanlabConfig | None) -> bool:
    """Whether ``trainer.logger`` gets ``swanlab`` (not when disabled or unconfigured)."""
    return cfg is not None and cfg.mode is not SwanlabMode.DISABLED


def run_link(cfg: SwanlabConfig, parsed_url: str | None) -> str | None:
    """What to show the user to watch the run.

    Cloud: the run URL parsed from SwanLab's greeting in the training log (it can't be built in
    advance: the run id is assigned by the server). Local: the ``swanlab watch`` command to run
    in the container (needs ``pip install 'swanlab[dashboard]'`` there). Disabled: None.
    """
    if cfg.mode is SwanlabMode.DISABLED:
        return None
    if cfg.mode is SwanlabMode.LOCAL:
        return f"swanlab watch {shlex.quote(cfg.log_dir or VERL_DEFAULT_LOG_DIR)}"
    if parsed_url is None:
        return None
    url = parsed_url.strip()
    if (
        not url
        or len(url) > 2048
        or any(ch.isspace() or ord(ch) < 32 for ch in url)
        or urlsplit(url).scheme not in ("http", "https")
        or not urlsplit(url).hostname
    ):
        return None
    return url
