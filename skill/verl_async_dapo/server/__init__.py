"""The MCP server: tools, resources and a prompt over the session and run services.

Thin by design: each tool validates its arguments (pydantic, via the signature), calls one
service in ``sessions`` / ``runs``, turns the expected failures into ``ToolError`` with a
scrubbed, actionable message, and returns a pydantic model (structured output).
The ``MCPServer`` instance, its lifespan and the error and registration helpers are in ``server.app``.

Every tool is ``async`` and calls the services off the event loop (``off_loop``, a worker thread):
a state.db locked by another process then holds up that one call for a bounded time, never the
server (issue 20); the store gives each thread its own SQLite connection.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, Resolve
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError

from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import UserInputError
from verl_async_dapo.server import models as wire
from verl_async_dapo.server.app import (
    NotAsked,
    app_of,
    can_elicit,
    lazy_module,
    live_apps,
    mcp,
    off_loop,
    resource_errors,
    service_errors,
    tool,
)
from verl_async_dapo.server.menu import container_menu

# The services load on the first tool call, not at start: initialize and tools/list need none of them, and they
# pull in the log rules, verl's planner, preflight and the SwanLab checks (cold start: bench/RESULTS.md).
if TYPE_CHECKING:
    from verl_async_dapo import run_charts, runs, sessions
    from verl_async_dapo.notify import service as notify_service
else:
    runs = lazy_module("verl_async_dapo.runs")
    run_charts = lazy_module("verl_async_dapo.run_charts")
    notify_service = lazy_module("verl_async_dapo.notify.service")
    sessions = lazy_module("verl_async_dapo.sessions")

LOG_TAIL_BYTES = 64 << 10


def _session(view: sessions.SessionView) -> wire.SessionOut:
    return wire.SessionOut.model_validate(view.model_dump())


# -- question 1: container ----------------------------------------------------------------


@tool("List containers", read_only=True, idempotent=True, open_world=True)
async def list_containers(ctx: Context[AppContext]) -> wire.ContainersOut:
    """Lists the Docker containers on this machine, the host target and the option to create a new
    container, with the setup session's next question. Question 1 of 4 of a training setup; also
    answers "which containers are there?". Works without Docker (then only the host is listed, with
    the reason Docker is unreachable)."""
    app = app_of(ctx)
    with service_errors(app):
        targets = await off_loop(sessions.list_targets)
        view = await off_loop(sessions.view, app)
    containers = [wire.ContainerOut(name=t.name, kind=t.kind.value, state=t.state, image=t.image, gpus=t.gpus,
                               managed=t.managed, note=t.note) for t in targets]  # fmt: skip
    docker_note = next((c.note for c in containers if c.kind == "host" and c.note), None)
    menu_zh, menu_en = container_menu(containers, can_create=docker_note is None)
    create = wire.CreateOption(how="select_container with create={name, image, gpus, shm_size, mounts}; the image "
                                   "must be on this machine already (docker pull IMAGE first). The container is "
                                   "confined; extra privileges only if the user asks (privileges)")  # fmt: skip
    return wire.ContainersOut(
        containers=containers,
        create_new=None if docker_note else create,
        docker_note=docker_note, menu_zh=menu_zh, menu_en=menu_en, session=_session(view),
    )  # fmt: skip


async def _ask_creation(
    create: wire.CreateArg, ctx: Context[AppContext]
) -> Elicit[wire.ContainerConfirmation] | NotAsked:
    """Ask the user before mounting host directories outside the allow-list or adding privileges (the model cannot
    say yes for them: without a form the call is refused, with what the user can do instead)."""
    if create is None or not (create.mounts or create.privileges):
        return NotAsked("not_needed")
    app = app_of(ctx)
    spec = create.to_spec()
    with service_errors(app):
        review = await off_loop(sessions.creation_review, app, spec)
    if not review.needs_yes:
        return NotAsked("not_needed")
    if not can_elicit(ctx):
        return NotAsked("cannot_ask")
    # Deterministic text: the SDK re-runs resolvers each round and pins answers to the question.
    return Elicit(review.question(spec), wire.ContainerConfirmation)


@tool("Select container", read_only=False, idempotent=False, open_world=True)
async def select_container(
    ctx: Context[AppContext],
    creation_answer: Annotated[ElicitationResult[wire.ContainerConfirmation], Resolve(_ask_creation)],
    name: wire.ContainerChoice = None,
    create: wire.CreateArg = None,
    allow_shared_gpus: wire.AllowSharedGpus = False,
    allow_no_gpus: wire.AllowNoGpus = False,
) -> wire.SessionOut:
    """Records the answer to question 1 (where training runs): an existing container, 'host', or a
    new container created from an image. Starts a new setup session when none is open; may be
    called again to change the answer before training starts. A new container is confined (no added
    capabilities, no-new-privileges, Docker's seccomp profile, its own network, IPC and PID namespaces);
    mounts outside the allow-list and any extra privileges are confirmed by the user in a form, and a
    client without forms is refused (the user can pre-approve them in the server's environment)."""
    app = app_of(ctx)
    data = creation_answer.data if isinstance(creation_answer, AcceptedElicitation) else None
    if isinstance(data, wire.ContainerConfirmation):
        if not data.create:
            raise ToolError("not created: the user declined the container's mounts or privileges in the "
                            "confirmation form; nothing was changed")  # fmt: skip
        confirmed = True
    elif isinstance(data, NotAsked):
        confirmed = False  # not needed, or no form: the service refuses what needs the user's yes
    else:
        raise ToolError("not created: the user declined the container's mounts or privileges in the confirmation "
                        "form; nothing was changed")  # fmt: skip
    with service_errors(app):
        view = await off_loop(sessions.select_container, app, name, create.to_spec() if create else None,
                              allow_shared_gpus=allow_shared_gpus, user_confirmed=confirmed,
                              allow_no_gpus=allow_no_gpus)  # fmt: skip
    return _session(view)


# -- question 2: proxy --------------------------------------------------------------------


@tool("Set proxy", read_only=False, idempotent=True, open_world=False)
async def set_proxy(
    ctx: Context[AppContext],
    http_proxy: wire.ProxyUrl = None,
    https_proxy: wire.ProxyUrl = None,
    no_proxy: wire.NoProxy = None,
) -> wire.SessionOut:
    """Records the answer to question 2: the proxy for the training process (all empty = no
    proxy). A password in a proxy URL is kept in the secret store and shown masked."""
    app = app_of(ctx)
    with service_errors(app):
        return _session(await off_loop(sessions.set_proxy, app, http_proxy, https_proxy, no_proxy))


# -- question 3: features -----------------------------------------------------------------


@tool("Choose features", read_only=False, idempotent=True, open_world=False)
async def choose_features(
    ctx: Context[AppContext],
    names: wire.FeatureNames,
) -> wire.SessionOut:
    """Records the answer to question 3: the features the user asked for explicitly. Memory features
    (offload, recompute) are added automatically after an out-of-memory error unless turned off."""
    app = app_of(ctx)
    with service_errors(app):
        return _session(await off_loop(sessions.choose_features, app, names))


# -- question 4: SwanLab ------------------------------------------------------------------


async def _ask_swanlab_key(
    mode: wire.SwanlabModeName | None, host: str | None, api_key: str | None, ctx: Context[AppContext]
) -> Elicit[wire.SwanlabKeyForm] | NotAsked:
    """Ask the user for the key in the client's form, so it never passes through the model."""
    app = app_of(ctx)
    with service_errors(app):  # not for a call that only reports the setting, nor with a key given
        if not await off_loop(sessions.swanlab_key_form_wanted, app, mode, host, api_key):
            return NotAsked("not_needed")
    if not can_elicit(ctx):
        return NotAsked("cannot_ask")
    # Deterministic text: the SDK re-runs resolvers each round and pins answers to the question.
    where = host or "the SwanLab cloud (swanlab.cn)"
    return Elicit(f"SwanLab API key for {where} (goes to the verl-async-dapo server only)", wire.SwanlabKeyForm)


@tool("Configure SwanLab", read_only=False, idempotent=True, open_world=True)
async def configure_swanlab(
    ctx: Context[AppContext],
    key_answer: Annotated[ElicitationResult[wire.SwanlabKeyForm], Resolve(_ask_swanlab_key)],
    mode: wire.SwanlabModeArg = None,
    host: wire.SwanlabHost = None,
    api_key: wire.SwanlabKey = None,
    log_dir: wire.SwanlabLogDir = None,
    save: wire.SwanlabSave = False,
) -> wire.SwanlabOut:
    """Question 4: SwanLab monitoring (host + API key, or local / disabled). Reports whether SwanLab
    is already configured by the environment or the config file, in which case the question is
    skipped. The key is checked against the server before it is accepted and is never returned."""
    app = app_of(ctx)
    with service_errors(app):
        view = await off_loop(sessions.view, app)
        configured = sessions.preconfigured_swanlab(app)
    key_from: Literal["argument", "user", "none"] = "argument" if api_key else "none"
    if isinstance(key_answer, AcceptedElicitation) and isinstance(key_answer.data, wire.SwanlabKeyForm):
        api_key, key_from = key_answer.data.api_key, "user"
    elif not isinstance(key_answer, AcceptedElicitation):
        raise ToolError("the user declined to enter the SwanLab API key; nothing was changed. Other choices: "
                        "mode local (files only) or disabled, or the key as api_key")  # fmt: skip
    if mode is None and host is None and api_key is None and log_dir is None and not save:  # report, change nothing
        with service_errors(app):
            source, setting = await off_loop(sessions.swanlab_setting, app, view)
        return wire.SwanlabOut(already_configured=configured is not None, configured_from=source, changed=False,
                               setting=setting, key_from="none", session=_session(view))  # fmt: skip
    if (mode or "cloud") == "cloud" and api_key is None and await off_loop(sessions.swanlab_question_open, app):
        raise ToolError(
            "SwanLab cloud mode needs an API key and this client cannot show the user a form for it: "
            "ask the user for the key and pass api_key, set SWANLAB_API_KEY (and SWANLAB_HOST) in the "
            "server's environment, or choose mode local or disabled"
        )
    with service_errors(app):
        new_view, check = await off_loop(
            sessions.configure_swanlab,
            app,
            mode=mode or "cloud",
            host=host,
            api_key=api_key,
            log_dir=log_dir,
            save=save,
        )
    return wire.SwanlabOut(
        already_configured=configured is not None, configured_from="session", setting=None, changed=True,
        key_from=key_from, key_check=wire.KeyCheckOut(
            status=check.status, message=app.scrub(check.message),
            username=app.scrub(check.username) if check.username else None,
            server_said=app.scrub(check.server_said) if check.server_said else None,
        ),
        session=_session(new_view),
    )  # fmt: skip


# -- notifications ------------------------------------------------------------------------


async def _ask_notify_sink(
    kind: str | None, url: str | None, ctx: Context[AppContext]
) -> Elicit[wire.NotifySinkForm] | NotAsked:
    """Ask the user for the URL (and secret) in the client's form, so neither passes through the model. A sink
    already saved needs none again: kind alone then changes its events (or tests it)."""
    if kind is None or kind == "desktop" or url or _sink_saved(app_of(ctx), kind):
        return NotAsked("not_needed")
    if not can_elicit(ctx):
        return NotAsked("cannot_ask")
    return Elicit(f"{kind} bot for verl-async-dapo notifications: its webhook URL, and its signing secret if it "
                  "has one (both go to the verl-async-dapo server only)", wire.NotifySinkForm)  # fmt: skip


def _sink_saved(app: AppContext, kind: str) -> bool:
    from verl_async_dapo.exceptions import NotifyConfigError

    try:
        return notify_service.saved_sink(app, kind)
    except NotifyConfigError:  # an unreadable file: the call itself reports it
        return False


@tool("Configure notifications", read_only=False, idempotent=True, open_world=True)
async def configure_notifications(
    ctx: Context[AppContext],
    sink_answer: Annotated[ElicitationResult[wire.NotifySinkForm], Resolve(_ask_notify_sink)],
    kind: wire.NotifyKindArg = None,
    url: wire.NotifyUrlArg = None,
    secret: wire.NotifySecretArg = None,
    events: wire.NotifyEventsArg = None,
    every_n_steps: wire.NotifyEveryArg = None,
    remove: wire.NotifyKindArg = None,
    test: wire.NotifyTestArg = False,
) -> wire.NotifyOut:
    """Where the supervisor tells the user about trouble when no agent is watching: a generic JSON webhook,
    Slack, Feishu/Lark, DingTalk, WeCom bot or a desktop notification. Without arguments it only shows what is
    configured (environment > config file). With kind (+ url, + secret for signed bots; where the client shows
    forms the user enters them there instead) it saves the sink. Nothing is sent unless test is true: then a
    test message goes first (with kind: the sink is saved only if the service accepted it) and the service's
    answer comes back as its status and a short quoted excerpt. Errors only by default (OOM relaunch, failure,
    stall, target gone, relaunch budget exhausted); events adds succeeded / progress: with kind for that sink
    only (a saved sink needs no url again), else the default. URLs and secrets go to the secret store and are
    never shown."""
    app = app_of(ctx)
    if isinstance(sink_answer, AcceptedElicitation) and isinstance(sink_answer.data, wire.NotifySinkForm):
        url, secret = sink_answer.data.url, sink_answer.data.secret or None
    elif not isinstance(sink_answer, AcceptedElicitation):
        raise ToolError("the user declined to enter the webhook URL; nothing was changed")
    elif kind not in (None, "desktop") and not url and getattr(sink_answer.data, "why", "") == "cannot_ask":
        raise ToolError(f"the {kind} sink needs its webhook URL and this client cannot show the user a form for it: "
                        "ask the user and pass url (and secret), or set VAD_NOTIFY_* in the server's environment")  # fmt: skip
    with service_errors(app):
        report = await notify_service.configure(app, kind=kind, url=url, secret=secret, events=events,
                                                every_n_steps=every_n_steps, remove=remove, test=test)  # fmt: skip
    out = wire.NotifyOut.model_validate(report.model_dump())
    for sink in out.sinks:
        sink.answer = app.scrub(sink.answer) if sink.answer else None
    return out


# -- the run ------------------------------------------------------------------------------

# The tools register in import order, which is the tools' order: kept as written (isort off).
# isort: off
# start_training, plan_training and resume_training: registered here, after question 4.
from verl_async_dapo.server import training as server_training  # noqa: E402, F401

# get_progress, check_errors and stop_training: registered next (server/run_tools.py).
from verl_async_dapo.server import run_tools  # noqa: E402, F401
# isort: on


@tool("Get session", read_only=True, idempotent=True, open_world=False)
async def get_session(ctx: Context[AppContext]) -> wire.SessionOut:
    """The setup session: the answers so far, the next question (with the original skill's wording)
    and the next step. Useful after a restart or when unsure where the setup stands."""
    app = app_of(ctx)
    with service_errors(app):
        return _session(await off_loop(sessions.view, app))


# -- resources and the prompt -------------------------------------------------------------


@mcp.resource("verl-async-dapo://session/current", name="session", title="Current setup session",
              description="The setup session's answers and next question (JSON)",
              mime_type="application/json")  # fmt: skip
async def session_resource() -> str:
    if not live_apps:
        raise ResourceError("the server is not running")
    app = live_apps[-1]
    try:
        view = await off_loop(sessions.view, app)
    except Exception as exc:
        raise resource_errors(app, exc) from None
    return _session(view).model_dump_json(indent=2)


@mcp.resource("verl-async-dapo://runs/{run_id}/log", name="run_log", title="Training log tail",
              description="The last 64 KiB of a run's current training log (scrubbed, fenced as data)",
              mime_type="text/plain")  # fmt: skip
async def run_log_resource(run_id: str, ctx: Context) -> str:
    if not re.fullmatch(wire.RUN_ID_PATTERN, run_id):
        raise ResourceNotFoundError(f"{run_id[:40]!r} is not a run id (run_…)")
    app: AppContext = ctx.request_context.lifespan_context
    try:
        known = await off_loop(runs.run_known, app, run_id)
    except Exception as exc:
        raise resource_errors(app, exc) from None
    if not known:
        raise ResourceNotFoundError(f"unknown run {run_id!r}; get_progress shows the latest run's id")
    try:
        run, tail = await off_loop(runs.log_tail, app, run_id, LOG_TAIL_BYTES)
        if tail is None:
            return wire.log_resource_text(run.id, None, run.status)
    except ResourceError:
        raise
    except Exception as exc:
        raise resource_errors(app, exc) from None
    text = app.scrub(tail.decode("utf-8", errors="replace"))
    return wire.log_resource_text(run.id, wire.as_log_data(text, limit=LOG_TAIL_BYTES), run.status)


@mcp.prompt(name="start_dapo_training", title="Start DAPO training",
            description="Walks through the setup questions in order, then starts verl DAPO training")  # fmt: skip
def start_dapo_training() -> str:
    return wire.START_PROMPT


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run the server: stdio (default) or streamable HTTP (see ``server.http`` for its safeguards)."""
    if transport == "stdio":
        mcp.run("stdio")
        return
    if transport == "http":
        from verl_async_dapo.server.http import serve_http

        serve_http(mcp, host=host, port=port)
        return
    raise UserInputError(f"unknown transport {transport!r}: use stdio or http")
