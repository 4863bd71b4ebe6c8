"""Each service's documented message body and signing scheme (pure: no I/O; the clock is an argument).

- generic webhook: our own JSON (``Notice.as_json``), with an ``Idempotency-Key`` header (the event id, so a
  receiver can drop the rare repeat after a supervisor was killed between the request and its answer) and,
  when a secret is set, ``X-VAD-Signature: sha256=<hex HMAC-SHA256(secret, body)>`` (GitHub's scheme).
- Slack incoming webhook: ``{"text": ...}`` (mrkdwn); no signing (Slack signs only what it sends to you).
- Feishu/Lark custom bot: ``{"msg_type": "text", "content": {"text": ...}}``; with signing on, the body also
  carries ``timestamp`` (seconds) and ``sign = base64(HMAC-SHA256(key=f"{timestamp}\\n{secret}", msg=b""))``
  (open.feishu.cn "Custom bot guide", Python sample).
- DingTalk custom robot: ``{"msgtype": "text", "text": {"content": ...}}``; with 加签 the URL gets
  ``&timestamp=<ms>&sign=<urlencode(base64(HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}")))>``
  (open.dingtalk.com "custom robot security settings", Python sample).
- WeCom (企业微信) group robot: ``{"msgtype": "text", "text": {"content": ...}}``; no signing (the key in the
  URL is the credential).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import quote_plus, urlsplit, urlunsplit

from verl_async_dapo.untrusted import excerpt


class SinkKind(str, Enum):
    WEBHOOK = "webhook"
    SLACK = "slack"
    FEISHU = "feishu"
    DINGTALK = "dingtalk"
    WECOM = "wecom"
    DESKTOP = "desktop"


# Kinds whose service defines a signing secret (the generic webhook's is our own HMAC header).
SIGNED_KINDS = frozenset({SinkKind.WEBHOOK, SinkKind.FEISHU, SinkKind.DINGTALK})
# DingTalk's and WeCom's text messages are limited (20,000 bytes / 2,048 bytes): stay well below.
MAX_TEXT = {SinkKind.WECOM: 2000, SinkKind.DINGTALK: 4000}
DEFAULT_MAX_TEXT = 4000


@dataclass(frozen=True)
class Notice:
    """One event as a notification: what every sink renders."""

    event_id: int
    kind: str  # the event kind, e.g. "oom_relaunch", "run_failed", "run_stalled", "test"
    level: str  # info | warning | error
    title: str
    text: str
    run_id: str | None = None
    target: str | None = None
    look_closer: str | None = None  # the one command/tool to see more
    data: dict[str, Any] = field(default_factory=dict)

    def plain(self, limit: int = DEFAULT_MAX_TEXT) -> str:
        lines = [self.title, self.text]
        if self.look_closer:
            lines.append(f"Look closer: {self.look_closer}")
        body = "\n".join(line for line in lines if line)
        return body if len(body) <= limit else body[: limit - 1] + "…"

    def as_json(self) -> dict[str, Any]:
        return {
            "source": "verl-async-dapo", "event_id": self.event_id, "event": self.kind, "level": self.level,
            "title": self.title, "text": self.text, "run_id": self.run_id, "target": self.target,
            "look_closer": self.look_closer, "data": self.data,
        }  # fmt: skip


@dataclass(frozen=True)
class Request:
    """An HTTP POST to make (the URL is a secret: never logged, never shown)."""

    url: str
    body: bytes
    headers: dict[str, str]


def feishu_sign(timestamp_s: int, secret: str) -> str:
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def dingtalk_sign(timestamp_ms: int, secret: str) -> str:
    """URL-encoded already (as DingTalk's sample does with quote_plus)."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest))


def webhook_signature(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _add_query(url: str, extra: str) -> str:
    parts = urlsplit(url)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def build_request(kind: SinkKind, url: str, secret: str | None, notice: Notice, *, now: float) -> Request:
    """The request a sink of ``kind`` sends for ``notice`` at wall-clock time ``now``."""
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "verl-async-dapo"}
    text = notice.plain(MAX_TEXT.get(kind, DEFAULT_MAX_TEXT))
    if kind is SinkKind.WEBHOOK:
        body = _json(notice.as_json())
        headers["Idempotency-Key"] = f"vad-event-{notice.event_id}"
        if secret:
            headers["X-VAD-Signature"] = webhook_signature(body, secret)
        return Request(url, body, headers)
    if kind is SinkKind.SLACK:
        return Request(url, _json({"text": text}), headers)
    if kind is SinkKind.FEISHU:
        payload: dict[str, Any] = {"msg_type": "text", "content": {"text": text}}
        if secret:
            stamp = int(now)
            payload = {"timestamp": str(stamp), "sign": feishu_sign(stamp, secret), **payload}
        return Request(url, _json(payload), headers)
    if kind is SinkKind.DINGTALK:
        if secret:
            stamp_ms = int(now * 1000)
            url = _add_query(url, f"timestamp={stamp_ms}&sign={dingtalk_sign(stamp_ms, secret)}")
        return Request(url, _json({"msgtype": "text", "text": {"content": text}}), headers)
    if kind is SinkKind.WECOM:
        return Request(url, _json({"msgtype": "text", "text": {"content": text}}), headers)
    raise ValueError(f"{kind.value} is not an HTTP sink")


def read_answer(kind: SinkKind, status: int, body: bytes) -> tuple[bool, str]:
    """(accepted, a short description) from the service's HTTP answer: the status and at most a short cleaned
    excerpt of what it said, fenced in « » (``untrusted.excerpt``: remote text, never our words).

    Feishu, DingTalk and WeCom answer HTTP 200 even when they refuse (a bad signature, a missing keyword):
    the verdict is in the JSON (``code`` / ``errcode`` 0 = accepted). Slack answers ``ok``.
    """
    said = excerpt(body)
    if 300 <= status < 400:
        return False, f"HTTP {status}: a redirect, not followed (use the final URL from the bot's settings)"
    if not 200 <= status < 300:
        return False, f"HTTP {status}: {said}".rstrip(": ")
    if kind in (SinkKind.FEISHU, SinkKind.DINGTALK, SinkKind.WECOM):
        try:
            answer = json.loads(body)
        except ValueError:
            return False, f"HTTP {status}, not the service's JSON answer: {said}".rstrip(": ")
        code = answer.get("code", answer.get("errcode", answer.get("StatusCode"))) if isinstance(answer, dict) else None
        message = (
            answer.get("msg", answer.get("errmsg", answer.get("StatusMessage", ""))) if isinstance(answer, dict) else ""
        )
        code_text = code if isinstance(code, int) and not isinstance(code, bool) else excerpt(str(code), 20)
        return code == 0, f"HTTP {status}, code {code_text}: {excerpt(str(message))}".rstrip(": ")
    return True, f"HTTP {status}: {said or 'ok'}"
