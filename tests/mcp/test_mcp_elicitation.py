"""The SwanLab key asked from the user in the client's form (so the model never sees it), with the
fallbacks for declines and for clients without form support. Stop confirmation is covered with a
real run in test_mcp_training.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from mcp.types import ElicitResult
from mcp_helpers import GOOD_SWANLAB_KEY, answer_first_three, ok, refused, result_text

from mcp import Client

pytestmark = pytest.mark.both_eras  # forms or the listed schema: what differs between eras


class Form:
    """An elicitation callback that records what it was asked and answers as told."""

    def __init__(self, action: str = "accept", content: dict[str, Any] | None = None) -> None:
        self.action, self.content = action, content
        self.asked: list[Any] = []

    async def __call__(self, _ctx: Any, params: Any) -> ElicitResult:
        self.asked.append(params)
        return ElicitResult(action=self.action, content=self.content if self.action == "accept" else None)  # type: ignore[arg-type]


async def everything_shown(client: Client, *results: Any) -> str:
    """Every tool output of the test plus what the session tools and resource show now."""
    shown = [result_text(r) for r in results]
    shown.append(result_text(await client.call_tool("get_session", {})))
    shown.append(result_text(await client.call_tool("list_containers", {})))
    read = await client.read_resource("verl-async-dapo://session/current")
    shown.append(read.contents[0].text)  # type: ignore[union-attr]
    return "\n".join(shown)


async def test_key_from_the_form_never_reaches_the_model(connect: Callable[..., Any], fake_swanlab: Any) -> None:
    form = Form(content={"api_key": GOOD_SWANLAB_KEY})
    async with connect(elicitation_callback=form) as c:
        await answer_first_three(c)
        result = await c.call_tool("configure_swanlab", {"mode": "cloud", "host": fake_swanlab.host})
        assert not result.is_error, result_text(result)
        out = result.structured_content
        assert out is not None
        assert out["key_from"] == "user" and out["changed"] is True
        assert out["key_check"]["status"] == "ok"
        assert out["session"]["state"] == "ready"
        assert len(form.asked) == 1
        message = form.asked[0].message
        assert fake_swanlab.host in message
        assert set(form.asked[0].requested_schema["properties"]) == {"api_key"}
        assert GOOD_SWANLAB_KEY not in await everything_shown(c, result)
    assert [r.headers.get("authorization") for r in fake_swanlab.requests] == [GOOD_SWANLAB_KEY]


async def test_a_rejected_key_from_the_form_is_not_echoed(connect: Callable[..., Any], fake_swanlab: Any) -> None:
    wrong = "wrong-key-0123456789abcdef-xyz"
    fake_swanlab.behaviour = "echo"  # a careless server that quotes the key back in its error
    async with connect(elicitation_callback=Form(content={"api_key": wrong})) as c:
        await answer_first_three(c)
        result = await c.call_tool("configure_swanlab", {"mode": "cloud", "host": fake_swanlab.host})
        assert result.is_error
        assert "SwanLab" in result_text(result)
        assert wrong not in await everything_shown(c, result)
        assert (await ok(c, "get_session"))["next_question"] == "swanlab"


async def test_declining_the_form_changes_nothing(connect: Callable[..., Any], fake_swanlab: Any) -> None:
    async with connect(elicitation_callback=Form(action="decline")) as c:
        await answer_first_three(c)
        message = await refused(c, "configure_swanlab", {"mode": "cloud", "host": fake_swanlab.host})
        assert "declined" in message and "local" in message
        assert (await ok(c, "get_session"))["next_question"] == "swanlab"
    assert fake_swanlab.requests == []


async def test_without_form_support_the_key_must_be_passed(connect: Callable[..., Any], fake_swanlab: Any) -> None:
    async with connect() as c:
        await answer_first_three(c)
        message = await refused(c, "configure_swanlab", {"host": fake_swanlab.host})
        assert "api_key" in message and "SWANLAB_API_KEY" in message
        out = await ok(c, "configure_swanlab", {"host": fake_swanlab.host, "api_key": GOOD_SWANLAB_KEY})
        assert out["key_from"] == "argument" and out["key_check"]["status"] == "ok"
        assert GOOD_SWANLAB_KEY not in json.dumps(out)


async def test_a_key_given_as_argument_is_not_asked_again(connect: Callable[..., Any], fake_swanlab: Any) -> None:
    form = Form(content={"api_key": "never-used-0123456789"})
    async with connect(elicitation_callback=form) as c:
        await answer_first_three(c)
        out = await ok(c, "configure_swanlab", {"host": fake_swanlab.host, "api_key": GOOD_SWANLAB_KEY})
        assert out["key_from"] == "argument"
        local = await ok(c, "configure_swanlab", {"mode": "local"})  # revising: no key needed, none asked
        assert local["key_from"] == "none"
    assert form.asked == []


async def test_no_form_before_the_swanlab_question(connect: Callable[..., Any]) -> None:
    form = Form(content={"api_key": "never-used-0123456789"})
    async with connect(elicitation_callback=form) as c:
        await ok(c, "select_container", {"name": "host"})
        assert "set_proxy" in await refused(c, "configure_swanlab", {"mode": "cloud"})
    assert form.asked == []


async def test_saved_setting_skips_the_question_next_time(connect: Callable[..., Any], fake_swanlab: Any) -> None:
    async with connect() as c:
        await answer_first_three(c)
        await ok(c, "configure_swanlab", {"host": fake_swanlab.host, "api_key": GOOD_SWANLAB_KEY, "save": True})
    async with connect() as c:  # a later server process: the config file now answers question 4
        session = await ok(c, "get_session")
        assert session["swanlab_preconfigured"] is True and session["swanlab_source"] == "config_file"
        result = await c.call_tool("configure_swanlab", {})
        assert not result.is_error
        assert result.structured_content is not None and result.structured_content["already_configured"] is True
        assert GOOD_SWANLAB_KEY not in result_text(result)
