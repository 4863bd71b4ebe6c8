"""configure_notifications over MCP (both protocol eras): a test message goes out only when asked (test: true),
reaches the service stand-in on 127.0.0.1 and its answer comes back fenced; showing sends nothing; the URL and
the signing secret never appear in any tool output."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.types import ElicitResult
from mcp_helpers import ok, refused, result_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notify"))
from notify_services import CANARY_SECRET, Services, services


@pytest.fixture
def svc() -> Iterator[Services]:
    with services(feishu=CANARY_SECRET) as state:
        yield state


async def test_add_a_signed_feishu_bot_and_list_it(connect: Callable[..., Any], svc: Services) -> None:
    async with connect() as client:
        added = await client.call_tool("configure_notifications", {"kind": "feishu", "url": svc.url("feishu"),
                                                                   "secret": CANARY_SECRET, "test": True})  # fmt: skip
        text = result_text(added)
        assert not added.is_error, text
        (sink,) = added.structured_content["sinks"]
        assert sink["accepted"] is True and sink["answer"] == "HTTP 200, code 0: «success»"
        assert sink["setting"] == "feishu 127.0.0.1; signed (from argument)"
        assert CANARY_SECRET not in text and "hook-id" not in text
        for _ in range(2):  # showing is not sending
            listed = await ok(client, "configure_notifications", {})
        assert [s["kind"] for s in listed["sinks"]] == ["feishu"] and listed["sinks"][0]["tested"] is False
        assert listed["events"] == ["errors"] and listed["sinks"][0]["events"] == ["errors"]
        assert "Nothing was sent" in listed["note"]
        assert len(svc.of("feishu")) == 1
        # Its own filter, without the URL again (no form asked) and without a message.
        edited = await ok(client, "configure_notifications", {"kind": "feishu", "events": "succeeded"})
        assert edited["sinks"][0]["events"] == ["errors", "succeeded"] and edited["events"] == ["errors"]
        tested = await ok(client, "configure_notifications", {"test": True})
        assert tested["sinks"][0]["accepted"] is True
    assert [r.verdict for r in svc.of("feishu")] == ["ok", "ok"]


async def test_a_wrong_secret_is_refused_with_the_services_answer(connect: Callable[..., Any], svc: Services) -> None:
    async with connect() as client:
        message = await refused(client, "configure_notifications", {"kind": "feishu", "url": svc.url("feishu"),
                                "secret": "wrong-" + CANARY_SECRET[:4], "test": True})  # fmt: skip
        assert "code 19021: «sign match fail" in message and "nothing was saved" in message
        listed = await ok(client, "configure_notifications", {})
        assert listed["sinks"] == [] and "no notification sink" in listed["note"]


async def test_bad_arguments_are_refused(connect: Callable[..., Any]) -> None:
    async with connect() as client:
        assert "needs its webhook URL" in await refused(client, "configure_notifications", {"kind": "slack"})
        assert "unknown notification events" in await refused(client, "configure_notifications",
                                                                  {"events": "nope"})  # fmt: skip


class Form:
    """The user's side of the form: answers (or declines) and records what it was asked."""

    def __init__(self, action: str, content: dict[str, Any] | None = None) -> None:
        self.action, self.content, self.asked = action, content, []  # type: list[str]

    async def __call__(self, _ctx: Any, params: Any) -> ElicitResult:
        self.asked.append(params.message)
        return ElicitResult(action=self.action, content=self.content if self.action == "accept" else None)  # type: ignore[arg-type]


@pytest.mark.both_eras
async def test_the_url_and_secret_come_from_the_users_form(connect: Callable[..., Any], svc: Services) -> None:
    form = Form("accept", {"url": svc.url("feishu"), "secret": CANARY_SECRET})
    async with connect(elicitation_callback=form) as client:
        added = await client.call_tool("configure_notifications", {"kind": "feishu", "test": True})
        text = result_text(added)
        assert not added.is_error, text
        assert added.structured_content["sinks"][0]["accepted"] is True
        assert CANARY_SECRET not in text and "hook-id" not in text
    assert form.asked and "feishu bot" in form.asked[0]
    assert [r.verdict for r in svc.of("feishu")] == ["ok"]


@pytest.mark.both_eras
async def test_a_declined_form_changes_nothing(connect: Callable[..., Any], svc: Services) -> None:
    async with connect(elicitation_callback=Form("decline")) as client:
        assert "declined" in await refused(client, "configure_notifications", {"kind": "slack"})
        assert (await ok(client, "configure_notifications", {}))["sinks"] == []
    assert svc.received == []
