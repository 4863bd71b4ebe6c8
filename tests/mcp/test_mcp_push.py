"""While an agent is connected, a run's notify-worthy events are pushed to it: a resource-updated event for the
run's resource over ``subscriptions/listen`` (2026-07-28), and on handshake-era connections
``notifications/resources/updated`` plus a log notification carrying the event."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from mcp.shared.subscriptions import ResourceUpdated
from mcp.types import LoggingMessageNotificationParams, ResourceUpdatedNotification
from mcp_helpers import ok

from harness.records import run_spec
from mcp import Client
from verl_async_dapo.server import mcp
from verl_async_dapo.server.push import PUSH_SECONDS
from verl_async_dapo.store import Store


def _run(home: Path) -> tuple[Store, str]:
    store = Store(home / "state.db")
    sid = store.create_session()
    return store, store.create_run(sid, "jins", run_spec("jins"))


async def test_a_modern_client_hears_of_a_failure_over_listen() -> None:
    async with Client(mcp, mode="auto") as client:
        await ok(client, "get_session")  # the first tool call starts the pushes
        store, run_id = _run(Path(os.environ["VERL_ASYNC_DAPO_HOME"]))
        uri = f"verl-async-dapo://runs/{run_id}/log"
        async with client.listen(resource_subscriptions=[uri]) as sub:
            store.add_event("info", "run_created", "not pushed", run_id=run_id)
            store.add_event("error", "run_failed", "config_error: bad batch", run_id=run_id)
            with anyio.fail_after(15):
                event = await sub.__anext__()
        assert event == ResourceUpdated(uri=uri)
        store.close()


async def test_a_legacy_client_gets_resource_updated_and_a_log_message() -> None:
    logs: list[LoggingMessageNotificationParams] = []
    updates: list[str] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    async with Client(mcp, mode="legacy", logging_callback=on_log, message_handler=on_message) as client:
        await ok(client, "get_session")
        store, run_id = _run(Path(os.environ["VERL_ASYNC_DAPO_HOME"]))
        store.add_event("warning", "run_stalled", "attempt 1: no output for 1300 s", run_id=run_id,
                        data={"attempt": 1, "silent_seconds": 1300, "window_seconds": 1200, "step": 7})  # fmt: skip
        with anyio.fail_after(15):
            while not logs or not updates:
                await anyio.sleep(0.1)
        store.close()
    assert updates == [f"verl-async-dapo://runs/{run_id}/log"]
    (message,) = logs
    assert message.logger == "verl-async-dapo" and message.level == "warning"
    assert message.data["event"] == "run_stalled" and message.data["run_id"] == run_id
    assert message.data["title"] == f"[verl] training stalled: run {run_id} on jins"
    assert message.data["look_closer"].endswith(f"check_errors run_id={run_id})")


async def test_nothing_is_pushed_before_any_tool_call() -> None:
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    async with Client(mcp, mode="legacy", logging_callback=on_log):
        store, run_id = _run(Path(os.environ["VERL_ASYNC_DAPO_HOME"]))
        store.add_event("error", "run_failed", "boom", run_id=run_id)
        await anyio.sleep(2.5 * PUSH_SECONDS)  # the pusher's polls: two and a half find nothing to push
        store.close()
    assert logs == []
