"""The launch environment of a plan: fixed variables, the caller's plain ones, and secret *names* (pure).

A plan is stored, printed and diffed, so it never holds a secret value: variables whose value is a
secret (SwanLab API key, a proxy URL with a password) are listed by name and injected by the
supervisor at launch time. The caller (launching.plan_with) has already split the proxies and SwanLab's
settings into plain values and secrets; verl itself reads SwanLab settings from the environment only
(``SWANLAB_API_KEY``, ``SWANLAB_LOG_DIR``, ``SWANLAB_MODE``; hosts via SwanLab's own
``SWANLAB_API_HOST``/``SWANLAB_WEB_HOST``), never from overrides (verl.md §9). Here every plain value is
checked once more: no credential-looking name, no URL with credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from verl_async_dapo.exceptions import EnvError

# verl.md §11: unbuffered logs, no Ray line folding, full Hydra errors; DAPO's runtime env sets
# TORCH_NCCL_AVOID_RECORD_STREAMS.
BASE_ENV: dict[str, str] = {
    "PYTHONUNBUFFERED": "1",
    "RAY_DEDUP_LOGS": "0",
    "HYDRA_FULL_ERROR": "1",
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
}
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Name parts whose value must travel as a secret, never as a plain value (SWANLAB_API_KEY, HF_TOKEN,
# AWS_SECRET_ACCESS_KEY); whole "_"-separated parts only, so TOKENIZERS_PARALLELISM stays plain.
_SECRET_PARTS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"})
# A secret shorter than this cannot be checked for leaks without false alarms ("1" is in "0.1").
MIN_SECRET_LENGTH = 8


def has_credentials(value: str) -> bool:
    """``http://user:pass@host:3128`` → True (any userinfo in a URL counts as a credential)."""
    if "://" not in value:
        return False
    try:
        return "@" in urlsplit(value.strip()).netloc
    except ValueError:
        return True  # unparsable URL: treat as sensitive rather than print it


def looks_secret(name: str) -> bool:
    return any(part in _SECRET_PARTS for part in name.upper().split("_"))


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise EnvError(f"invalid environment variable name {str(name)[:60]!r}")
    return name


def _check_plain(name: str, value: str) -> None:
    _check_name(name)
    if not isinstance(value, str) or any(ch in value for ch in "\x00\n\r"):
        raise EnvError(f"{name}: value must be a single-line string")
    if looks_secret(name):
        raise EnvError(f"{name} looks like a credential: pass it as a secret env name, not a plain value")
    if has_credentials(value):
        raise EnvError(f"{name} contains a URL with credentials: pass it as a secret env name")


@dataclass(frozen=True)
class LaunchEnv:
    env: dict[str, str]
    secret_names: tuple[str, ...]


def build_launch_env(*, extra_env: Mapping[str, str], secret_env_names: Iterable[str]) -> LaunchEnv:
    env = dict(BASE_ENV)
    secret_names: list[str] = [_check_name(n) for n in secret_env_names]

    def put(name: str, value: str) -> None:
        _check_plain(name, value)
        if name in env and env[name] != value:
            raise EnvError(f"{name} given twice with different values")
        env[name] = value

    for name, value in extra_env.items():
        put(name, value)

    unique_secret_names = tuple(dict.fromkeys(secret_names))
    clash = sorted(set(unique_secret_names) & set(env))
    if clash:
        raise EnvError(f"{', '.join(clash)} given both as a plain value and as a secret name")
    return LaunchEnv(env=env, secret_names=unique_secret_names)
