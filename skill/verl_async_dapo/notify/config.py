"""Where notifications go, and which events: environment > config file > ask (SwanLab's rule).

Environment (one sink per kind; a kind set here replaces the file's sink of that kind):
``VAD_NOTIFY_WEBHOOK_URL`` (+ ``VAD_NOTIFY_WEBHOOK_SECRET``), ``VAD_NOTIFY_SLACK_URL``,
``VAD_NOTIFY_FEISHU_URL`` (+ ``VAD_NOTIFY_FEISHU_SECRET``), ``VAD_NOTIFY_DINGTALK_URL`` (+
``VAD_NOTIFY_DINGTALK_SECRET``), ``VAD_NOTIFY_WECOM_URL``, ``VAD_NOTIFY_DESKTOP=1``; events:
``VAD_NOTIFY_EVENTS`` (``errors`` = the default; add ``succeeded`` and/or ``progress``, or ``all``) and
``VAD_NOTIFY_EVERY_N_STEPS``; per sink, ``VAD_NOTIFY_<KIND>_EVENTS`` (e.g. ``VAD_NOTIFY_SLACK_EVENTS=all``:
that sink's own filter; a sink without one follows the default). The config file ``notify.json`` (0600, in the config dir) holds the sink kinds and
*references* into the secret store: webhook URLs (their tokens are in the URL) and signing secrets are secrets,
so no file, DB row, log line or tool output ever holds one in plaintext. Nothing configured = ask: the
``configure_notifications`` tool / ``verl-async-dapo notify`` command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from verl_async_dapo.exceptions import InsecureFileError, NotifyConfigError, SecretStoreError
from verl_async_dapo.notify.formats import SIGNED_KINDS, SinkKind
from verl_async_dapo.secret_store import SecretStore, ensure_private_dir, read_private_file, write_private_file

CONFIG_FILE_NAME = "notify.json"
ENV_PREFIX = "VAD_NOTIFY_"
OPT_IN_EVENTS = ("succeeded", "progress")
HTTP_KINDS = tuple(k for k in SinkKind if k is not SinkKind.DESKTOP)


def url_var(kind: SinkKind) -> str:
    return f"{ENV_PREFIX}{kind.value.upper()}_URL"


def secret_var(kind: SinkKind) -> str:
    return f"{ENV_PREFIX}{kind.value.upper()}_SECRET"


def events_var(kind: SinkKind) -> str:
    return f"{ENV_PREFIX}{kind.value.upper()}_EVENTS"


def secret_env_names() -> list[str]:
    """Every environment variable whose value is a secret (for redaction)."""
    return [url_var(k) for k in HTTP_KINDS] + [secret_var(k) for k in SIGNED_KINDS]


def check_url(kind: SinkKind, url: str) -> str:
    """A webhook URL must be http(s) with a host; the error never repeats the URL (it holds the token)."""
    url = url.strip()
    parts = urlsplit(url)
    if (not url or len(url) > 2048 or any(ch.isspace() or ord(ch) < 32 for ch in url)
            or parts.scheme not in ("http", "https") or not parts.hostname):  # fmt: skip
        raise NotifyConfigError(
            f"the {kind.value} webhook URL is not an http(s) URL with a host; copy it again from the "
            f"{kind.value} bot's settings"
        )
    return url


class Sink(BaseModel):
    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)

    kind: SinkKind
    url: SecretStr | None = None  # None only for desktop
    secret: SecretStr | None = None
    source: Literal["env", "config_file", "argument"] = "argument"
    # This sink's own opt-ins on top of errors (issue 28, item 7: filters are per sink); None = the default's.
    events: tuple[str, ...] | None = None

    def describe(self) -> str:
        signed = "; signed" if self.secret is not None else ""
        where = f" {_host(self.url.get_secret_value())}" if self.url is not None else ""
        return f"{self.kind.value}{where}{signed} (from {self.source})"


def _host(url: str) -> str:
    """Only the host, never the path or query (where the tokens are)."""
    return urlsplit(url).hostname or "?"


class NotifyConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    sinks: tuple[Sink, ...] = ()
    events: tuple[str, ...] = ()  # opt-ins on top of errors: "succeeded", "progress"
    every_n_steps: int | None = Field(None, ge=1)

    def sink(self, kind: str) -> Sink | None:
        return next((s for s in self.sinks if s.kind.value == kind), None)

    def events_for(self, sink: Sink) -> tuple[str, ...]:
        """The opt-ins ``sink`` gets: its own filter, else the default."""
        return sink.events if sink.events is not None else self.events

    def describe(self) -> list[str]:
        return [s.describe() for s in self.sinks]


def parse_events(text: str) -> tuple[str, ...]:
    words = {w.strip().lower() for w in text.split(",") if w.strip()}
    if "all" in words:
        return OPT_IN_EVENTS
    unknown = words - {"errors", *OPT_IN_EVENTS}
    if unknown:
        raise NotifyConfigError(
            f"unknown notification events {sorted(unknown)}: use errors (the default), succeeded, progress or all"
        )
    return tuple(e for e in OPT_IN_EVENTS if e in words)


def _env_sinks(env: Mapping[str, str]) -> list[Sink]:
    sinks = []
    for kind in HTTP_KINDS:
        url = (env.get(url_var(kind)) or "").strip()
        if not url:
            continue
        secret = (env.get(secret_var(kind)) or "").strip() if kind in SIGNED_KINDS else ""
        sinks.append(Sink(kind=kind, url=SecretStr(check_url(kind, url)), secret=SecretStr(secret) if secret else None,
                          source="env"))  # fmt: skip
    if (env.get(f"{ENV_PREFIX}DESKTOP") or "").strip().lower() in ("1", "true", "yes"):
        sinks.append(Sink(kind=SinkKind.DESKTOP, source="env"))
    return sinks


def _env_events(env: Mapping[str, str], kind: SinkKind) -> tuple[str, ...] | None:
    text = (env.get(events_var(kind)) or "").strip()
    return parse_events(text) if text else None


class _FileSink(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: SinkKind
    url_ref: str | None = None
    secret_ref: str | None = None
    events: list[str] | None = None  # this sink's own opt-ins; absent = the file's default


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    sinks: list[_FileSink] = []
    events: list[str] = []
    every_n_steps: int | None = Field(None, ge=1)


def _read_file(path: Path) -> _File | None:
    try:
        raw = read_private_file(path, what="notification config file")
    except FileNotFoundError:
        return None
    except (InsecureFileError, SecretStoreError, OSError) as exc:
        raise NotifyConfigError(str(exc)) from None
    try:
        return _File.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        raise NotifyConfigError(f"notification config file {path} is malformed: fix it or delete it and "
                                "configure notifications again") from None  # fmt: skip


def resolve(env: Mapping[str, str], config_file: Path, secrets: SecretStore | None) -> NotifyConfig:
    """The configuration in force (possibly empty: then nothing is sent and the agent may ask)."""
    by_kind: dict[SinkKind, Sink] = {}
    saved = _read_file(config_file)
    if saved is not None and secrets is not None:
        for item in saved.sinks:
            try:
                url = SecretStr(secrets.get(item.url_ref)) if item.url_ref else None
                secret = SecretStr(secrets.get(item.secret_ref)) if item.secret_ref else None
            except SecretStoreError as exc:
                raise NotifyConfigError(f"the saved {item.kind.value} sink cannot be read ({exc}); configure it "
                                        "again") from None  # fmt: skip
            own = parse_events(",".join(item.events) or "errors") if item.events is not None else None
            by_kind[item.kind] = Sink(kind=item.kind, url=url, secret=secret, source="config_file", events=own)
    for sink in _env_sinks(env):
        by_kind[sink.kind] = sink
    for kind, sink in by_kind.items():  # a sink's own filter from the environment beats the file's
        own = _env_events(env, kind)
        if own is not None:
            by_kind[kind] = sink.model_copy(update={"events": own})
    events: tuple[str, ...] = tuple(saved.events) if saved else ()
    every = saved.every_n_steps if saved else None
    if env.get(f"{ENV_PREFIX}EVENTS", "").strip():
        events = parse_events(env[f"{ENV_PREFIX}EVENTS"])
    if env.get(f"{ENV_PREFIX}EVERY_N_STEPS", "").strip():
        text = env[f"{ENV_PREFIX}EVERY_N_STEPS"].strip()
        if not text.isdigit() or int(text) < 1:
            raise NotifyConfigError(f"{ENV_PREFIX}EVERY_N_STEPS must be a whole number >= 1, not {text[:20]!r}")
        every = int(text)
        # The environment's N implies progress for the default; the file says per sink who gets it (the
        # service writes "progress" where it belongs).
        if "progress" not in events:
            events = (*events, "progress")
    return NotifyConfig(sinks=tuple(by_kind[k] for k in SinkKind if k in by_kind), events=events,
                        every_n_steps=every)  # fmt: skip


def save(config: NotifyConfig, config_file: Path, secrets: SecretStore) -> None:
    """Write the file (refs only) and the values into the secret store; old values of replaced sinks go."""
    old = _read_file(config_file)
    sinks = []
    for sink in config.sinks:
        url_ref = secrets.put(sink.url.get_secret_value(), label=f"notify-{sink.kind.value}-url") if sink.url else None
        secret_ref = (secrets.put(sink.secret.get_secret_value(), label=f"notify-{sink.kind.value}-secret")
                      if sink.secret else None)  # fmt: skip
        own = list(sink.events) if sink.events is not None else None
        sinks.append(_FileSink(kind=sink.kind, url_ref=url_ref, secret_ref=secret_ref, events=own))
    data = _File(sinks=sinks, events=list(config.events), every_n_steps=config.every_n_steps)
    ensure_private_dir(config_file.parent)
    write_private_file(config_file, (data.model_dump_json(indent=2) + "\n").encode())
    for item in old.sinks if old else []:
        for ref in (item.url_ref, item.secret_ref):
            if ref and SecretStore.is_ref(ref):
                secrets.delete(ref)
