"""Turn a raw verl/Ray console log into clean lines (pure).

verl runs inside Ray, so the driver log interleaves the output of many processes: Ray
prefixes every forwarded line with its origin (``(WorkerDict pid=12, ip=10.0.0.2)``,
``(raylet)``), colours some of it, folds repeats into ``[repeated 3x across cluster]``,
and tqdm redraws its bar with ``\\r`` rather than ``\\n``. Both the progress parser and
the error classifier want the bare text of each logical line, and the classifier also
wants to know which process printed it.
"""

from __future__ import annotations

import itertools
import re
from typing import NamedTuple

# A logical line is cut to its first MAX_LINE_CHARS before any pattern sees it: what a regex costs then has a bound
# per line whatever a process prints (issue 27: one crafted 24 KB line froze the supervisor). verl's longest real lines
# (a metrics line of 150 fields, the override list of "Error executing job with overrides") are under 5 KB in the
# corpus (tests/logs/); 32 KiB leaves them whole six times over. The start is kept: step number, exception, message.
MAX_LINE_CHARS = 32 * 1024

# CSI (colours, cursor moves), OSC (terminal hyperlinks from rich/SwanLab, ended by BEL or
# ESC \) and the remaining two-byte escapes. A stray ESC left by a chunk cut is dropped too.
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
    r"|\x1b"
)

# `(WorkerDict pid=1234)`, `(TaskRunner pid=9, ip=10.0.0.2)`, `(pid=1234)`, and Ray's own
# daemons (`(raylet)`, `(raylet, ip=…)`, `(autoscaler +1m2s)`). Only at the start of a line:
# the same shapes inside a message (e.g. `ray::WorkerDict.f() (pid=1, ip=…)`) are content.
_RAY_PREFIX_RE = re.compile(
    r"^\((?:(?P<cls>[A-Za-z_][\w.:-]*) )?pid=\w+(?:, ip=[\w.:-]+)?\) ?"
    r"|^\((?P<daemon>raylet|gcs_server|autoscaler|scheduler|monitor|dashboard)(?:[ ,][^)]*)?\) ?"
)

# The same prefix *inside* a physical line: another process's line glued on where the previous output had no line
# break (tqdm's redraw ends without one, so Ray forwards ``…6/10 [00:06<00:01, 2.50it/s](TaskRunner pid=196) step:7
# - …``: issue 26, reproduced over MCP on a container). Only the ``(Class pid=N[, ip=…])`` form: Ray's error texts
# carry ``(pid=N, ip=…)`` after a task name as content, never with a class name inside the parentheses.
_GLUED_PREFIX_RE = re.compile(r"\((?:[A-Za-z_][\w.:-]*) pid=\d+(?:, ip=[\w.:-]+)?\) ")

# Ray's dedup marker at the end of a line: `` [repeated 3x across cluster]``.
_REPEATED_OPEN, _REPEATED_CLOSE = "[repeated ", "x across cluster]"

# Lines end with \n, \r\n or a lone \r (tqdm redraws).
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")


class LogLine(NamedTuple):
    """One cleaned line and the Ray process that printed it (None: the driver itself)."""

    text: str
    source: str | None


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (colours, cursor moves, hyperlinks)."""
    if "\x1b" not in text:
        return text
    return _ANSI_RE.sub("", text)


def split_ray_prefix(line: str) -> LogLine:
    """Split Ray's origin prefix off one line (ANSI already stripped)."""
    if not line.startswith("("):
        return LogLine(line, None)
    match = _RAY_PREFIX_RE.match(line)
    if match is None:
        return LogLine(line, None)
    source = match.group("cls") or match.group("daemon") or "pid"
    return LogLine(line[match.end() :], source)


def strip_ray_prefix(line: str) -> str:
    """The line without Ray's `(Class pid=N[, ip=…])` / `(raylet)` prefix."""
    return split_ray_prefix(line).text


def strip_repeated_suffix(line: str) -> str:
    """Drop Ray's dedup marker so the message reads as printed."""
    if "across cluster]" not in line:
        return line
    # String checks, not ``\s*\[repeated \d+x across cluster\]\s*$``: its leading ``\s*`` rescanned a run of
    # spaces from each of its positions (quadratic, tests/logs/test_regex_fuzz.py).
    body = line.rstrip()
    start = body.rfind(_REPEATED_OPEN)
    count = body[start + len(_REPEATED_OPEN) : -len(_REPEATED_CLOSE)] if start >= 0 else ""
    if not body.endswith(_REPEATED_CLOSE) or not count.isdigit() or not count.isascii():
        return line
    return body[:start].rstrip()


def split_lines(text: str) -> list[str]:
    """Split on \\n, \\r\\n and lone \\r (tqdm's redraws are separate lines)."""
    return _LINE_BREAK_RE.split(text)


def split_glued(segment: str) -> list[str]:
    """One segment (no line breaks, ANSI already stripped) cut before each Ray prefix that is not at its start: the
    lines that tqdm's newline-less redraw (or another process's unfinished output) glued together, each again a line
    of its own with its own prefix. A segment with no such prefix comes back whole (one cheap substring check)."""
    if " pid=" not in segment:
        return [segment]
    cuts = [m.start() for m in _GLUED_PREFIX_RE.finditer(segment, 1)]
    if not cuts:
        return [segment]
    bounds = [0, *cuts, len(segment)]
    return [segment[a:b] for a, b in itertools.pairwise(bounds)]


def clean_line(raw: str) -> str:
    """One raw segment (no line breaks) made readable: no ANSI, no Ray prefix or dedup marker; at most
    MAX_LINE_CHARS."""
    return strip_repeated_suffix(strip_ray_prefix(strip_ansi(raw))[:MAX_LINE_CHARS])


def clean_log_lines(text: str) -> list[LogLine]:
    """Every logical line of a log, cleaned, with its Ray source.

    A physical line that tqdm redrew with \\r becomes several lines; the segments after the
    first carry no prefix of their own, so they inherit the physical line's source. A line glued on
    mid-segment after a Ray prefix (``split_glued``) is a line of its own, with that prefix's source.
    """
    result: list[LogLine] = []
    for physical in strip_ansi(text).replace("\r\n", "\n").split("\n"):
        source: str | None = None
        for segment in physical.split("\r"):
            for piece in split_glued(segment):
                nested = split_ray_prefix(piece)
                source = nested.source or source  # a piece without a prefix is the latest printer's
                result.append(LogLine(strip_repeated_suffix(nested.text[:MAX_LINE_CHARS]), source))
    return result


def clean_lines(text: str) -> list[str]:
    """The cleaned text of every logical line; line N (1-based) is ``clean_lines(t)[N-1]``."""
    return [line.text for line in clean_log_lines(text)]


def clean_text(text: str) -> str:
    """The whole log cleaned, one logical line per ``\\n``; the classifier's line numbers refer to it."""
    return "\n".join(clean_lines(text))
