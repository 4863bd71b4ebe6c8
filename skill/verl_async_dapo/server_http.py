"""Streamable HTTP for the MCP server, with the safeguards a docker-driving server needs.

On the SDK's loopback names (127.0.0.1, localhost, ::1) the SDK itself turns on DNS-rebinding
protection (Host and Origin must be loopback). Bound anywhere else the server can be reached by
other machines, and that server can start containers: a bearer token (env
``VERL_ASYNC_DAPO_HTTP_TOKEN``) is then required, and the accepted Host names are set
explicitly because the SDK accepts every Host off loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from verl_async_dapo.exceptions import ServeConfigError

logger = logging.getLogger(__name__)

TOKEN_ENV = "VERL_ASYNC_DAPO_HTTP_TOKEN"  # noqa: S105 - the variable name, not a secret
ALLOWED_HOSTS_ENV = "VERL_ASYNC_DAPO_ALLOWED_HOSTS"
MIN_TOKEN_LENGTH = 24
# Exactly the names for which the SDK enables DNS-rebinding protection by itself.
SDK_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class BearerTokenMiddleware:
    """Require ``Authorization: Bearer <token>`` on every HTTP request (constant-time compare)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan events pass through: they start the session manager
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
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


def build_http_app(mcp: Any, host: str, port: int, env: dict[str, str] | None = None) -> ASGIApp:
    """The ASGI app: the SDK's streamable HTTP app, behind the bearer check when a token is set."""
    security, token = http_settings(host, port, dict(os.environ if env is None else env))
    app: ASGIApp = mcp.streamable_http_app(host=host, transport_security=security)
    if token is not None:
        app = BearerTokenMiddleware(app, token)
    return app


def serve_http(mcp: Any, host: str, port: int) -> None:
    import anyio
    import uvicorn

    app = build_http_app(mcp, host, port)
    logger.info("verl-async-dapo MCP server on http://%s:%d/mcp", host, port)
    config = uvicorn.Config(app, host=host, port=port, log_level="info")
    anyio.run(uvicorn.Server(config).serve)
