"""The user's own Hydra overrides: what is accepted, and how they merge with ours (pure).

Accepted: ``key=value``, ``+key=value`` and ``++key=value`` with a dotted config key. Each is one argv
element of the launch (no shell ever runs), but verl prints its whole config and the text reaches logs
and the state DB, so the checks are strict:

* no secret: nothing :func:`redact_generic` would mask (``*_API_KEY=…``, ``token=…``, a password in a
  URL, a JWT), and the plan builder refuses any known secret value anywhere in the plan;
* no second argument or option: no leading ``-``, no whitespace outside a fully quoted value;
* no shell or interpolation text: none of ``$ ` ; | & < >`` (``${oc.env:…}`` would read the training
  process's environment, which holds the SwanLab key);
* no path escape: no ``..`` path segment, no ``hydra.*`` key (``hydra.searchpath`` would load other
  configs), and the checkpoint directory must be absolute;
* none of the keys :mod:`override_policy` refuses (the trainer's environment, Ray's address, where tracking traffic
  goes); the keys that load code or write outside the run's tree pass here and are asked of the user at start.

Merging (:func:`merge_overrides`): the user's value wins for every key, also for the keys this project
manages (checkpoint dir, resume mode, logger, total steps, the feature keys and the OOM-ladder keys);
it stays in place on every relaunch, and when the OOM ladder would have changed it, a note says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import verl_async_dapo.verl.override_policy as override_policy
from verl_async_dapo.exceptions import OverrideError
from verl_async_dapo.redact import redact_generic
from verl_async_dapo.verl.overrides import Override

MAX_OVERRIDES = 128
MAX_OVERRIDE_CHARS = 4096
_USER_RE = re.compile(r"(?P<prefix>\+{0,2})(?P<key>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)=(?P<value>.*)",
                      re.DOTALL)  # fmt: skip
_FORBIDDEN_VALUE_CHARS = frozenset("$`;|&<>\x00\n\r")
CHECKPOINT_KEY = "trainer.default_local_dir"

# Where a value of the plan came from (LaunchPlan.sources).
SOURCE_RECIPE = "recipe"  # this project's DAPO / one-step-off recipe and the run parameters
SOURCE_FEATURE = "feature"  # the features chosen (explicitly or the defaults)
SOURCE_LADDER = "oom_ladder"  # the supervisor's OOM recovery (appended features, memory tweaks)
SOURCE_USER = "user"  # the user's own override


@dataclass(frozen=True)
class UserOverride:
    prefix: str
    key: str
    value: str  # as the user wrote it (Hydra override grammar)
    text: str


def parse_user_overrides(items: Iterable[str]) -> tuple[UserOverride, ...]:
    """Check every override; raises :class:`OverrideError` naming the first bad one and the rule."""
    out: list[UserOverride] = []
    seen: set[str] = set()
    items = list(items)
    if len(items) > MAX_OVERRIDES:
        raise OverrideError(f"at most {MAX_OVERRIDES} overrides, got {len(items)}")
    for item in items:
        parsed = _parse_one(item)
        if parsed.key in seen:
            raise OverrideError(f"override key {parsed.key!r} given twice")
        seen.add(parsed.key)
        out.append(parsed)
    return tuple(out)


def _parse_one(item: str) -> UserOverride:
    if not isinstance(item, str) or not item:
        raise OverrideError("an override must be a non-empty string such as trainer.save_freq=10")
    shown = item[:80]
    if len(item) > MAX_OVERRIDE_CHARS:
        raise OverrideError(f"override longer than {MAX_OVERRIDE_CHARS} characters: {shown!r}")
    if item.startswith("-"):
        raise OverrideError(f"override may not start with '-' (it would read as an option): {shown!r}")
    if item.startswith("~"):
        raise OverrideError(f"deleting config keys (~key) is not supported: {shown!r}")
    if redact_generic(item) != item:
        raise OverrideError(
            f"override {item.partition('=')[0][:60]!r} looks like it carries a secret (verl prints its whole "
            "config): pass secrets through the environment instead (configure_swanlab, set_proxy)"
        )
    match = _USER_RE.fullmatch(item)
    if match is None:
        raise OverrideError(f"not a Hydra override KEY=VALUE with a dotted key (e.g. trainer.save_freq=10): {shown!r}")
    key, value = match["key"], match["value"]
    if key == "hydra" or key.startswith("hydra."):
        raise OverrideError(f"hydra.* keys are not accepted (they change how configs are found): {shown!r}")
    why = override_policy.refusal(key, value)
    if why is not None:  # issue 27: no one may set these, the user's yes included
        raise OverrideError(f"override {key[:80]!r} is refused: it changes {why}. Nothing was started")
    bad = sorted(ch for ch in set(value) & _FORBIDDEN_VALUE_CHARS)
    if bad:
        raise OverrideError(
            f"override value may not contain {' '.join(repr(c) for c in bad)} (shell or interpolation text): {shown!r}"
        )
    if _has_unquoted_space(value):
        raise OverrideError(f"override value with spaces must be quoted whole ('…' or \"…\"): {shown!r}")
    if ".." in re.split(r"[/\\'\",\[\]{}:=]", value):
        raise OverrideError(f"override value may not contain a '..' path segment: {shown!r}")
    if key == CHECKPOINT_KEY and not value.strip("'\"").startswith("/"):
        raise OverrideError(f"{CHECKPOINT_KEY} must be an absolute path (relative ones resolve in Ray's actor CWD)")
    return UserOverride(prefix=match["prefix"], key=key, value=value, text=item)


def _has_unquoted_space(value: str) -> bool:
    if not any(ch.isspace() for ch in value):
        return False
    quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
    return not (quoted and value[0] not in value[1:-1])


def user_value(items: Sequence[str], key: str) -> str | None:
    """The user's value for ``key`` (quotes removed), or None when the user did not set it."""
    for item in items:
        prefix_key, sep, value = item.lstrip("+").partition("=")
        if sep and prefix_key == key:
            return value.strip("'\"")
    return None


