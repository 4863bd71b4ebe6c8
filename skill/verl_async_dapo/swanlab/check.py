"""Check a SwanLab API key before launch, the way the SDK logs in, without starting a run.

SwanLab 0.10 (``sdk/internal/pkg/client/bootstrap.py::login_by_api_key``) sends
``POST {api_host}/api/login/api_key`` with the header ``authorization: <key>`` and no body; the
success JSON carries ``sid``, ``expiredAt`` and ``userInfo.username``. We send the same request
with the standard library (no extra dependency), in a worker thread so the event loop never
blocks, and never follow a redirect: the key goes to the configured host and nowhere else.
"""

from __future__ import annotations

import functools
import http.client
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict

from verl_async_dapo.swanlab.config import SwanlabConfig
from verl_async_dapo.swanlab.values import SwanlabMode
from verl_async_dapo.untrusted import clean, quoted

__all__ = ["KeyCheck", "KeyStatus", "check_key"]

KeyStatus = Literal["ok", "wrong_key", "unreachable", "skipped", "error"]
_MAX_BODY = 64 * 1024
_USER_AGENT = "verl-async-dapo (SwanLab key check)"


class KeyCheck(BaseModel):
    """The outcome of a key check. ``message`` is meant for the user and never holds the key."""

    model_config = ConfigDict(frozen=True)

    status: KeyStatus
    message: str  # our words; the server's are in username / server_said (cleaned: untrusted.clean)
    username: str | None = None
    server_said: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class _Reply:
    code: int
    body: bytes
    location: str | None = None


@dataclass(frozen=True)
class _Failure:
    kind: Literal["network", "tls", "protocol"]
    detail: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # Returning None makes urllib raise HTTPError for the 3xx instead of re-sending the request
    # (with our authorization header) to wherever Location points.
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


def _ssl_context() -> ssl.SSLContext:
    try:  # the CA bundle requests (and so the SwanLab SDK) uses; the system store may be empty
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except (ImportError, OSError):
        return ssl.create_default_context()


def _post_login(url: str, key: str, timeout: float, proxy: str | None) -> _Reply | _Failure:
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect(), urllib.request.HTTPSHandler(context=_ssl_context())]
    if proxy is not None:
        handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    # Without an explicit proxy, urllib's default ProxyHandler honours http(s)_proxy / no_proxy,
    # like the SDK's requests session does.
    opener = urllib.request.build_opener(*handlers)
    # url is always http(s)://...: built from a host that normalize_host admitted.
    request = urllib.request.Request(  # noqa: S310
        url,
        data=b"",
        method="POST",
        headers={"authorization": key, "User-Agent": _USER_AGENT, "Accept": "application/json"},
    )
    try:
        with opener.open(request, timeout=timeout) as response:
            return _Reply(response.status, response.read(_MAX_BODY))
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(_MAX_BODY)
        except (OSError, http.client.HTTPException):
            body = b""
        return _Reply(exc.code, body, exc.headers.get("Location") if exc.headers else None)
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLError):
            return _Failure("tls", str(reason))
        return _Failure("network", str(reason))
    except ssl.SSLError as exc:
        return _Failure("tls", str(exc))
    except TimeoutError:  # socket.timeout is an alias since 3.10
        return _Failure("network", f"timed out after {timeout:g} s")
    except http.client.HTTPException as exc:
        return _Failure("protocol", type(exc).__name__)
    except OSError as exc:  # connection reset and the like
        return _Failure("network", str(exc) or type(exc).__name__)


def _origin(url: str) -> str:
    try:
        parts = urlsplit(url)
        if parts.scheme and parts.hostname:
            port = f":{parts.port}" if parts.port else ""
            return f"{parts.scheme}://{parts.hostname}{port}"[:200]
    except ValueError:
        pass
    return "an invalid address"


def _server_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    if isinstance(data, dict):
        for field in ("message", "msg", "error"):
            value = data.get(field)
            if isinstance(value, str) and value.strip():
                return clean(value, 200)
    return ""


