"""Each sink's request, sent over real HTTP to the service stand-in on 127.0.0.1: the documented body, the
documented signature (verified by the stand-in from the docs, and recomputed here), the service's answer read
the way the service means it (Feishu/DingTalk/WeCom refuse with HTTP 200 and a non-zero code)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
from notify_services import CANARY_SECRET, Services
from pydantic import SecretStr

from verl_async_dapo.notify import formats
from verl_async_dapo.notify.config import Sink
from verl_async_dapo.notify.formats import Notice, SinkKind
from verl_async_dapo.notify.send import send_now

NOTICE = Notice(event_id=42, kind="run_failed", level="error", title="[verl] training failed: run run_x on jins",
                text="config_error: batch size not divisible", run_id="run_x", target="jins",
                look_closer="verl-async-dapo errors run_x (MCP: check_errors run_id=run_x)")  # fmt: skip


def _sink(svc: Services, kind: str, secret: str | None = None) -> Sink:
    return Sink(kind=SinkKind(kind), url=SecretStr(svc.url(kind)), secret=SecretStr(secret) if secret else None)


@pytest.mark.parametrize("kind", ["slack", "feishu", "dingtalk", "wecom", "webhook"])
def test_each_service_accepts_the_documented_message(svc: Services, kind: str) -> None:
    secret = CANARY_SECRET if kind in ("feishu", "dingtalk", "webhook") else None
    result = send_now(_sink(svc, kind, secret), NOTICE)
    (got,) = svc.of(kind)
    assert got.verdict == "ok", got.verdict
    assert result.ok, result.answer
    body = got.json()
    text = {"slack": lambda b: b["text"], "feishu": lambda b: b["content"]["text"],
            "dingtalk": lambda b: b["text"]["content"], "wecom": lambda b: b["text"]["content"],
            "webhook": lambda b: b["text"]}[kind](body)  # fmt: skip
    assert "config_error" in text
    if kind != "webhook":  # the chat services get one text naming the run, the target and where to look
        assert "run_x" in text and "jins" in text and "check_errors" in text
    else:
        assert body["event"] == "run_failed" and body["run_id"] == "run_x" and body["target"] == "jins"
        assert got.headers["idempotency-key"] == "vad-event-42"
    # The secret signs; it is never sent.
    assert CANARY_SECRET not in got.body.decode() + got.path + json.dumps(got.query)
    assert CANARY_SECRET not in result.answer


def test_feishu_signature_is_the_documented_one(svc: Services) -> None:
    send_now(_sink(svc, "feishu", CANARY_SECRET), NOTICE)
    body = svc.of("feishu")[0].json()
    assert body["msg_type"] == "text"
    key = f"{body['timestamp']}\n{CANARY_SECRET}".encode()
    assert body["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def test_dingtalk_signature_is_in_the_url_as_documented(svc: Services) -> None:
    send_now(_sink(svc, "dingtalk", CANARY_SECRET), NOTICE)
    got = svc.of("dingtalk")[0]
    assert got.query["access_token"] == "tok000"  # the original query kept
    stamp = got.query["timestamp"]
    assert len(stamp) == 13  # milliseconds
    digest = hmac.new(CANARY_SECRET.encode(), f"{stamp}\n{CANARY_SECRET}".encode(), hashlib.sha256).digest()
    assert got.query["sign"] == base64.b64encode(digest).decode()


def test_webhook_signature_header(svc: Services) -> None:
    send_now(_sink(svc, "webhook", CANARY_SECRET), NOTICE)
    got = svc.of("webhook")[0]
    assert got.headers["x-vad-signature"] == "sha256=" + hmac.new(CANARY_SECRET.encode(), got.body,
                                                                   hashlib.sha256).hexdigest()  # fmt: skip


@pytest.mark.parametrize(("kind", "answer"), [("feishu", "code 19021"), ("dingtalk", "code 310000"),
                                              ("webhook", "HTTP 401")])  # fmt: skip
def test_a_wrong_secret_is_refused_and_the_answer_reported(svc: Services, kind: str, answer: str) -> None:
    result = send_now(_sink(svc, kind, "SECwrong-secret"), NOTICE)
    assert not result.ok
    assert answer in result.answer
    assert svc.of(kind)[0].verdict == "bad sign"


def test_an_unreachable_service_is_a_result_not_an_exception(svc: Services) -> None:
    sink = Sink(kind=SinkKind.SLACK, url=SecretStr("http://127.0.0.1:9/hooks/T/B/tokentoken"))
    result = send_now(sink, NOTICE)
    assert not result.ok and result.retry
    assert "could not reach the slack service" in result.answer
    assert "tokentoken" not in result.answer


def test_server_errors_are_retried_client_errors_not(svc: Services) -> None:
    svc.fail_next = 1
    first = send_now(_sink(svc, "wecom"), NOTICE)
    assert (first.ok, first.retry) == (False, True) and "HTTP 503" in first.answer
    assert send_now(_sink(svc, "wecom"), NOTICE).ok
    missing = Sink(kind=SinkKind.SLACK, url=SecretStr(f"http://127.0.0.1:{svc.port}/nowhere"))
    refused = send_now(missing, NOTICE)
    assert (refused.ok, refused.retry) == (False, False) and "HTTP 404" in refused.answer


def test_long_texts_fit_the_services_limits() -> None:
    long = Notice(event_id=1, kind="run_failed", level="error", title="t", text="x" * 10_000)
    request = formats.build_request(SinkKind.WECOM, "http://127.0.0.1/w", None, long, now=0.0)
    assert len(json.loads(request.body)["text"]["content"]) <= formats.MAX_TEXT[SinkKind.WECOM]


def test_desktop_without_notify_send_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no notify-send
    result = send_now(Sink(kind=SinkKind.DESKTOP), NOTICE)
    assert (result.ok, result.retry) == (False, False)
    assert "libnotify-bin" in result.answer


def test_desktop_with_notify_send_passes_title_and_text_as_arguments(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    # A real executable named notify-send that records its argv (no shell string is ever built).
    out = tmp_path / "argv.json"
    script = tmp_path / "notify-send"
    script.write_text(f"#!/usr/bin/env python3\nimport json, sys\nopen({str(out)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    result = send_now(Sink(kind=SinkKind.DESKTOP), NOTICE)
    assert result.ok, result.answer
    argv = json.loads(out.read_text())
    assert argv[:2] == ["--app-name=verl-async-dapo", "--urgency=critical"]
    assert argv[2] == NOTICE.title and "check_errors" in argv[3]
