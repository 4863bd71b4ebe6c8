"""Where a log line sits: the prefixes launchers and loggers put before it, and which process printed it (pure)."""

from __future__ import annotations

import re

from verl_async_dapo.logs.text import LogLine, split_ray_prefix

# A timestamp some launchers put before every line (``[2025-05-10 00:18:27] ``, ISO ``…Z ``, SGLang's
# ``[2025-05-19 23:22:28 TP3] ``).
_STAMP_RE = re.compile(r"^(?:\[\d{4}-\d{2}-\d{2}[ T][\d:.,]+(?: TP\d+)?\]|\d{4}-\d{2}-\d{2}T[\d:.]+Z) ")
# Prefixes that say nothing about the message and hide where it starts (each anchored, no nested
# quantifiers: linear in the line). Real logs (tests/logs/corpus) have each of them:
_PREFIX_RES = (
    # torchrun's per-rank prefix ``[rank0]: `` (the process's own output, so the driver's).
    re.compile(r"^\[rank\d+\]: ?"),
    # vLLM's logger: ``ERROR 03-20 02:29:07 [multiproc_executor.py:375] `` (optionally ``[core.py:632]``).
    re.compile(r"^(?:ERROR|WARNING|INFO|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[\w.]+:\d+\] ?"),
    # pytest's failure lines ``E                       ray.exceptions.…``.
    re.compile(r"^E {2,}"),
    # ``2023-02-17 22:40:24,367 (worker_7) : `` and ``[12:30:03.910893] ``.
    re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ \(\w+\) : "),
    re.compile(r"^\[\d\d:\d\d:\d\d\.\d+\] "),
    # mmengine: ``12/09 06:49:23 - mmengine - INFO - ``.
    re.compile(r"^\d\d/\d\d \d\d:\d\d:\d\d - \w+ - [A-Z]+ - "),
)
# A second process prefix inside Ray's (``(vLLMHttpServer pid=1) (Worker_TP1 pid=2) …``) or vLLM's own
# ``(VllmWorker rank=1 pid=572) ``: the inner process printed it.
_INNER_PROCESS_RE = re.compile(r"^\((?P<cls>[A-Za-z_][\w.-]*) (?:rank=\d+ )?pid=\d+\) ")
_MAX_PASSES = 4
# A line longer than this is cut before any rule reads it: matching stays bounded per line.
MAX_LINE_CHARS = 4096

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
    """The line without launcher timestamps, logger and rank prefixes (and a Ray prefix after them)."""
    text, source = line.text, line.source
    for _ in range(_MAX_PASSES):
        match = _STAMP_RE.match(text)
        if match is not None:
            rest = split_ray_prefix(text[match.end() :])
            text, source = rest.text, rest.source or source
            continue
        inner = _INNER_PROCESS_RE.match(text)
        if inner is not None:
            text, source = text[inner.end() :], source or inner.group("cls")
            continue
        for prefix in _PREFIX_RES:
            match = prefix.match(text)
            if match is not None:
                text = text[match.end() :]
                break
        else:
            break
    return line if text is line.text else LogLine(text, source)


def clipped(line: LogLine) -> LogLine:
    """The line cut to MAX_LINE_CHARS (the message a finding quotes is inside it)."""
    return line if len(line.text) <= MAX_LINE_CHARS else LogLine(line.text[:MAX_LINE_CHARS], line.source)


def bounded_text(text: str) -> str:
    """Every line (and every ``\\r`` segment of a tqdm redraw) cut to a bounded length before any regex reads
    it, so that classifying is linear in the log's length whatever its lines hold; the line count is kept."""
    limit = 2 * MAX_LINE_CHARS
    if len(text) <= limit or max(map(len, text.split("\n"))) <= limit:
        return text
    out: list[str] = []
    for physical in text.split("\n"):
        if len(physical) > limit:
            physical = "\r".join(segment[:limit] for segment in physical.split("\r"))
        out.append(physical)
    return "\n".join(out)