def _interpret(cfg: SwanlabConfig, outcome: _Reply | _Failure) -> KeyCheck:
    api, web = cfg.api_host, cfg.web_host
    fix_key = (
        f"copy the API key from {web}/space/~/settings (it must belong to this server) and configure SwanLab again"
    )
    if isinstance(outcome, _Failure):
        if outcome.kind == "tls":
            return KeyCheck(
                status="error",
                message=f"TLS to {api} failed ({quoted(outcome.detail)}): check the certificate, or use the "
                "right scheme in SWANLAB_HOST (http:// vs https://)",
            )
        if outcome.kind == "protocol":
            return KeyCheck(
                status="error",
                message=f"{api} did not answer like an HTTP server ({quoted(outcome.detail)}): is SWANLAB_HOST the SwanLab "
                "server's address and port?",
            )
        return KeyCheck(
            status="unreachable",
            message=f"cannot reach the SwanLab server {api} ({quoted(outcome.detail)}): check SWANLAB_HOST, the proxy "
            "settings and the network from this machine, or use SwanLab mode local (no network needed)",
        )
    code, said = outcome.code, _server_message(outcome.body)
    said_text = f"; the server said {quoted(said)}" if said else ""
    extra = {"server_said": said} if said else {}
    if 300 <= code < 400:
        target = _origin(outcome.location or "")
        return KeyCheck(
            status="error",
            message=f"{api} answered with a redirect (HTTP {code}) to {target}; it was not followed so the key is "
            f"only sent to the configured host. If {target} is the SwanLab server, set SWANLAB_HOST={target}",
        )
    if code in (401, 403):
        return KeyCheck(status="wrong_key", message=f"{web} rejected the API key (HTTP {code}{said_text}): {fix_key}",
                        **extra)  # fmt: skip
    if 200 <= code < 300:
        try:
            data = json.loads(outcome.body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return KeyCheck(
                status="error",
                message=f"{api} answered but not like the SwanLab API (no JSON): is SWANLAB_HOST the SwanLab server?",
            )
        info = data.get("userInfo")
        username = info.get("username") if isinstance(info, dict) else None
        name = clean(username, 100) if isinstance(username, str) else ""
        if name:  # the account name is the server's text: its own field, never in our sentence
            return KeyCheck(status="ok", message=f"API key accepted by {web} (account: see username)",
                            username=name)  # fmt: skip
        return KeyCheck(status="wrong_key", message=f"{web} did not accept the API key{said_text}: {fix_key}", **extra)
    if code == 404:
        return KeyCheck(
            status="error",
            message=f"{api} has no SwanLab login endpoint (HTTP 404 for /api/login/api_key): is SWANLAB_HOST the "
            "SwanLab server's address and port?",
        )
    return KeyCheck(
        status="error",
        message=f"{api} answered the key check with HTTP {code}{said_text}; try again later or check the server",
        **extra,
    )


async def check_key(cfg: SwanlabConfig, *, timeout: float = 5.0, proxy: str | None = None) -> KeyCheck:
    """Ask the configured SwanLab server whether ``cfg``'s key is valid (cloud mode only).

    ``proxy`` (``http://host:port``) overrides the http(s)_proxy environment of this process.
    """
    if cfg.mode is not SwanlabMode.CLOUD or cfg.api_key is None:
        return KeyCheck(status="skipped", message=f"SwanLab mode is {cfg.mode.value}: no server, no key to check")
    key = cfg.api_key.get_secret_value()
    call = functools.partial(_post_login, cfg.login_url, key, timeout, proxy)
    outcome: _Reply | _Failure
    # The socket timeout covers connect and each read; DNS has none, so bound the whole call too.
    with anyio.move_on_after(timeout + 1.0) as scope:
        outcome = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    if scope.cancelled_caught:
        outcome = _Failure("network", f"no answer within {timeout + 1.0:g} s")
    result = _interpret(cfg, outcome)
    if any(key in (text or "") for text in (result.message, result.username, result.server_said)):
        # Only possible if a server echoed the key back; never pass it on.
        result = result.model_copy(
            update={
                "message": result.message.replace(key, "[redacted]"),
                "username": result.username.replace(key, "[redacted]") if result.username else None,
                "server_said": result.server_said.replace(key, "[redacted]") if result.server_said else None,
            }
        )
    return result
