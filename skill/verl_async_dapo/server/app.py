"""The MCP server's plumbing: the SDK's ``MCPServer`` instance, its lifespan and the tools' helpers.

``server`` registers the tools, resources and prompt on ``mcp`` with these helpers: one
``AppContext`` per server process, expected service failures turned into scrubbed ``ToolError`` /
``ResourceError``, tool registration with titles and annotations, and the elicitation checks.
Nothing here imports the services (``runs``, ``sessions``, the target registry): ``lazy_module``
is how ``server`` defers them to the first tool call.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import ModuleType
from typing import Any, Literal, ParamSpec, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver import server as _sdk_server
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations

import verl_async_dapo.server.models as wire
from verl_async_dapo.context import AppContext
from verl_async_dapo.errors import scrubbed_user_error

# The lifespan's lines keep the logger name they had before this module was split out of ``server``.
logger = logging.getLogger("verl_async_dapo.server")
_F = TypeVar("_F", bound=Callable[..., Any])
_P = ParamSpec("_P")
_R = TypeVar("_R")


async def off_loop(fn: Callable[_P, _R] | Callable[_P, Awaitable[_R]], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """Run a service off the event loop (issue 20: a locked state.db froze every tool for 26-28 s).

    The services call the store synchronously; in a worker thread a wait for another process's lock holds up that
    call only, and the store's per-thread connections let other tools read meanwhile. An async service runs in
    the worker thread's own event loop (its store calls are blocking too); it shares nothing with this loop.
    """
    call = functools.partial(fn, *args, **kwargs)
    if inspect.iscoroutinefunction(fn):
        return await anyio.to_thread.run_sync(anyio.run, call)  # type: ignore[arg-type]
    return await anyio.to_thread.run_sync(call)  # type: ignore[return-value]


def lazy_module(name: str) -> ModuleType:
    """The module, executed on its first attribute access (importlib's LazyLoader)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    return module


# The AppContexts of the lifespans now running. Static resources get no Context in the SDK,
# so the session resource reads the innermost one from here.
live_apps: list[AppContext] = []
pushers: dict[int, Any] = {}  # id(AppContext) → its server.push.Pusher


@asynccontextmanager
async def app_lifespan(server: MCPServer[AppContext]) -> AsyncIterator[AppContext]:
    """One AppContext per server process, built from the environment, closed at shutdown; and the task that
    pushes run events to connected agents (server.push; idle until the first tool call)."""
    from verl_async_dapo.server.push import Pusher

    app = AppContext.from_environment()
    live_apps.append(app)
    pushers[id(app)] = pusher = Pusher(server)
    logger.info("verl-async-dapo MCP server: state in %s", app.home)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pusher.run, app)
            try:
                yield app
            finally:
                tg.cancel_scope.cancel()
    finally:
        pushers.pop(id(app), None)
        live_apps.remove(app)
        app.close()


def _plain_logging(level: str = "INFO") -> None:
    """Plain lines on stderr (a stdio server's stderr is the host's log file)."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


# The SDK's MCPServer() configures logging through rich whenever rich is importable (it is here, as a dependency
# of a dependency): ~20 ms of start-up, and lines wrapped at a terminal width the log file does not have. Plain
# logging instead, for the construction only (cold start: bench/RESULTS.md).
_sdk_configure_logging = getattr(_sdk_server, "configure_logging", None)
_sdk_server.configure_logging = _plain_logging  # type: ignore[attr-defined]
try:
    mcp: MCPServer[AppContext] = MCPServer(
        "verl-async-dapo", title="verl async DAPO training", instructions=wire.INSTRUCTIONS, lifespan=app_lifespan
    )
finally:
    if _sdk_configure_logging is not None:
        _sdk_server.configure_logging = _sdk_configure_logging


def app_of(ctx: Context[AppContext]) -> AppContext:
    """The AppContext of the lifespan serving this request (and this session noted for event pushes)."""
    app = ctx.request_context.lifespan_context
    pusher = pushers.get(id(app))
    if pusher is not None:
        try:
            pusher.saw(ctx.session, ctx.protocol_version)
        except Exception:  # a push is a convenience: never a tool's failure
            logger.debug("could not note the session for pushes", exc_info=True)
    return app


@contextmanager
def service_errors(app: AppContext) -> Iterator[None]:
    """Expected failures → ToolError (scrubbed); anything else propagates as a sanitized crash."""
    try:
        yield
    except ToolError:
        raise
    except Exception as exc:
        message = scrubbed_user_error(exc, app.scrub)
        if message is None:
            raise
        raise ToolError(visible(message)) from None


def resource_errors(app: AppContext, exc: Exception) -> ResourceError:
    """An expected failure as a scrubbed ResourceError (to raise); anything else is re-raised here."""
    message = scrubbed_user_error(exc, app.scrub)
    if message is None:
        raise exc
    return ResourceError(visible(message))


def visible(message: str) -> str:
    """An error for the model without control or bidi characters (remote text in it is quoted at its source)."""
    from verl_async_dapo.untrusted import clean

    return clean(message, 4000, one_line=False)


def can_elicit(ctx: Context[AppContext]) -> bool:
    """The client declared form elicitation (a bare ``elicitation: {}`` counts, as in the SDK)."""
    caps = ctx.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def tool(
    title: str, *, read_only: bool, destructive: bool = False, idempotent: bool, open_world: bool
) -> Callable[[_F], _F]:
    """Register a tool with its title, all four annotations and its docstring (dedented) as description."""
    annotations = ToolAnnotations(title=title, read_only_hint=read_only, destructive_hint=destructive,
                                  idempotent_hint=idempotent, open_world_hint=open_world)  # fmt: skip

    def register(fn: _F) -> _F:
        from verl_async_dapo.server.strict import make_strict

        mcp.add_tool(fn, title=title, description=inspect.cleandoc(fn.__doc__ or ""), annotations=annotations)
        registered = mcp._tool_manager.get_tool(fn.__name__)
        assert registered is not None, fn.__name__
        make_strict(registered)  # an unknown argument is refused with the closest known one, never dropped
        return fn

    return register


class NotAsked:
    """What a resolver returns when it did not (or could not) ask the user."""

    def __init__(self, why: Literal["not_needed", "cannot_ask"]) -> None:
        self.why = why
