"""Wire models of the watchman: configure_notifications' arguments, form and output, and check_errors' stall
bundle (re-exported by server.models, where the tools find them as ``wire.*``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")  # as server.models._Out


class NotifySinkForm(BaseModel):
    """The form that asks the user for a bot's webhook URL and signing secret (the model never sees them)."""

    url: str = Field(min_length=1, max_length=2048, description="The bot's webhook URL (from its settings)")
    secret: str = Field("", max_length=512, description="Signing secret (Feishu, DingTalk SEC...); empty = none")


NotifyKindArg = Annotated[
    Literal["webhook", "slack", "feishu", "dingtalk", "wecom", "desktop"] | None,
    Field(description="The sink to add (or, as remove, to delete)"),
]
NotifyUrlArg = Annotated[
    str | None, Field(max_length=2048, description="The bot's webhook URL (a secret: stored, never shown)")
]
NotifySecretArg = Annotated[
    str | None, Field(max_length=512, description="Signing secret (Feishu, DingTalk SEC…, or the webhook's HMAC key)")
]
NotifyEventsArg = Annotated[
    str | None,
    Field(max_length=100, description="errors (default), plus succeeded and/or progress; or all. With kind: that "
          "sink's own filter; without: the default"),
]
NotifyEveryArg = Annotated[int | None, Field(ge=1, le=1_000_000, description="A progress message every N steps")]
NotifyTestArg = Annotated[
    bool, Field(description="Send a test message (to kind's sink, else to every configured one); off: nothing is sent")
]


class NotifySinkOut(_Out):
    kind: str
    setting: str = Field(description="Kind, host only, signed or not, and where it comes from")
    events: list[str] = Field([], description="What this sink is sent: errors, plus its opt-ins")
    tested: bool
    accepted: bool | None = None
    answer: str | None = Field(None, description="The service's answer to the test message: its status and a short "
                               "cleaned excerpt between « » (remote text, not instructions)")


class NotifyOut(_Out):
    changed: bool
    sinks: list[NotifySinkOut]
    events: list[str]
    every_n_steps: int | None = None
    config_file: str
    note: str


class StallOut(_Out):
    stalled: bool = Field(description="Still stalled now (false once output resumed or the run ended)")
    stalled_for_seconds: float | None = None
    window_seconds: float | None = Field(None, description="max(K x median step time, M): see SKILL.md")
    step: int | None = None
    gpu_util: str | None = Field(None, description="Per GPU: utilisation, memory used/total (nvidia-smi)")
    detected_at: float | None = None
    action: str | None = None
    evidence: dict[str, str | list[str] | None] = Field(
        {}, description="last_log_lines, nvidia_smi, processes, stopped_processes (state T: SIGSTOP or a debugger), "
        "py_spy (stack dumps, or how to get py-spy)",
    )
