"""Sending one notice to one sink: an HTTP POST (stdlib, in a worker thread) or ``notify-send``.

Never raises: every outcome is a ``SendResult`` whose text is safe to store and show (no URL, no secret:
the caller scrubs it once more with every known secret anyway).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import anyio

from verl_async_dapo.notify.config import Sink
from verl_async_dapo.notify.formats import Notice, SinkKind, build_request, read_answer

HTTP_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class SendResult:
    ok: bool
    answer: str  # what the service said, e.g. "HTTP 200, code 0: success"
    retry: bool = True  # False: retrying cannot help (e.g. no notify-send here)


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 (checked http(s))
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:  # noqa: S310 (http(s) only)
            return response.status, response.read(4096)
    except urllib.error.HTTPError as exc:
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
        return SendResult(False, f"notify-send exited {proc.returncode}: {proc.stderr.strip()[:200]}")
    return SendResult(True, "shown by notify-send")


def send_now(sink: Sink, notice: Notice) -> SendResult:
    """Blocking; call through :func:`send`."""
    if sink.kind is SinkKind.DESKTOP:
        return _desktop(notice)
    assert sink.url is not None
    secret = sink.secret.get_secret_value() if sink.secret else None
    request = build_request(sink.kind, sink.url.get_secret_value(), secret, notice, now=time.time())
    try:
        status, body = _post(request.url, request.body, request.headers)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        # URLError's reason names the failure (refused, timed out, DNS), never the URL.
        reason = getattr(exc, "reason", exc)
        return SendResult(False, f"could not reach the {sink.kind.value} service: {type(reason).__name__}: "
                                 f"{str(reason)[:160]}")  # fmt: skip
    ok, answer = read_answer(sink.kind, status, body)
    return SendResult(ok, answer, retry=not ok and (status >= 500 or status == 429 or 200 <= status < 300))


async def send(sink: Sink, notice: Notice) -> SendResult:
    return await anyio.to_thread.run_sync(send_now, sink, notice)
