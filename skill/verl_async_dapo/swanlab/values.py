"""The small vocabulary of SwanLab settings: modes, server addresses and API keys, checked.

Each check raises ``SwanlabConfigError`` with the fix in the message. Hosts are refused when the
SwanLab SDK (0.10.3, ``nrc.fmt``) would silently mangle them: it keeps only
``scheme://host[:port]`` (a path is dropped) and loses the brackets of an IPv6 literal.
"""

from __future__ import annotations

import re
from enum import Enum
from urllib.parse import urlsplit

from verl_async_dapo.exceptions import SwanlabConfigError

__all__ = [
    "PUBLIC_API_HOST",
    "PUBLIC_WEB_HOST",
    "SwanlabConfigError",
    "SwanlabMode",
    "check_key_text",
    "normalize_host",
    "parse_mode",
]

PUBLIC_API_HOST = "https://api.swanlab.cn"
PUBLIC_WEB_HOST = "https://swanlab.cn"
_PUBLIC_HOSTNAMES = frozenset({"swanlab.cn", "www.swanlab.cn", "api.swanlab.cn"})
_HOSTNAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_MAX_KEY = 512


class SwanlabMode(str, Enum):
    CLOUD = "cloud"  # the public SwanLab cloud or a self-hosted server
    LOCAL = "local"  # files only, viewed with `swanlab watch`; no network
    DISABLED = "disabled"  # no SwanLab logger at all


# "online" is SwanLab 0.9+'s name for cloud; "offline" (record now, `swanlab sync` later) is refused.
_MODE_ALIASES = {
    "cloud": SwanlabMode.CLOUD,
    "online": SwanlabMode.CLOUD,
    "local": SwanlabMode.LOCAL,
    "disabled": SwanlabMode.DISABLED,
}


def parse_mode(text: str) -> SwanlabMode:
    value = text.strip().lower()
    if value in _MODE_ALIASES:
        return _MODE_ALIASES[value]
    if value == "offline":
        raise SwanlabConfigError(
            "SWANLAB_MODE=offline is not supported here: use 'local' (files only, no network) or 'cloud'"
        )
    raise SwanlabConfigError(f"unknown SwanLab mode {text[:40]!r}: use cloud (or online), local or disabled")


def normalize_host(raw: str) -> str | None:
    """Check a SwanLab server address; return ``scheme://host[:port]``, or None for the public cloud.

    Accepts ``http(s)://host[:port]`` with an optional trailing ``/`` or ``/api`` (the old
    ``SWANLAB_API_HOST`` form). Anything the SDK would silently mangle is refused instead.
    """
    value = raw.strip()
    if not value:
        raise SwanlabConfigError("the SwanLab host is empty")
    if len(value) > 2048:
        raise SwanlabConfigError("the SwanLab host is too long")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise SwanlabConfigError("the SwanLab host may not contain whitespace, NUL or control characters")
    if "://" not in value:
        raise SwanlabConfigError(
            f"the SwanLab host {value[:80]!r} has no scheme: write it as http://host:port or https://host"
        )
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise SwanlabConfigError(f"the SwanLab host must be an http:// or https:// URL, not {scheme or '?'}:")
    if "@" in parts.netloc:
        raise SwanlabConfigError(
            "the SwanLab host may not contain credentials (user:password@); give the API key separately"
        )
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise SwanlabConfigError("the SwanLab host may not contain a query (?) or fragment (#)")
    if parts.path.rstrip("/") not in ("", "/api"):
        raise SwanlabConfigError(
            f"the SwanLab host may not have a path ({parts.path[:60]!r}): the SwanLab SDK keeps only "
            "scheme://host:port, so a server behind a path prefix cannot be used"
        )
    if parts.netloc.startswith("["):
        raise SwanlabConfigError(
            "IPv6 literal hosts are not supported: the SwanLab SDK drops the brackets; use a host name"
        )
    hostname = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        raise SwanlabConfigError(f"the SwanLab host {value[:80]!r} has an invalid port") from None
    if not _HOSTNAME_RE.fullmatch(hostname) or len(hostname) > 253:
        raise SwanlabConfigError(
            f"invalid host name {hostname[:80]!r} in the SwanLab host (ASCII letters, digits, '-' and '.')"
        )
    if port == 0:
        raise SwanlabConfigError("the SwanLab host has port 0")
    if hostname in _PUBLIC_HOSTNAMES:
        return None  # the public cloud, whichever of its names was given
    return f"{scheme}://{hostname}" + (f":{port}" if port is not None else "")


_PLACEHOLDER_WORDS = {"apikey", "api_key", "yourkey", "your_key", "your_api_key", "swanlab_api_key",
                      "changeme", "placeholder", "todo", "none", "null", "xxx"}  # fmt: skip


def looks_like_placeholder(key: str) -> bool:
    """A value copied from an example, not a key: dots, stars, x's, `<...>`, `${...}`, or a word such as YOUR_KEY."""
    folded = key.lower().replace("-", "_")
    if all(ch in ".…*x_-<>" for ch in folded) or (key[:1] in "<[{" and key[-1:] in ">]}") or key.startswith("$"):
        return True
    return folded.strip("<>") in _PLACEHOLDER_WORDS


def check_key_text(key: object) -> str:
    """The stripped key, or SwanlabConfigError (whose message never includes the key)."""
    if not isinstance(key, str):
        raise SwanlabConfigError("the SwanLab API key must be a string")
    key = key.strip()
    if not key:
        raise SwanlabConfigError("the SwanLab API key is empty")
    if len(key) > _MAX_KEY:
        raise SwanlabConfigError(f"the SwanLab API key is longer than {_MAX_KEY} characters")
    if looks_like_placeholder(key):  # the README's literal `SWANLAB_API_KEY=...`, `<your key>`, `xxx`
        raise SwanlabConfigError("SWANLAB_API_KEY looks like a placeholder, not a key: put your own key there "
                                 "(SwanLab → Settings → API Key), or use SWANLAB_MODE=local / disabled")  # fmt: skip
    # It travels as an HTTP header and in .netrc: printable ASCII without spaces only.
    if not all(33 <= ord(ch) <= 126 for ch in key):
        raise SwanlabConfigError("the SwanLab API key may only contain printable ASCII characters without spaces")
    return key
