"""Where a log line sits: a launcher's timestamp before it, and which process printed it (pure)."""

from __future__ import annotations

import re

from verl_async_dapo.logs.text import LogLine, split_ray_prefix

# A timestamp some launchers put before every line (``[2025-05-10 00:18:27] ``, ISO ``…Z ``).
_STAMP_RE = re.compile(r"^(?:\[\d{4}-\d{2}-\d{2}[ T][\d:.,]+\]|\d{4}-\d{2}-\d{2}T[\d:.]+Z) ")


# Kinds that report *another* actor's death (an ActorDiedError raised to its caller).
_REPORTED_DEATHS = frozenset({"actor_died", "actor_creation_failed"})


def not_the_failure(line: LogLine, index: int, shutdown: int | None, kind: str) -> bool:
    """A worker death that is not why the run failed: after the final validation (workers are
    torn down at exit), or an actor's death reported by another worker (an agent loop losing a
    tool actor it handles) rather than by the driver, the TaskRunner or the raylet."""
    if shutdown is not None and index > shutdown:
        return True
    source = line.source
    return kind in _REPORTED_DEATHS and source is not None and source != "raylet" and "TaskRunner" not in source


def unstamped(line: LogLine) -> LogLine:
    """The line without a launcher's timestamp (and the Ray prefix that may follow it)."""
    match = _STAMP_RE.match(line.text)
    if match is None:
        return line
    rest = split_ray_prefix(line.text[match.end() :])
    return LogLine(rest.text, rest.source or line.source)
