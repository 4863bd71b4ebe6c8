"""Helpers for the MCP tests: call a tool and insist it worked (or was refused)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from mcp.types import CallToolResult

from mcp import Client


def result_text(result: CallToolResult) -> str:
    """Everything a tool result shows the model: every text block plus the structured content."""
    texts = [getattr(block, "text", "") for block in result.content]
    return "\n".join(texts) + "\n" + json.dumps(result.structured_content, ensure_ascii=False)


async def ok(client: Client, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, f"{tool}({args}) failed: {result_text(result)}"
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, args: dict[str, Any] | None = None) -> str:
    result = await client.call_tool(tool, args or {})
    assert result.is_error, f"{tool}({args}) should have been refused: {result_text(result)}"
    return result_text(result)


async def answer_first_three(client: Client) -> dict[str, Any]:
    """Questions 1-3 the simplest way: the host, no proxy, the default features."""
    await ok(client, "list_containers")
    await ok(client, "select_container", {"name": "host"})
    await ok(client, "set_proxy", {})
    return await ok(client, "choose_features", {"names": ["default"]})


def swanlab_fixtures() -> Any:
    """tests/swanlab/conftest.py as a module (its fake SwanLab login server and GOOD_KEY), loaded once."""
    name = "vad_tests_swanlab_fixtures"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "swanlab" / "conftest.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


GOOD_SWANLAB_KEY: str = swanlab_fixtures().GOOD_KEY


def stop_active_runs() -> None:
    """A fixture's teardown: stop every run the test left active (its supervisor and job end with it)."""
    import anyio

    from verl_async_dapo import runs
    from verl_async_dapo.context import AppContext
    from verl_async_dapo.status import ACTIVE_RUN_STATUSES

    app = AppContext.from_environment()
    try:
        for row in app.store.runs(50):
            if row.status in ACTIVE_RUN_STATUSES:
                anyio.run(runs.stop_training, app, row.id)
    finally:
        app.close()
