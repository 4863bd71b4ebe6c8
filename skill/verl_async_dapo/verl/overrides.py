"""Hydra override strings: rendering values, an ordered no-duplicates list, and diffs (pure).

Rules (hydra-core 1.3 with struct mode, reference verl.md §6): ``key=v`` needs the key to exist,
``+key=v`` needs it absent or null, ``++key=v`` always works but also hides stale keys, so it is
used only where the schema has no such key or holds null. Values are rendered for Hydra's
override grammar; argv is passed without a shell, so no shell quoting happens here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from verl_async_dapo.exceptions import OverrideError

Prefix = Literal["", "+", "++"]
Scalar = bool | int | float | str | None
Value = Scalar | tuple[str, ...]

# Strings Hydra reads back unchanged without quotes (and that are not a number, bool or null).
_BARE_RE = re.compile(r"[A-Za-z_/][A-Za-z0-9_./\-]*")
_RESERVED_WORDS = frozenset({"true", "false", "null", "nan", "inf"})
_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _quote(text: str, quote: str) -> str:
    # Hydra's quoted strings: the quote char is escaped with a backslash and any run of backslashes
    # right before a quote (or before the closing quote) must be doubled; other backslashes are literal.
    out: list[str] = []
    pending = 0
    for ch in text:
        if ch == "\\":
            pending += 1
            continue
        if ch == quote:
            out.append("\\" * (2 * pending) + "\\" + ch)
        else:
            out.append("\\" * pending + ch)
        pending = 0
    out.append("\\" * (2 * pending))
    return quote + "".join(out) + quote


def render_value(value: Value) -> str:
    """A Python value as Hydra override text (``True``, ``0.6``, ``null``, ``/a/b``, ``["x","y"]``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise OverrideError(f"refusing to render non-finite float {value!r}")
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ",".join(_render_str(item, '"', always_quote=True) for item in value) + "]"
    if isinstance(value, str):
        return _render_str(value, "'", always_quote=False)
    raise OverrideError(f"unsupported override value type {type(value).__name__}")


def _render_str(text: str, quote: str, *, always_quote: bool) -> str:
    if not isinstance(text, str):
        raise OverrideError(f"list items must be strings, got {type(text).__name__}")
    if any(ch in text for ch in "\x00\n\r"):
        raise OverrideError("override values may not contain NUL or newline characters")
    if "${" in text:
        # Hydra/OmegaConf would resolve it as an interpolation, even inside quotes.
        raise OverrideError(f"override value may not contain '${{': {text[:60]!r}")
    if not always_quote and _BARE_RE.fullmatch(text) and text.lower() not in _RESERVED_WORDS:
        return text
    return _quote(text, quote)


@dataclass(frozen=True)
class Override:
    key: str
    value: Value
    prefix: Prefix = ""

    def __post_init__(self) -> None:
        if not _KEY_RE.fullmatch(self.key):
            raise OverrideError(f"invalid override key {self.key!r}")

    def render(self) -> str:
        return f"{self.prefix}{self.key}={render_value(self.value)}"


class OverrideList:
    """Ordered overrides; setting a key twice is a bug in the plan builder and raises."""

    def __init__(self) -> None:
        self._items: dict[str, Override] = {}

    def set(self, key: str, value: Value, prefix: Prefix = "") -> None:
        if key in self._items:
            raise OverrideError(f"override key {key!r} set twice in one plan")
        self._items[key] = Override(key, value, prefix)

    def extend(self, overrides: Iterable[Override]) -> None:
        for item in overrides:
            self.set(item.key, item.value, item.prefix)

    def get(self, key: str) -> Override | None:
        return self._items.get(key)

    def items(self) -> tuple[Override, ...]:
        return tuple(self._items.values())

    def rendered(self) -> tuple[str, ...]:
        return tuple(item.render() for item in self._items.values())


def split_override(text: str) -> tuple[str, str, str]:
    """``"++a.b=1"`` → ``("++", "a.b", "1")``; ``"~a.b"`` → ``("~", "a.b", "")``."""
    prefix = ""
    for candidate in ("++", "+", "~"):
        if text.startswith(candidate):
            prefix = candidate
            break
    body = text[len(prefix) :]
    key, sep, value = body.partition("=")
    if not sep and prefix != "~":
        raise OverrideError(f"not a Hydra override (no '='): {text[:80]!r}")
    return prefix, key, value


def override_diff(prev: Sequence[str], new: Sequence[str]) -> list[str]:
    """What changed between two attempts' overrides.

    ``"+k=v"`` = added, ``"-k=v"`` = removed, ``"k: a → b"`` = value changed (keys without their
    Hydra ``+``/``++`` prefix; a prefix is shown only when it alone changed: ``"k: +=1 → ++=1"``).
    """
    before = {key: (prefix, value) for prefix, key, value in map(split_override, prev)}
    after = {key: (prefix, value) for prefix, key, value in map(split_override, new)}
    lines: list[str] = []
    for key, (prefix, value) in after.items():
        if key not in before:
            lines.append(f"+{key}={value}")
            continue
        old_prefix, old_value = before[key]
        if (old_prefix, old_value) == (prefix, value):
            continue
        if old_prefix == prefix:
            lines.append(f"{key}: {old_value} → {value}")
        else:
            lines.append(f"{key}: {old_prefix}={old_value} → {prefix}={value}")
    lines += [f"-{key}={value}" for key, (_prefix, value) in before.items() if key not in after]
    return lines
