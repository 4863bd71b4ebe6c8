"""A proxy credential given as the user name alone (``http://TOKEN@proxy``) is masked like a password (issue 20).

Seen before the fix: ``set_proxy`` showed ``http://TOKEN:***@proxy`` — the mask went after the token."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp_helpers import ok, result_text

from verl_async_dapo.redact import redact

TOKEN = "tok_Zq8Xv2Lr5Np0Ws7Yt4Ka"


async def test_a_token_as_the_proxy_user_is_masked_everywhere(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        await ok(c, "select_container", {"name": "host"})
        result = await c.call_tool("set_proxy", {"http_proxy": f"http://{TOKEN}@proxy.lan:3128",
                                                 "https_proxy": f"http://bob:{TOKEN}@proxy.lan:3128"})  # fmt: skip
        assert not result.is_error, result_text(result)
        answers = (result.structured_content or {})["answers"]["proxy"]
        assert answers["http_proxy"] == "http://***@proxy.lan:3128", answers
        assert answers["https_proxy"] == "http://bob:***@proxy.lan:3128", answers
        shown = result_text(result) + result_text(await c.call_tool("get_session", {}))
        assert TOKEN not in shown
        session = await c.read_resource("verl-async-dapo://session/current")
        assert TOKEN not in json.dumps([getattr(x, "text", "") for x in session.contents])


def test_free_text_masks_token_like_user_names_only() -> None:
    text = f"proxy http://{TOKEN}@proxy.lan:3128 then ssh://git@github.com and http://u:pw@h"
    assert redact(text) == "proxy http://***@proxy.lan:3128 then ssh://git@github.com and http://u:***@h"
