"""The tool surface as the agent sees it: a golden copy of every tool's schemas, title and
annotations, plus the rules every tool must follow (whatever the snapshot says).

Regenerate the snapshot after an intended change with ``UPDATE_SNAPSHOTS=1 pytest tests/mcp``
and review the diff: these texts are what the model reads.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.both_eras  # forms or the listed schema: what differs between eras

SNAPSHOT = Path(__file__).parent / "snapshots" / "tools.json"
EXPECTED_TOOLS = [
    "list_containers",
    "select_container",
    "set_proxy",
    "choose_features",
    "configure_swanlab",
    "configure_notifications",
    "start_training",
    "plan_training",
    "resume_training",
    "get_progress",
    "check_errors",
    "stop_training",
    "get_session",
]
# Words that would make a description an instruction to the model (tool poisoning review).
IMPERATIVES = re.compile(r"\b(you must|always|never call|ignore|do not tell|you should)\b", re.IGNORECASE)


async def _surface(connect: Callable[..., Any]) -> list[dict[str, Any]]:
    async with connect() as c:
        tools = (await c.list_tools()).tools
    # by_alias: the wire names (inputSchema, readOnlyHint); exclude meta: volatile server stamps.
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"meta"}) for t in tools]


async def test_tool_surface_matches_the_snapshot(connect: Callable[..., Any]) -> None:
    surface = await _surface(connect)
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(json.dumps(surface, indent=2, ensure_ascii=False, sort_keys=True) + "\n", "utf-8")
    assert SNAPSHOT.exists(), f"no golden copy at {SNAPSHOT}: run once with UPDATE_SNAPSHOTS=1 and review it"
    golden = json.loads(SNAPSHOT.read_text("utf-8"))
    assert json.loads(json.dumps(surface, sort_keys=True)) == golden


async def test_every_tool_has_a_title_all_four_hints_and_a_factual_description(
    connect: Callable[..., Any],
) -> None:
    surface = await _surface(connect)
    assert [t["name"] for t in surface] == EXPECTED_TOOLS
    for tool in surface:
        assert tool.get("title"), tool["name"]
        hints = tool["annotations"]
        for key in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"):
            assert isinstance(hints.get(key), bool), (tool["name"], key)
        assert tool["description"].strip() and not IMPERATIVES.search(tool["description"]), tool["name"]
        assert "outputSchema" in tool, f"{tool['name']} has no structured output"
        for name, prop in tool["inputSchema"].get("properties", {}).items():
            assert "description" in prop or "$ref" in prop or "anyOf" in prop, (tool["name"], name)
    by_name = {t["name"]: t["annotations"] for t in surface}
    read_only = {n for n, h in by_name.items() if h["readOnlyHint"]}
    assert read_only == {"list_containers", "plan_training", "get_progress", "check_errors", "get_session"}
    assert {n for n, h in by_name.items() if h["destructiveHint"]} == {"stop_training"}


async def test_resolver_parameters_are_hidden_from_the_model(connect: Callable[..., Any]) -> None:
    surface = {t["name"]: t for t in await _surface(connect)}
    assert "decision" not in surface["stop_training"]["inputSchema"]["properties"]
    assert "confirm" in surface["stop_training"]["inputSchema"]["properties"]
    assert "key_answer" not in surface["configure_swanlab"]["inputSchema"]["properties"]
