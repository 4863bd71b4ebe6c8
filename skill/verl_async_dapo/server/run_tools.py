"""The run's tools: get_progress (with its chart), check_errors, stop_training (confirmed by elicitation).

Thin like the rest of the server: the decisions are in ``runs``; registered after the training tools
(``server/__init__`` imports this module at that point, so the tools keep their order).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Annotated, Literal

from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent

import verl_async_dapo.server.models as wire
from verl_async_dapo.context import AppContext
from verl_async_dapo.server.app import NotAsked, app_of, can_elicit, lazy_module, off_loop, service_errors, tool
from verl_async_dapo.status import ACTIVE_RUN_STATUSES

if TYPE_CHECKING:
    from verl_async_dapo import run_charts, runs
else:
    runs = lazy_module("verl_async_dapo.runs")
    run_charts = lazy_module("verl_async_dapo.run_charts")

STOP_WAIT_SECONDS = 5.0  # stop_training returns "stopping" after this; the supervisor finishes the job


@tool("Training progress", read_only=True, idempotent=True, open_world=True)
async def get_progress(
    ctx: Context[AppContext], run_id: wire.RunId = None, chart: wire.ChartArg = False
) -> Annotated[CallToolResult, wire.ProgressOut]:
    """Progress of a training run: status, attempt, step / total, percent, ETA, latest metrics,
    features in force and the SwanLab link. Answers "how is training going?". With chart=true it
    also returns a PNG of the curves (score, response length, entropy, policy loss, step time, peak
    memory), one line per attempt with each relaunch marked."""
    app = app_of(ctx)
    with service_errors(app):
        out = wire.ProgressOut.model_validate((await off_loop(runs.get_progress, app, run_id)).model_dump())
        content: list[ContentBlock] = [TextContent(type="text", text=out.model_dump_json())]
        if chart:  # the chart module (and matplotlib) load only here: the server's cold start never pays for them
            png, note = await off_loop(run_charts.progress_chart, app, out.run_id)
            out.chart_note = note
            content = [TextContent(type="text", text=out.model_dump_json())]
            if png is not None:
                content.append(ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
    return CallToolResult(content=content, structured_content=out.model_dump(mode="json"))


@tool("Check errors", read_only=True, idempotent=True, open_world=False)
async def check_errors(ctx: Context[AppContext], run_id: wire.RunId = None) -> wire.ErrorsOut:
    """Errors of a training run, per attempt: the error category, an explanation, the fix, a short
    log excerpt, and what the supervisor did about it (e.g. relaunched with offload after an OOM);
    plus warnings that do not stop training (e.g. SwanLab rejecting metric uploads mid-run)."""
    app = app_of(ctx)
    with service_errors(app):
        report = wire.ErrorsOut.model_validate((await off_loop(runs.check_errors_live, app, run_id)).model_dump())
    for item in report.attempts:  # scrubbed by the service; fenced as data here
        item.excerpt = wire.as_log_data(item.excerpt) if item.excerpt else None
    for warning in report.warnings:
        warning.message = wire.as_log_data(warning.message) if warning.message else None
    return report


async def _ask_stop(run_id: str | None, ctx: Context[AppContext]) -> Elicit[wire.StopConfirmation] | NotAsked:
    """Confirm with the user in the client's form; say so when the client has no forms."""
    app = app_of(ctx)
    with service_errors(app):
        run = await off_loop(runs.resolve_run, app, run_id)
    if run.status not in ACTIVE_RUN_STATUSES:
        return NotAsked("not_needed")
    if not can_elicit(ctx):
        return NotAsked("cannot_ask")
    return Elicit(f"Stop training run {run.id} on {run.target}? Checkpoints already saved are kept.",
                  wire.StopConfirmation)  # fmt: skip


@tool("Stop training", read_only=False, destructive=True, idempotent=True, open_world=True)
async def stop_training(
    ctx: Context[AppContext],
    decision: Annotated[ElicitationResult[wire.StopConfirmation], Resolve(_ask_stop)],
    run_id: wire.RunId = None,
    confirm: wire.ConfirmArg = False,
) -> wire.StopOut:
    """Stops a training run (its whole process group) and its supervisor. Where the client supports
    forms, the user confirms in one; otherwise the call needs confirm=true."""
    app = app_of(ctx)
    confirmation: Literal["user", "argument", "not_needed", "declined"]
    data = decision.data if isinstance(decision, AcceptedElicitation) else None
    if isinstance(data, wire.StopConfirmation) and data.stop:
        confirmation = "user"
    elif isinstance(data, NotAsked) and data.why == "not_needed":
        confirmation = "not_needed"
    elif isinstance(data, NotAsked):
        if not confirm:
            raise ToolError("stopping a run needs the user's confirmation and this client cannot show a "
                            "confirmation form: ask the user, then call stop_training again with confirm=true")  # fmt: skip
        confirmation = "argument"
    else:
        with service_errors(app):
            run = await off_loop(runs.resolve_run, app, run_id)
        return wire.StopOut(run_id=run.id, status=run.status, confirmation="declined",
                       message="not stopped: the user declined in the confirmation form; the run goes on")  # fmt: skip
    with service_errors(app):
        result = await off_loop(runs.stop_training, app, run_id, wait_seconds=STOP_WAIT_SECONDS)
    return wire.StopOut.model_validate({**result, "confirmation": confirmation})
