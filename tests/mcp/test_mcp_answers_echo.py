"""What the agent can read back: configure_swanlab with no arguments reports the setting and changes nothing (no
form is asked), choose_features echoes the effective feature list, create_new says the image must be pulled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp.types import ElicitResult
from mcp_helpers import answer_first_three, ok

from verl_async_dapo.context import AppContext


class RecordingForm:
    def __init__(self) -> None:
        self.asked: list[Any] = []

    async def __call__(self, _ctx: Any, params: Any) -> ElicitResult:
        self.asked.append(params)
        return ElicitResult(action="decline")


@pytest.mark.both_eras
async def test_configure_swanlab_without_arguments_reports_and_changes_nothing(connect: Callable[..., Any]) -> None:
    form = RecordingForm()
    async with connect(elicitation_callback=form) as c:
        await answer_first_three(c)
        report = await ok(c, "configure_swanlab")
        assert report["changed"] is False and report["configured_from"] is None
        assert report["setting"].startswith("not configured: pass host"), report
        assert report["session"]["next_question"] == "swanlab"  # still open: nothing was answered
        assert form.asked == []  # a report is not a reason to pop up a key form
        await ok(c, "configure_swanlab", {"mode": "local"})
        again = await ok(c, "configure_swanlab", {})
        assert again["changed"] is False and again["configured_from"] == "session"
        assert again["setting"] == "local (from this session's answer)"
        assert again["session"]["state"] == "ready"


async def test_choose_features_echoes_the_effective_list(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        s = await answer_first_three(c)  # "default"
        assert s["features"] == ["flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing"]
        s = await ok(c, "choose_features", {"names": ["offload", "no_flash_attn"]})
        assert s["features"] == ["dynamic_batch", "remove_padding", "gradient_checkpointing", "offload"]
        assert (await ok(c, "get_session"))["features"] == s["features"]


async def test_create_new_says_the_image_must_be_pulled_first(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        listing = await ok(c, "list_containers")
        if listing["docker_note"] is None:
            assert "docker pull" in listing["create_new"]["how"]
        else:  # no Docker here: nothing to create, so no such choice
            assert listing.get("create_new") is None


async def test_create_without_gpus_is_refused_before_anything_is_created(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        result = await c.call_tool("select_container", {"create": {"name": "vad-nogpu", "image": "busybox",
                                                                   "gpus": "none"}})  # fmt: skip
        assert result.is_error
        text = result.content[0].text  # type: ignore[union-attr]
        assert "verl needs GPUs" in text and "allow_no_gpus=true" in text and "--allow-no-gpus" not in text
    ctx = AppContext.from_environment()
    try:
        assert ctx.store.current_session() is None  # no session was opened by the refusal
    finally:
        ctx.close()
