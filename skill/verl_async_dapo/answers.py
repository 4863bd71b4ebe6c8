"""The four answers of a session as stored (pydantic), and validation of what users type.

Stored answers never hold a secret: a proxy URL with a password or a SwanLab key is kept in
the secret store and only its reference (plus a redacted display form) is stored here.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict

from verl_async_dapo.features import FeatureChoice, parse_feature_names


class ContainerAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    kind: str  # TargetKind value: docker / host
    created: bool = False  # created by us in this session
    allow_shared_gpus: bool = False  # the user accepted sharing GPUs with another active run
    allow_no_gpus: bool = False  # the user accepted a target without GPUs (preflight then only warns)
    # A container created by us: the privileges beyond the confined default the user approved (privileges.py).
    privileges: tuple[str, ...] = ()


class ProxyAnswer(BaseModel):
    """Proxy values for the display (passwords masked) and the secret ref holding the real ones."""

    model_config = ConfigDict(frozen=True)

    http_proxy: str | None = None
    https_proxy: str | None = None
    no_proxy: str | None = None
    secret_ref: str | None = None  # set when any URL carries credentials

    @property
    def is_none(self) -> bool:
        return not (self.http_proxy or self.https_proxy or self.no_proxy)


class FeaturesAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    enabled: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()

    @classmethod
    def from_names(cls, names: list[str]) -> FeaturesAnswer:
        choice = parse_feature_names(names)
        return cls(enabled=tuple(sorted(f.value for f in choice.enabled)),
                   disabled=tuple(sorted(f.value for f in choice.disabled)))  # fmt: skip

    def choice(self) -> FeatureChoice:
        return parse_feature_names([*self.enabled, *("no_" + name for name in self.disabled)])


class SwanlabAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    mode: str  # cloud / local / disabled
    host: str | None = None
    key_ref: str | None = None
    log_dir: str | None = None
    source: str = "session"  # env / config_file / session
    key_check: str | None = None  # ok / skipped / ... (what the last check said)


_NO_ANSWER_WORDS = frozenset({"", "none", "no", "无", "不需要", "n/a"})
_HOSTLIST_RE = re.compile(r"^[A-Za-z0-9.*_:/\[\]-]+$")


def normalise_proxy_value(value: str | None, *, field: str) -> str | None:
    """Validate one proxy URL; "无"/"none"/empty mean no proxy. Raises ValueError with a fix."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() in _NO_ANSWER_WORDS:
        return None
    if len(text) > 2048 or any(ch in text for ch in "\x00\r\n\t ") or text.startswith("-"):
        raise ValueError(f"{field}: not a proxy URL (no spaces, control characters or leading '-'); "
                         "example: http://proxy.example:8080")  # fmt: skip
    parts = urlsplit(text)
    if parts.scheme not in {"http", "https", "socks5", "socks5h"} or not parts.hostname:
        raise ValueError(f"{field}: use a URL like http://host:port (schemes http, https, socks5)")
    try:
        _ = parts.port
    except ValueError:
        raise ValueError(f"{field}: the port must be a number from 1 to 65535") from None
    if not re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+", parts.netloc.rsplit("@", 1)[-1]):
        raise ValueError(f"{field}: the host part has characters a host name cannot have")
    if parts.path not in {"", "/"} or parts.query or parts.fragment:
        raise ValueError(f"{field}: a proxy URL has no path, query or fragment")
    return text


def normalise_no_proxy(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if text.lower() in _NO_ANSWER_WORDS:
        return None
    items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if len(item) > 255 or not _HOSTLIST_RE.fullmatch(item) or item.startswith("-"):
            raise ValueError(f"no_proxy: {item[:40]!r} is not a host, domain, IP or CIDR")
    return ",".join(items) or None


def has_credentials(url: str | None) -> bool:
    return bool(url) and "@" in urlsplit(url or "").netloc


def mask_url(url: str | None) -> str | None:
    """http://user:secret@host:3128 → http://user:***@host:3128 (for display and storage).

    A credential given as the user name alone (``http://TOKEN@proxy``, how some proxies take a token) is the
    secret itself: masked whole, ``http://***@proxy`` (issue 20)."""
    if not url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, hostport = parts.netloc.rsplit("@", 1)
    user, has_password, _ = userinfo.partition(":")
    shown = f"{user}:***" if has_password else "***"
    return urlunsplit((parts.scheme, f"{shown}@{hostport}", parts.path, parts.query, parts.fragment))


PROXY_ENV_NAMES = {
    "http_proxy": ("http_proxy", "HTTP_PROXY"),
    "https_proxy": ("https_proxy", "HTTPS_PROXY"),
    "no_proxy": ("no_proxy", "NO_PROXY"),
}


def proxy_env(values: dict[str, str | None]) -> tuple[dict[str, str], dict[str, str]]:
    """Split proxy settings into (plain env, secret env): URLs with credentials are secrets."""
    plain: dict[str, str] = {}
    secret: dict[str, str] = {}
    for key, value in values.items():
        if not value:
            continue
        bucket = secret if has_credentials(value) else plain
        for name in PROXY_ENV_NAMES[key]:
            bucket[name] = value
    return plain, secret