@dataclass(frozen=True)
class Merged:
    rendered: tuple[str, ...]
    sources: dict[str, str]  # key → SOURCE_*
    notes: tuple[str, ...]


def merge_overrides(
    ours: Sequence[tuple[Override, str]], user: Sequence[UserOverride], ladder_values: dict[str, str]
) -> Merged:
    """Our overrides (each with its source) with the user's on top: a user key replaces ours in place (so
    the diff between attempts stays readable), new keys follow in the user's order.

    ``ladder_values``: the values the OOM ladder changed for this attempt (key → rendered), to say when the
    user's value kept one of them from taking effect."""
    by_key = {u.key: u for u in user}
    rendered: list[str] = []
    sources: dict[str, str] = {}
    notes: list[str] = []
    for override, source in ours:
        mine = by_key.get(override.key)
        if mine is None:
            rendered.append(override.render())
            sources[override.key] = source
            continue
        # A key we add with + / ++ (absent or null in verl's schema) needs that prefix for the user's value too.
        text = mine.text if mine.prefix or not override.prefix else f"{override.prefix}{mine.text}"
        rendered.append(text)
        sources[override.key] = SOURCE_USER
        if override.key in ladder_values and ladder_values[override.key] != mine.value:
            notes.append(
                f"OOM recovery would set {override.key}={ladder_values[override.key]}; kept your {mine.value}"
            )
    for item in user:
        if item.key not in sources:
            rendered.append(item.text)
            sources[item.key] = SOURCE_USER
    if len(set(o.lstrip("+").partition("=")[0] for o in rendered)) != len(rendered):
        raise OverrideError("an override key would be set twice")
    return Merged(tuple(rendered), sources, tuple(notes))
