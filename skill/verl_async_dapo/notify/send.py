"""Sending one notice to one sink: an HTTP POST (stdlib, in a worker thread) or ``notify-send``.

Never raises: every outcome is a ``SendResult`` whose text is safe to store and show (no URL, no secret:
the caller scrubs it once more with every known secret anyway).

What a service answers is remote text (issue 27, finding 5: an answer with RTL, ESC sequences, newlines and a
fake "SYSTEM:" line reached the model): only the status and a short cleaned excerpt between « » come back
(``untrusted.excerpt``). Redirects are not followed (urllib follows them as GETs by default and returned the
redirect target's answer): a 3xx is the answer. The host's addresses are checked (``notify.address``) and the
connection goes to a checked address, so a metadata service cannot be reached through a webhook URL.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio

from verl_async_dapo.exceptions import NotifyConfigError
from verl_async_dapo.notify import address
from verl_async_dapo.notify.config import Sink
from verl_async_dapo.notify.formats import Notice, SinkKind, build_request, read_answer
from verl_async_dapo.untrusted import clean

HTTP_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class SendResult:
    ok: bool
    answer: str  # what the service said, e.g. "HTTP 200, code 0: success"
    retry: bool = True  # False: retrying cannot help (e.g. no notify-send here)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is the service's answer: following it would POST (or GET) somewhere nobody configured."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


def _pinned(base: type[http.client.HTTPConnection], addresses: tuple[str, ...]) -> Any:
    """``base`` that connects to the checked ``addresses`` (in order) instead of resolving the host again."""

    class Pinned(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._create_connection = self._to_checked

        def _to_checked(self, addr: tuple[str, int], timeout: Any = None, source: Any = None) -> socket.socket:
            error: OSError | None = None
            for ip in addresses:
                try:
                    return socket.create_connection((ip, addr[1]), timeout, source)
                except OSError as exc:
                    error = exc
            raise error or OSError("no address to connect to")

    return Pinned


class _PinnedHTTP(urllib.request.HTTPHandler):
    def __init__(self, addresses: tuple[str, ...]) -> None:
        super().__init__()
        self._addresses = addresses

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_pinned(http.client.HTTPConnection, self._addresses), req)


class _PinnedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, addresses: tuple[str, ...]) -> None:
        super().__init__()
        self._addresses = addresses

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        # The TLS name stays the URL's host (HTTPSConnection wraps with server_hostname=self.host).
        return self.do_open(_pinned(http.client.HTTPSConnection, self._addresses), req,
                            context=getattr(self, "_context", None))  # fmt: skip


def check_destination(url: str, env: Mapping[str, str]) -> tuple[address.Checked, bool]:
    """(the checked addresses, whether the user's proxy carries the request): NotifyConfigError when refused.
    Through the proxy (the environment's, as urllib has always used it) the proxy resolves the name, so only
    a literal address in the URL is checked."""
    parts = urlsplit(url)
    host, scheme = parts.hostname or "", parts.scheme
    port = parts.port or (443 if scheme == "https" else 80)
    proxied = bool(urllib.request.getproxies().get(scheme)) and not urllib.request.proxy_bypass(host)
    return address.check(host, port, env, resolve=not proxied), proxied


def _opener(url: str, env: Mapping[str, str]) -> urllib.request.OpenerDirector:
    """No redirects; a direct connection goes to the checked addresses only."""
    checked, proxied = check_destination(url, env)
    handlers: list[urllib.request.BaseHandler] = [_NoRedirects()]
    if not proxied:
        handlers += [_PinnedHTTP(checked.addresses), _PinnedHTTPS(checked.addresses)]
    return urllib.request.build_opener(*handlers)


def _post(url: str, body: bytes, headers: dict[str, str], env: Mapping[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 (checked http(s))
    try:
        with _opener(url, env).open(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
            return response.status, response.read(4096)
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:  # never read: the body is about the redirect target
            return exc.code, b""
        return exc.code, exc.read(4096) if exc.fp is not None else b""


def _desktop(notice: Notice) -> SendResult:
    binary = shutil.which("notify-send")
    if binary is None:
        return SendResult(False, "notify-send is not installed on this machine (apt install libnotify-bin)", False)
    urgency = "critical" if notice.level == "error" else "normal"
    try:
        proc = subprocess.run([binary, "--app-name=verl-async-dapo", f"--urgency={urgency}", notice.title,
                               notice.plain()], capture_output=True, text=True, timeout=15, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SendResult(False, f"notify-send failed: {type(exc).__name__}")
    if proc.returncode != 0:
        return SendResult(False, f"notify-send exited {proc.returncode}: {clean(proc.stderr, 120)}")
    return SendResult(True, "shown by notify-send")


def send_now(sink: Sink, notice: Notice, env: Mapping[str, str] | None = None) -> SendResult:
    """Blocking; call through :func:`send`. ``env``: the user's environment (``VAD_NOTIFY_ALLOW_ADDRESSES``)."""
    if sink.kind is SinkKind.DESKTOP:
        return _desktop(notice)
    assert sink.url is not None
    secret = sink.secret.get_secret_value() if sink.secret else None
    request = build_request(sink.kind, sink.url.get_secret_value(), secret, notice, now=time.time())
    try:
        status, body = _post(request.url, request.body, request.headers, env or {})
    except NotifyConfigError as exc:  # a refused address: retrying cannot help
        return SendResult(False, str(exc), retry=False)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        # URLError's reason names the failure (refused, timed out, DNS), never the URL.
        reason = getattr(exc, "reason", exc)
        return SendResult(False, f"could not reach the {sink.kind.value} service: {type(reason).__name__}: "
                                 f"{clean(str(reason), 120)}")  # fmt: skip
    ok, answer = read_answer(sink.kind, status, body)
    return SendResult(ok, answer, retry=not ok and (status >= 500 or status == 429 or 200 <= status < 300))


async def send(sink: Sink, notice: Notice, env: Mapping[str, str] | None = None) -> SendResult:
    return await anyio.to_thread.run_sync(send_now, sink, notice, env)
