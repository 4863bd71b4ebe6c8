"""Which Ray clusters the user offered, by name: ``ray:<name>`` → the dashboard's base URL.

Two sources, read on every lookup (cheap, and a newly added cluster shows up without a restart):

* ``<config dir>/ray_clusters.json``: ``{"gpu-farm": "http://10.0.0.5:8265", ...}``
* ``VERL_ASYNC_DAPO_RAY_ADDRESS=http://HEAD:8265``: the cluster named ``default`` (wins over a
  ``default`` entry in the file, like every env-over-file setting of this tool).

Addresses are the Ray dashboard (Jobs REST API, port 8265 by default), http or https only. A URL
with a user or password is refused: target names and addresses appear in listings and logs.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError
from verl_async_dapo.paths import config_dir

RAY_PREFIX = "ray:"
ADDRESS_ENV = "VERL_ASYNC_DAPO_RAY_ADDRESS"
ENV_CLUSTER_NAME = "default"
CONFIG_FILE_NAME = "ray_clusters.json"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_MAX_CONFIG_BYTES = 64 << 10


def is_ray_target(name: str) -> bool:
    return isinstance(name, str) and name.startswith(RAY_PREFIX)


def cluster_name_of(target_name: str) -> str:
    """``ray:gpu-farm`` → ``gpu-farm`` (validated)."""
    if not is_ray_target(target_name):
        raise InvalidTargetInput(f"{str(target_name)[:80]!r} is not a Ray target (expected ray:<name>)")
    name = target_name[len(RAY_PREFIX) :]
    if not _NAME_RE.fullmatch(name):
        raise InvalidTargetInput(
            f"{name[:80]!r} is not a valid Ray cluster name: letters, digits, '.', '_', '-' (max 64), "
            "starting with a letter or digit"
        )
    return name


def normalise_address(address: str) -> str:
    """A dashboard base URL without trailing slash; refuses anything but plain http(s)://host[:port][/prefix]."""
    if not isinstance(address, str) or not address.strip():
        raise InvalidTargetInput("a Ray dashboard address must be a non-empty string like http://HEAD:8265")
    text = address.strip()
    if any(ch in text for ch in "\x00\r\n\t "):
        raise InvalidTargetInput("a Ray dashboard address may not contain whitespace or control characters")
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise InvalidTargetInput(f"{text[:80]!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidTargetInput(f"Ray dashboard address must start with http:// or https://, got {text[:80]!r}")
    if not parts.hostname:
        raise InvalidTargetInput(f"Ray dashboard address has no host: {text[:80]!r}")
    if parts.username is not None or parts.password is not None:
        # Never echo the URL here: it holds a credential.
        raise InvalidTargetInput("Ray dashboard address may not contain a user or password (user:pass@host)")
    if parts.query or parts.fragment:
        raise InvalidTargetInput(f"Ray dashboard address may not have a query or fragment: {text[:80]!r}")
    netloc = parts.hostname if port is None else f"{parts.hostname}:{port}"
    if ":" in parts.hostname:  # IPv6 literal: keep its brackets
        netloc = f"[{parts.hostname}]" if port is None else f"[{parts.hostname}]:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def config_file(base: Path | None = None) -> Path:
    return (base or config_dir()) / CONFIG_FILE_NAME


def _read_file(path: Path) -> dict[str, str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise TargetError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(raw) > _MAX_CONFIG_BYTES:
        raise TargetError(f"{path} is larger than {_MAX_CONFIG_BYTES} bytes; expected a small JSON object")
    try:
        data = json.loads(raw.decode("utf-8") or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TargetError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise TargetError(f'{path} must be a JSON object of name → address, e.g. {{"farm": "http://HEAD:8265"}}')
    return data


def configured_clusters(env: Mapping[str, str] | None = None, base: Path | None = None) -> dict[str, str]:
    """name → normalised address, from the config file then the environment. Bad entries raise TargetError."""
    environ = os.environ if env is None else env
    raw = _read_file(config_file(base))
    if environ.get(ADDRESS_ENV):
        raw[ENV_CLUSTER_NAME] = environ[ADDRESS_ENV]
    clusters: dict[str, str] = {}
    for name, address in raw.items():
        if not _NAME_RE.fullmatch(name):
            raise TargetError(f"{config_file(base)}: {name[:60]!r} is not a valid Ray cluster name")
        try:
            clusters[name] = normalise_address(address)
        except InvalidTargetInput as exc:
            where = ADDRESS_ENV if name == ENV_CLUSTER_NAME and environ.get(ADDRESS_ENV) else str(config_file(base))
            raise TargetError(f"{where}: cluster {name!r}: {exc}") from None
    return clusters


def resolve(target_name: str, env: Mapping[str, str] | None = None, base: Path | None = None) -> str:
    """``ray:<name>`` → its dashboard address; TargetError naming both config sources when unknown."""
    name = cluster_name_of(target_name)
    clusters = configured_clusters(env, base)
    if name not in clusters:
        known = ", ".join(f"ray:{n}" for n in sorted(clusters)) or "none"
        raise TargetError(
            f"no Ray cluster named {name!r} (configured: {known}); add it to {config_file(base)} as "
            f'{{"{name}": "http://HEAD:8265"}} or set {ADDRESS_ENV} (that one is ray:{ENV_CLUSTER_NAME})'
        )
    return clusters[name]
