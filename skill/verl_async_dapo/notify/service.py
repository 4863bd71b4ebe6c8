"""configure_notifications as a service (the MCP tool and ``verl-async-dapo notify`` share it).

Adding a sink sends it a test message first and saves it only when the service accepted it (bad input
changes nothing); the answer is reported as the service gave it (scrubbed). Without a sink to add it reports
the configuration in force and, if asked, tests every configured sink. URLs and secrets are never returned:
a sink is described by its kind, its host and whether it is signed.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, SecretStr

from verl_async_dapo.context import AppContext
from verl_async_dapo.notify import config as cfg
from verl_async_dapo.notify.formats import SIGNED_KINDS, Notice, SinkKind
from verl_async_dapo.notify.send import SendResult, send


class SinkReport(BaseModel):
    kind: str
    setting: str  # e.g. "feishu open.feishu.cn; signed (from config_file)"
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
    result = await send(sink, test_notice())
    return SendResult(result.ok, ctx.scrub(result.answer), result.retry)


def _new_sink(kind: str, url: str | None, secret: str | None) -> cfg.Sink:
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
    return cfg.Sink(kind=sink_kind, url=SecretStr(cfg.check_url(sink_kind, url)),
                    secret=SecretStr(secret.strip()) if secret and secret.strip() else None)  # fmt: skip


async def configure(
    ctx: AppContext, *, kind: str | None = None, url: str | None = None, secret: str | None = None,
    events: str | None = None, every_n_steps: int | None = None, remove: str | None = None, test: bool = True,
) -> NotifyReport:  # fmt: skip
    path = ctx.notify_config_file
    current = cfg.resolve(ctx.env, path, ctx.secrets)
    saved = _saved_part(ctx)
    new_events = cfg.parse_events(events) if events is not None else saved.events
    if every_n_steps is not None and every_n_steps < 1:
        raise cfg.NotifyConfigError("every_n_steps must be at least 1")
    every = every_n_steps if every_n_steps is not None else saved.every_n_steps
    if every is not None and "progress" not in new_events:
        new_events = (*new_events, "progress")
    sinks = list(saved.sinks)
    reports: list[SinkReport] = []
    if remove is not None:
        sinks = [s for s in sinks if s.kind.value != remove]
    if kind is not None:
        sink = _new_sink(kind, url, secret)
        result = await _test(ctx, sink)
        if not result.ok:
            raise cfg.NotifyConfigError(f"the {sink.kind.value} service did not accept the test message "
                                        f"({result.answer}); nothing was saved. Check the URL and the signing secret "
                                        "in the bot's settings")  # fmt: skip
        reports.append(SinkReport(kind=sink.kind.value, setting=sink.describe(), tested=True, accepted=True,
                                  answer=result.answer))  # fmt: skip
        sinks = [s for s in sinks if s.kind is not sink.kind] + [sink]
    changed = kind is not None or remove is not None or events is not None or every_n_steps is not None
    if changed:
        cfg.save(cfg.NotifyConfig(sinks=tuple(sinks), events=new_events, every_n_steps=every), path, ctx.secrets)
        current = cfg.resolve(ctx.env, path, ctx.secrets)
    for sink in current.sinks:
        if any(r.kind == sink.kind.value for r in reports):
            continue
        if test and kind is None:
            result = await _test(ctx, sink)
            reports.append(SinkReport(kind=sink.kind.value, setting=sink.describe(), tested=True,
                                      accepted=result.ok, answer=result.answer))  # fmt: skip
        else:
            reports.append(SinkReport(kind=sink.kind.value, setting=sink.describe(), tested=False))
    note = ("notifications are on: errors (OOM relaunch, failure, stall, target gone, relaunch budget exhausted)"
            + "".join(f", {e}" for e in current.events) if current.sinks
            else "no notification sink configured: nothing is sent (set VAD_NOTIFY_* or add a sink)")  # fmt: skip
    return NotifyReport(changed=changed, sinks=reports, events=["errors", *current.events],
                        every_n_steps=current.every_n_steps, config_file=str(path), note=note)  # fmt: skip


def _saved_part(ctx: AppContext) -> cfg.NotifyConfig:
    """The configuration as the file alone has it (what a change rewrites; the environment is never copied)."""
    return cfg.resolve({}, ctx.notify_config_file, ctx.secrets)


SinkKindName = Literal["webhook", "slack", "feishu", "dingtalk", "wecom", "desktop"]
