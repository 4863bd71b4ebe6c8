"""A real HTTP server on 127.0.0.1 that answers like each notification service does, checking what it is sent.

One server, one path per service (``/slack/…``, ``/feishu/…``, ``/dingtalk/robot/send?access_token=…``,
``/wecom/…?key=…``, ``/webhook/…``). It verifies the service's signature itself — written here from each
service's documentation, independently of the product's code — and answers with the service's documented
reply: Feishu ``{"code":0,"msg":"success"}`` or ``{"code":19021,"msg":"sign match fail or timestamp is not
within one hour from current time"}``; DingTalk ``{"errcode":0,"errmsg":"ok"}`` or ``{"errcode":310000,
"errmsg":"sign not match"}``; WeCom ``{"errcode":0,"errmsg":"ok"}``; Slack ``ok``. Every request is
recorded (arrival time included). Knobs: ``fail_next`` (answer 503 that many times), ``hold`` (seconds to
wait before answering: a send in flight).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

CANARY_SECRET = "SECcanary-7f3a9d2e41b8c6"  # the signing secret the stand-in expects; must never be sent or shown


@dataclass
class Received:
    service: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() on arrival
    verdict: str = ""  # what the stand-in concluded ("ok" or why it refused)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Services:
    port: int = 0
    secrets: dict[str, str] = field(default_factory=dict)  # service → the secret it expects
    received: list[Received] = field(default_factory=list)
    fail_next: int = 0
    hold: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, service: str) -> str:
        base = f"http://127.0.0.1:{self.port}"
        return {
            "slack": f"{base}/slack/services/T000/B000/XXXXXXXXXXXX",
            "feishu": f"{base}/feishu/open-apis/bot/v2/hook/0000-hook-id",
            "dingtalk": f"{base}/dingtalk/robot/send?access_token=tok000",
            "wecom": f"{base}/wecom/cgi-bin/webhook/send?key=key000",
            "webhook": f"{base}/webhook/in",
        }[service]

    def of(self, service: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.service == service]


def _feishu_ok(secret: str, payload: dict[str, Any]) -> bool:
    stamp = payload.get("timestamp")
    if not isinstance(stamp, str) or not stamp.isdigit() or abs(time.time() - int(stamp)) > 3600:
        return False
    key = f"{stamp}\n{secret}".encode()
    expected = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    return hmac.compare_digest(expected, str(payload.get("sign", "")))


def _dingtalk_ok(secret: str, query: dict[str, str]) -> bool:
    stamp = query.get("timestamp", "")
    if not stamp.isdigit() or abs(time.time() * 1000 - int(stamp)) > 3600_000:
        return False
    digest = hmac.new(secret.encode(), f"{stamp}\n{secret}".encode(), hashlib.sha256).digest()
    return hmac.compare_digest(base64.b64encode(digest).decode(), query.get("sign", ""))


def _answer(state: Services, service: str, query: dict[str, str], headers: dict[str, str],
            body: bytes) -> tuple[int, bytes, str]:  # fmt: skip
    secret = state.secrets.get(service)
    try:
        payload = json.loads(body)
    except ValueError:
        return 400, b"invalid_payload", "not JSON"
    if service == "slack":
        ok = isinstance(payload.get("text"), str) and payload["text"]
        return (200, b"ok", "ok") if ok else (400, b"no_text", "no text")
    if service == "feishu":
        if payload.get("msg_type") != "text" or not payload.get("content", {}).get("text"):
            return 200, b'{"code":9499,"msg":"Bad Request","data":{}}', "bad format"
        if secret is not None and not _feishu_ok(secret, payload):
            return (200, b'{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current '
                    b'time","data":{}}', "bad sign")  # fmt: skip
        return 200, b'{"StatusCode":0,"StatusMessage":"success","code":0,"data":{},"msg":"success"}', "ok"
    if service in ("dingtalk", "wecom"):
        if payload.get("msgtype") != "text" or not payload.get("text", {}).get("content"):
            return 200, b'{"errcode":40035,"errmsg":"missing msgtype or text"}', "bad format"
        if service == "dingtalk" and secret is not None and not _dingtalk_ok(secret, query):
            return 200, b'{"errcode":310000,"errmsg":"sign not match"}', "bad sign"
        return 200, b'{"errcode":0,"errmsg":"ok"}', "ok"
    if service == "webhook":
        if secret is not None:
            expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(expected, headers.get("x-vad-signature", "")):
                return 401, b'{"error":"bad signature"}', "bad sign"
        return 202, b'{"accepted":true}', "ok"
    return 404, b"no such service", "unknown path"


def _handler(state: Services) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrived = time.time()
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            parts = urlsplit(self.path)
            service = parts.path.strip("/").split("/", 1)[0]
            # DingTalk's sign arrives URL-encoded; parse_qs decodes it the way a server framework would.
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            record = Received(service, parts.path, query, headers, body, arrived)
            with state.lock:
                state.received.append(record)
                failing = state.fail_next > 0
                state.fail_next -= 1 if failing else 0
            if state.hold:
                time.sleep(state.hold)
            if failing:
                status, reply, record.verdict = 503, b"service unavailable", "injected 503"
            else:
                status, reply, record.verdict = _answer(state, service, query, headers, body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if reply[:1] != b"{" else "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
            except OSError:  # the sender died while we held its request
                pass

        def log_message(self, *args: Any) -> None:  # quiet
            return

    return Handler


@contextmanager
def services(**secrets: str) -> Iterator[Services]:
    state = Services(secrets=dict(secrets))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
