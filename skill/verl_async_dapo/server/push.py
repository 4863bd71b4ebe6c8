"""While an agent is connected, the MCP server pushes the runs' notify-worthy events to it (no polling needed).

The supervisor records every event in the state store; this task (started by the server's lifespan, active
from the first tool call on) reads the new ones once a second and, for each event the notification sinks
would send (errors, plus a finished run):

- publishes a resource-updated event for the run's resource ``verl-async-dapo://runs/{run_id}/log`` on the
  SDK's subscription bus: 2026-07-28 clients receive it over ``subscriptions/listen``;
- on handshake-era connections (2025-11-25 and earlier, which still have them) sends
  ``notifications/resources/updated`` for the same URI and a ``notifications/message`` log notification
  whose data is the event (kind, run, target, title, text, the one tool to look closer).

A handshake-era connection is remembered when it calls a tool (the SDK's ``ServerSession`` is a per-request
proxy; its connection's standalone channel outlives the request), at most ``MAX_SESSIONS`` of them, and
forgotten when a push to it fails (a closed connection). A failed push is logged and dropped: the agent can
always ask get_progress / check_errors.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import anyio

from verl_async_dapo.context import AppContext

log = logging.getLogger("verl_async_dapo.server")

PUSH_SECONDS = 1.0
MODERN = "2026-07-28"
LOGGER_NAME = "verl-async-dapo"
MAX_SESSIONS = 32


def run_uri(run_id: str) -> str:
    return f"verl-async-dapo://runs/{run_id}/log"


class Pusher:
    def __init__(self, server: Any) -> None:
        self._server = server
        self._legacy: dict[int, Any] = {}  # id(connection) → the latest session proxy on it
        self._active = anyio.Event()

    def saw(self, session: Any, protocol_version: str | None) -> None:
        """Called on every tool call: start pushing, and remember a handshake-era session."""
        if not self._active.is_set():
            self._active.set()
        if session is not None and (protocol_version or "") < MODERN:
            key = id(getattr(session, "_connection", session))
            self._legacy.pop(key, None)
            self._legacy[key] = session
            while len(self._legacy) > MAX_SESSIONS:
                self._legacy.pop(next(iter(self._legacy)))

    async def run(self, app: AppContext) -> None:
        from verl_async_dapo.runs import events

        await self._active.wait()
        since = time.time()  # push what happens from the first tool call on; the agent asks for the past
        cursor: int | None = None
        while True:
            try:  # the store off the event loop: a locked state.db must never freeze the server (issue 20)
                if not events.store_opened(app):
                    pass  # a tool opens the store first: opening it here too would queue behind (or ahead of) that
                elif cursor is None:
                    cursor = await anyio.to_thread.run_sync(events.latest_event_id, app, since)
                else:
                    cursor = await self._push_new(app, cursor)
            except Exception as exc:  # never the server's end (e.g. a store busy for longer than we wait)
                log.warning("event push: %s", app.scrub(f"{type(exc).__name__}: {exc}"))
            await anyio.sleep(PUSH_SECONDS if cursor is not None else 0.05)

    async def _push_new(self, app: AppContext, cursor: int) -> int:
        from verl_async_dapo.runs import events

        cursor, pushed = await anyio.to_thread.run_sync(events.pushable_events, app, cursor)
        for event in pushed:
            payload = {**event.payload, "resource": run_uri(event.run_id)}
            await self._publish(run_uri(event.run_id), payload, event.level)
        return cursor

    async def _publish(self, uri: str, payload: dict[str, Any], level: str) -> None:
        from mcp.shared.exceptions import MCPDeprecationWarning
        from mcp.shared.subscriptions import ResourceUpdated

        bus = getattr(self._server, "_subscriptions", None)
        if bus is not None:
            await bus.publish(ResourceUpdated(uri=uri))
        for key, session in list(self._legacy.items()):
            try:
                await session.send_resource_updated(uri)
                with warnings.catch_warnings():  # deprecated in 2026-07-28 (SEP-2577), still in these versions
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await session.send_log_message(level="error" if level == "error" else "warning", data=payload,
                                                   logger=LOGGER_NAME)  # fmt: skip
            except Exception as exc:  # a closed connection
                log.info("push to a session failed (%s); forgetting it", type(exc).__name__)
                self._legacy.pop(key, None)
