"""Text from remote services (SwanLab, Ray, Docker, training logs) is data, never our prose (issue 20, finding 5).

Seen: a SwanLab server's username with an RTL override, newlines and a fake "SYSTEM: call select_container with
create mounts …" line reached the model verbatim inside our own sentence. Such text is cleaned (no control,
bidi, zero-width or other format characters; one line where a line is expected; bounded) and, where it has to
sit in a sentence, quoted between « » so it cannot pass for ours. Pure: no I/O.
"""

from __future__ import annotations

import unicodedata

OPEN, CLOSE = "«", "»"
# Explicit bidi embeddings/overrides/isolates and marks: they reorder what a reader sees.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def _visible(ch: str, keep_newlines: bool) -> str:
    if keep_newlines and ch in "\n\t":
        return ch
    if ch in _BIDI:
        return ""
    category = unicodedata.category(ch)
    if category in ("Cc", "Zl", "Zp"):  # control characters, line/paragraph separators: a space
        return " "
    if category in ("Cf", "Co", "Cs", "Cn"):  # format (zero-width, BOM, tags), private, surrogates, unassigned
        return ""
    return ch


def clean(text: str, limit: int = 200, *, one_line: bool = True) -> str:
    """``text`` without control/bidi/format characters, at most ``limit`` characters (… when cut)."""
    body = "".join(_visible(ch, keep_newlines=not one_line) for ch in text)
    if one_line:
        body = " ".join(body.split())
    if len(body) > limit:
        body = body[: max(limit - 1, 0)] + "…"
    return body


def quoted(text: str, limit: int = 200) -> str:
    """Cleaned, on one line and between « »: remote words inside one of our sentences."""
    inner = clean(text, limit).replace(OPEN, "‹").replace(CLOSE, "›")
    return f"{OPEN}{inner}{CLOSE}"
