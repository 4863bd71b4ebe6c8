"""configure_notifications as a service (the MCP tool and ``verl-async-dapo notify`` share it).

Showing is not sending (issue 28, item 7): without ``test`` nothing goes out, neither when the configuration
is shown nor when a sink is saved. With ``test`` and a sink to add, the test message goes first and the sink is
saved only when the service accepted it (bad input changes nothing); with ``test`` alone, every configured sink
gets one. The service's answer comes back as status and a short cleaned excerpt (``notify.send``). A sink's
``events`` are its own: ``kind`` + ``events`` sets that sink's filter (an already saved sink needs no URL
again), ``events`` alone the default for sinks without one. URLs and secrets are never returned: a sink is
described by its kind, its host and whether it is signed. A URL whose host is at a link-local or
cloud-metadata address is refused (``notify.address``).
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, SecretStr

from verl_async_dapo.context import AppContext
from verl_async_dapo.notify import config as cfg
from verl_async_dapo.notify.formats import SIGNED_KINDS, Notice, SinkKind
from verl_async_dapo.notify.send import SendResult, check_destination, send


class SinkReport(BaseModel):
    kind: str
    setting: str  # e.g. "feishu open.feishu.cn; signed (from config_file)"
    events: list[str]  # what this sink gets: always "errors", plus its opt-ins
    tested: bool
    accepted: bool | None = None
    answer: str | None = None  # what the service answered


class NotifyReport(BaseModel):
    changed: bool
    sinks: list[SinkReport]
    events: list[str]  # always "errors", plus the opt-ins
    every_n_steps: int | None
    config_file: str
    note: str


def test_notice() -> Notice:
    return Notice(event_id=0, kind="test", level="info", title="[verl] test notification from verl-async-dapo",
                  text=f"Notifications work. Sent at {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; you will hear about "
                  "OOM relaunches, failures, stalls and exhausted relaunch budgets.")  # fmt: skip


async def _test(ctx: AppContext, sink: cfg.Sink) -> SendResult:
    result = await send(sink, test_notice(), ctx.env)
    return SendResult(result.ok, ctx.scrub(result.answer), result.retry)


def _new_sink(ctx: AppContext, kind: str, url: str | None, secret: str | None) -> cfg.Sink:
    try:
        sink_kind = SinkKind(kind)
    except ValueError:
        names = ", ".join(k.value for k in SinkKind)
        raise cfg.NotifyConfigError(f"unknown sink kind {kind[:30]!r}: use one of {names}") from None
    if secret and sink_kind not in SIGNED_KINDS:
        raise cfg.NotifyConfigError(f"{sink_kind.value} has no signing secret (only {', '.join(sorted(k.value for k in SIGNED_KINDS))}); "
                                    "leave secret out")  # fmt: skip
    if sink_kind is SinkKind.DESKTOP:
        if url:
            raise cfg.NotifyConfigError("the desktop sink takes no URL")
        return cfg.Sink(kind=sink_kind)
    if not url:
        raise cfg.NotifyConfigError(f"the {sink_kind.value} sink needs its webhook URL (from the bot's settings)")
    checked_url = cfg.check_url(sink_kind, url)
    check_destination(checked_url, ctx.env)  # a metadata address is refused before anything is saved or sent
    return cfg.Sink(kind=sink_kind, url=SecretStr(checked_url),
                    secret=SecretStr(secret.strip()) if secret and secret.strip() else None)  # fmt: skip


async def configure(
    ctx: AppContext, *, kind: str | None = None, url: str | None = None, secret: str | None = None,
    events: str | None = None, every_n_steps: int | None = None, remove: str | None = None, test: bool = False,
) -> NotifyReport:  # fmt: skip
    path = ctx.notify_config_file
    current = cfg.resolve(ctx.env, path, ctx.secrets)
    saved = _saved_part(ctx)
    parsed = cfg.parse_events(events) if events is not None else None
    if every_n_steps is not None and every_n_steps < 1:
        raise cfg.NotifyConfigError("every_n_steps must be at least 1")
    every = every_n_steps if every_n_steps is not None else saved.every_n_steps
    default_events = saved.events
    sinks = list(saved.sinks)
    reports: list[SinkReport] = []
    if remove is not None:
        sinks = [s for s in sinks if s.kind.value != remove]
    if kind is not None:
        sink = _sink_to_save(ctx, saved, current, kind, url, secret)
        own = parsed if parsed is not None else sink.events
        if every_n_steps is not None:  # progress messages for this sink: it opts in to them
            base = own if own is not None else default_events
            own = base if "progress" in base else (*base, "progress")
        sink = sink.model_copy(update={"events": own})
        tested = test
        if test:
            result = await _test(ctx, sink)
            if not result.ok:
                raise cfg.NotifyConfigError(f"the {sink.kind.value} service did not accept the test message "
                                            f"({result.answer}); nothing was saved. Check the URL and the signing "
                                            "secret in the bot's settings")  # fmt: skip
        in_force = cfg.NotifyConfig(events=default_events)
        reports.append(SinkReport(kind=sink.kind.value, setting=sink.describe(), tested=tested,
                                  events=["errors", *in_force.events_for(sink)], accepted=True if tested else None,
                                  answer=result.answer if tested else None))  # fmt: skip
        sinks = [s for s in sinks if s.kind is not sink.kind] + [sink]
    else:
        if parsed is not None:
            default_events = parsed
        if every_n_steps is not None and "progress" not in default_events:
            default_events = (*default_events, "progress")
    changed = kind is not None or remove is not None or events is not None or every_n_steps is not None
    if changed:
        cfg.save(cfg.NotifyConfig(sinks=tuple(sinks), events=default_events, every_n_steps=every), path, ctx.secrets)
        current = cfg.resolve(ctx.env, path, ctx.secrets)
    for sink in current.sinks:
        if any(r.kind == sink.kind.value for r in reports):
            continue
        gets = ["errors", *current.events_for(sink)]
        if test and kind is None:  # asked for: a test message to every configured sink
            result = await _test(ctx, sink)
            reports.append(SinkReport(kind=sink.kind.value, setting=sink.describe(), tested=True, events=gets,
                                      accepted=result.ok, answer=result.answer))  # fmt: skip
        else:
            reports.append(SinkReport(kind=sink.kind.value, setting=sink.describe(), tested=False, events=gets))
    return NotifyReport(changed=changed, sinks=reports, events=["errors", *current.events],
                        every_n_steps=current.every_n_steps, config_file=str(path), note=_note(current, test))  # fmt: skip


def _sink_to_save(ctx: AppContext, saved: cfg.NotifyConfig, current: cfg.NotifyConfig, kind: str, url: str | None,
                  secret: str | None) -> cfg.Sink:  # fmt: skip
    """The sink ``kind`` names: a new one (with its URL), or the saved one when no URL is given (its events or a
    test change, the URL and secret stay)."""
    known = saved.sink(kind)
    if url or known is None or kind == "desktop":
        if not url and kind != "desktop" and (env_sink := current.sink(kind)) is not None and env_sink.source == "env":
            raise cfg.NotifyConfigError(f"the {kind} sink comes from {cfg.url_var(env_sink.kind)} in the server's "
                                        f"environment: set {cfg.events_var(env_sink.kind)} there to change its events")  # fmt: skip
        return _new_sink(ctx, kind, url, secret) if url or known is None else known
    if secret:
        raise cfg.NotifyConfigError(f"a new signing secret for the {kind} sink comes with its URL: pass both")
    return known


def _note(current: cfg.NotifyConfig, test: bool) -> str:
    if not current.sinks:
        return "no notification sink configured: nothing is sent (set VAD_NOTIFY_* or add a sink)"
    own = [f"{s.kind.value}: {', '.join(['errors', *current.events_for(s)])}" for s in current.sinks
           if s.events is not None]  # fmt: skip
    text = ("notifications are on: errors (OOM relaunch, failure, stall, target gone, relaunch budget exhausted)"
            + "".join(f", {e}" for e in current.events))  # fmt: skip
    if own:
        text += "; per sink: " + "; ".join(own)
    if not test:
        text += ". Nothing was sent: call configure_notifications with test=true (CLI: --test) to send a test message"
    return text


def saved_sink(ctx: AppContext, kind: str) -> bool:
    """A sink of ``kind`` is in the config file (then changing its events needs no URL again)."""
    return _saved_part(ctx).sink(kind) is not None


def _saved_part(ctx: AppContext) -> cfg.NotifyConfig:
    """The configuration as the file alone has it (what a change rewrites; the environment is never copied)."""
    return cfg.resolve({}, ctx.notify_config_file, ctx.secrets)


SinkKindName = Literal["webhook", "slack", "feishu", "dingtalk", "wecom", "desktop"]
