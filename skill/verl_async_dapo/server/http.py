"""Streamable HTTP for the MCP server, with the safeguards a docker-driving server needs.

Every TCP bind requires a bearer token: a loopback port is reachable by every local user, and this
server can start containers (issue 20: another uid created a container with the host's ``/``
mounted). The token is ``VERL_ASYNC_DAPO_HTTP_TOKEN`` when set; on loopback without it one is
generated once and kept 0600 in the config dir (``http_token``): the log says where, never what.
On the SDK's loopback names (127.0.0.1, localhost, ::1) the SDK itself turns on DNS-rebinding
protection (Host and Origin must be loopback). Off loopback the token must be set explicitly
and the accepted Host names are set explicitly because the SDK accepts every Host off loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from pathlib import Path
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from verl_async_dapo.exceptions import ServeConfigError

logger = logging.getLogger(__name__)

TOKEN_ENV = "VERL_ASYNC_DAPO_HTTP_TOKEN"  # noqa: S105 - the variable name, not a secret
ALLOWED_HOSTS_ENV = "VERL_ASYNC_DAPO_ALLOWED_HOSTS"
MIN_TOKEN_LENGTH = 24
TOKEN_FILE = "http_token"  # noqa: S105 - a file name in the config dir, not a secret
# Exactly the names for which the SDK enables DNS-rebinding protection by itself.
SDK_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class BearerTokenMiddleware:
    """Require ``Authorization: Bearer <token>`` on every HTTP request (constant-time compare)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    def _authorized(self, header: bytes) -> bool:
        # RFC 9110: the auth scheme is case-insensitive ("bearer", "BEARER"); the token itself is exact.
        scheme, _, given = header.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan events pass through: they start the session manager
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if self._authorized(given):
            await self.app(scope, receive, send)
            return
        body = b'{"error": "unauthorized: send Authorization: Bearer <VERL_ASYNC_DAPO_HTTP_TOKEN>"}'
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="verl-async-dapo"'),
            (b"content-length", str(len(body)).encode()),
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def http_settings(host: str, port: int, env: dict[str, str]) -> tuple[TransportSecuritySettings | None, str | None]:
    """(transport security, required token) for a bind address; raises ServeConfigError when unsafe."""
    token = env.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise ServeConfigError(f"{TOKEN_ENV} is set but blank: set it to a long random secret, or unset it to "
                               "have one generated (loopback only)")  # fmt: skip
    token = token.strip() if token is not None else None  # a trailing newline from `$(cat file)` is not the token
    if token is not None and any(ch.isspace() for ch in token):
        raise ServeConfigError(f"{TOKEN_ENV} may not contain spaces or newlines")
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise ServeConfigError(f"{TOKEN_ENV} is too short: use at least {MIN_TOKEN_LENGTH} random characters "
                               "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")  # fmt: skip
    if host in SDK_LOOPBACK_HOSTS:
        return None, token  # SDK default: DNS-rebinding protection on, loopback Host/Origin only
    if token is None:
        raise ServeConfigError(
            f"refusing to serve HTTP on {host}: off loopback anyone who can reach this port could start "
            f"containers. Set {TOKEN_ENV} to a long random secret (clients send it as a bearer token), or "
            "bind to 127.0.0.1 (the default) and tunnel (e.g. ssh -L 8765:127.0.0.1:8765)"
        )
    extra = [h.strip() for h in env.get(ALLOWED_HOSTS_ENV, "").split(",") if h.strip()]
    if _is_wildcard(host) and not extra:
        raise ServeConfigError(
            f"binding to {host} accepts any address: set {ALLOWED_HOSTS_ENV} to the host names clients use "
            f"(e.g. gpu-box.lan:{port},10.0.0.5:{port}) so requests with other Host headers are refused"
        )
    named = (
        [] if _is_wildcard(host) else ([f"[{host}]:{port}", f"[{host}]"] if ":" in host else [f"{host}:{port}", host])
    )
    allowed = named + extra
    origins = [f"http://{h}" for h in allowed] + [f"https://{h}" for h in allowed]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed,
                                     allowed_origins=origins), token  # fmt: skip


def generated_token(config_home: Path) -> tuple[str, Path]:
    """The loopback token kept in ``config_home/http_token`` (0600, dir 0700), made on first use."""
    import secrets as _secrets

    from verl_async_dapo.secret_store import ensure_private_dir, read_private_file, write_private_file

    ensure_private_dir(config_home)
    path = config_home / TOKEN_FILE
    try:
        token = read_private_file(path, what="HTTP token file").decode("ascii", "replace").strip()
    except FileNotFoundError:
        token = ""
    if len(token) < MIN_TOKEN_LENGTH:  # absent, or emptied by hand: a fresh one
        token = _secrets.token_urlsafe(32)
        write_private_file(path, token.encode() + b"\n")
    return token, path


def build_http_app(mcp: Any, host: str, port: int, env: dict[str, str] | None = None) -> ASGIApp:
    """The ASGI app: the SDK's streamable HTTP app, always behind the bearer check."""
    from verl_async_dapo.paths import config_dir

    security, token = http_settings(host, port, dict(os.environ if env is None else env))
    if token is None:
        token, path = generated_token(config_dir())
        # Where, never what: the log may be a file other people read.
        logger.warning("HTTP bearer token required; none set in %s, so the token is the content of %s (0600). "
                       "Clients send 'Authorization: Bearer <that content>'", TOKEN_ENV, path)  # fmt: skip
    app: ASGIApp = mcp.streamable_http_app(host=host, transport_security=security)
    return BearerTokenMiddleware(app, token)


def serve_http(mcp: Any, host: str, port: int) -> None:
    import anyio
    import uvicorn

    app = build_http_app(mcp, host, port)
    logger.info("verl-async-dapo MCP server on http://%s:%d/mcp", host, port)
    config = uvicorn.Config(app, host=host, port=port, log_level="info")
    anyio.run(uvicorn.Server(config).serve)
