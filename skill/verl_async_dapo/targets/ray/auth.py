"""Where a Ray cluster's authentication token comes from, in Ray's own precedence (pure but for one file read).

Ray >= 2.52 can require a token on every dashboard request (``RAY_AUTH_MODE=token`` on the cluster;
docs.ray.io "Ray token authentication"): ``Authorization: Bearer <token>``, else HTTP 401, or 403
for a wrong token. Clients find the token exactly as Ray's own CLI does, so a machine already set up
for ``ray job submit`` works here unchanged:

1. ``RAY_AUTH_TOKEN`` (when non-empty): the token itself;
2. ``RAY_AUTH_TOKEN_PATH``: a file holding it. Set but unreadable or empty is a misconfiguration and
   is reported, never silently replaced by the default file (that would send a different token);
3. ``~/.ray/auth_token`` when it exists.

The token is a secret: it is never part of a message, a repr, argv or anything stored. Messages name
its *source* only (``RayToken.source``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from verl_async_dapo.exceptions import TargetError

TOKEN_ENV = "RAY_AUTH_TOKEN"  # noqa: S105 (a variable name, not a token)
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"  # noqa: S105
DEFAULT_TOKEN_FILE = Path(".ray") / "auth_token"  # under the home directory
MAX_TOKEN_FILE_BYTES = 64 << 10  # Ray's tokens are short; anything big is the wrong file


class RayTokenError(TargetError):
    """The token's configured source cannot be used (never holds the token)."""


@dataclass(frozen=True)
class RayToken:
    value: str = field(repr=False)  # never in a repr, a log line or a message
    source: str  # "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH=/x" or the default file's path

    def __str__(self) -> str:
        return f"<Ray token from {self.source}>"


def default_token_file(home: Path | None = None) -> Path:
    return (home or Path.home()) / DEFAULT_TOKEN_FILE


def _read_token_file(path: Path, source: str, *, missing_ok: bool = False) -> str:
    """The file's stripped content ("" when absent and ``missing_ok``); RayTokenError naming ``source``
    when it cannot be used."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        if missing_ok and isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            return ""
        raise RayTokenError(f"{source}: cannot read the Ray token file: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise RayTokenError(f"{source}: larger than {MAX_TOKEN_FILE_BYTES} bytes; not a Ray token file")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise RayTokenError(f"{source}: not a text file; expected the token printed by `ray get-auth-token`") from None
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        # A header value cannot hold a newline; several lines means this is not a token file.
        raise RayTokenError(f"{source}: holds more than one word; expected only the token")
    return text


def find_token(env: Mapping[str, str] | None = None, home: Path | None = None) -> RayToken | None:
    """The token to send, by Ray's precedence; None when no source offers one. RayTokenError for a
    RAY_AUTH_TOKEN_PATH that cannot be read or is empty, or a default file that exists but is unreadable."""
    environ = os.environ if env is None else env
    value = (environ.get(TOKEN_ENV) or "").strip()
    if value:
        if any(ch.isspace() or not ch.isprintable() for ch in value):
            raise RayTokenError(f"{TOKEN_ENV} holds whitespace or control characters; expected only the token")
        return RayToken(value, TOKEN_ENV)
    path_text = environ.get(TOKEN_PATH_ENV) or ""
    if path_text:
        source = f"{TOKEN_PATH_ENV}={path_text}"
        try:
            path = Path(path_text).expanduser()
        except RuntimeError:  # "~someone" with no such user
            raise RayTokenError(f"{source}: cannot expand the path's ~") from None
        token = _read_token_file(path, source)
        if not token:
            raise RayTokenError(f"{source}: the file is empty; put the token from `ray get-auth-token` in it")
        return RayToken(token, source)
    default = default_token_file(home)
    token = _read_token_file(default, str(default), missing_ok=True)
    return RayToken(token, str(default)) if token else None  # an empty default file: as Ray, no token
