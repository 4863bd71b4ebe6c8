"""Why did a verl run fail? Sort the log (tail) into an ErrorCategory (pure).

Pre-processing and rules follow peers.md §2: strip ANSI and Ray prefixes, split tqdm's
``\\r`` redraws, match anchored multi-word patterns (never a bare "oom"), prefer the
innermost / last exception (Ray re-raises a worker's error as ``RayTaskError(Inner)``, the
inner text printed last), take the phase from the innermost ``ray::WorkerDict.<method>()``,
and rank categories: config/env > host OOM > rollout OOM > GPU OOM > NCCL > worker died >
unknown. Hydra's ``Error executing job with overrides: [`` only says "something fatal
follows"; it is not a config error. A log with no error (warnings included) gives no primary.

What real logs taught (tests/logs/corpus): fatal markers count only at the start of a line
(a logger prints handled tracebacks as ``ERROR:<time>:Traceback …``); a worker's report that
*another* actor died, and any worker death after "Final validation metrics" (shutdown), are
not the failure; ``ActorDiedError … creation task`` defers to the exception printed under
it; and some findings (a tracker rejecting uploads mid-run) are reported but never fatal.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

from verl_async_dapo.categories import CATEGORY_INFO, ErrorCategory
from verl_async_dapo.logs.exception_hints import config_error_for, config_key_hint, key_from_context
from verl_async_dapo.logs.line_context import bounded_text, clipped, not_the_failure, unstamped
from verl_async_dapo.logs.location import CONTEXT_LINES, error_context
from verl_async_dapo.logs.rule_base import Rule
from verl_async_dapo.logs.rules import ANY_NEEDLE_RE, CATEGORY_PRIORITY, RULES
from verl_async_dapo.logs.rules_verl import NONFATAL_NOTES
from verl_async_dapo.logs.structure import EXCEPTION_LINE_RE, context_category, frame_of, tail_failure
from verl_async_dapo.logs.text import LogLine, clean_log_lines
from verl_async_dapo.redact import redact_generic

EXCERPT_MAX_CHARS = 1200
EXCERPT_LINES_BEFORE = 6
EXCERPT_LINES_AFTER = 3
MESSAGE_MAX_CHARS = 300
MAX_FINDINGS = 20
# A log that prints one error on every rank: classify the last few copies only.
MAX_HITS_PER_RULE = 16
# GPU-memory kinds that, raised inside the rollout engine, are the engine's generation-time OOM.
_GENERATION_OOM_KINDS = frozenset({"torch_cuda_oom", "cuda_error_oom", "npu_oom"})
# Lines that say the process is going down, even when no rule names the reason. Only at the
# start of a line: a logger's ``ERROR:<time>:Traceback (most recent call last):`` is handled.
_FATAL_MARKERS = (
    "Error executing job with overrides",
    "Traceback (most recent call last)",
    "terminate called after throwing an instance of",
    "Fatal Python error",
)
# Ray job logs say it mid-line ("Status message: Job entrypoint command failed …").
_FATAL_ANYWHERE = ("Job entrypoint command failed",)
_SHUTDOWN_MARKER = "Final validation metrics"
# Wrapper headers that defer even to an exception no rule names (the real error is under them).
_DEFERS_TO_ANY_EXCEPTION = frozenset({"actor_creation_failed"})
_RAY_TASK_ERROR = "ray.exceptions.RayTaskError"
# Earlier rules in the table are more specific.
_RULE_RANK = {id(rule): position for position, rule in enumerate(RULES)}


@dataclass(frozen=True)
class Finding:
    category: ErrorCategory
    kind: str
    # 1-based, in the cleaned text (verl_async_dapo.logs.text.clean_text).
    line: int
    excerpt: str
    message: str
    phase: str | None = None
    detail: str | None = None
    # How many times this (category, kind) was seen; `line` is the last (innermost) one.
    count: int = 1
    explanation: str = ""
    fix: str = ""
    # False: reported while training goes on (e.g. a tracker rejecting uploads); never a failure.
    fatal: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category.value,
            "kind": self.kind,
            "line": self.line,
            "excerpt": self.excerpt,
            "message": self.message,
            "phase": self.phase,
            "detail": self.detail,
            "count": self.count,
            "explanation": self.explanation,
            "fix": self.fix,
            "fatal": self.fatal,
        }


@dataclass(frozen=True)
class Classification:
    primary: Finding | None
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "primary": self.primary.to_dict() if self.primary is not None else None,
            "findings": [finding.to_dict() for finding in self.findings],
        }


@dataclass
class _Hit:
    rule: Rule | None  # None: the generic "fatal, not recognised" finding
    category: ErrorCategory
    kind: str
    index: int  # 0-based line index
    detail: str | None
    phase: str | None
    count: int = 1
    # Demoted by context (a worker death at shutdown, or seen by another worker).
    demoted: bool = False

    @property
    def weak(self) -> bool:
        return self.rule is not None and self.rule.weak

    @property
    def supporting(self) -> bool:
        return self.demoted or (self.rule is not None and self.rule.supporting)

    @property
    def nonfatal(self) -> bool:
        return self.rule is not None and self.rule.nonfatal

    def sort_key(self) -> tuple[int, bool, bool, int, int]:
        """Category priority, then decisive before supporting, full before wrapper-only,
        the more specific rule, and the later (innermost) line."""
        rule_rank = _RULE_RANK[id(self.rule)] if self.rule is not None else len(_RULE_RANK)
        return (CATEGORY_PRIORITY[self.category], self.supporting or self.nonfatal, self.weak, rule_rank, -self.index)


def _is_frame(text: str) -> bool:
    return text.startswith('File "') and ", line " in text


def _detail(match: re.Match[str]) -> str | None:
    for name in ("detail", "d2", "d3"):
        if name in match.re.groupindex and match.group(name):
            return match.group(name)[:MESSAGE_MAX_CHARS]
    return None


def _first_rule_match(text: str) -> tuple[Rule, re.Match[str]] | None:
    """The first rule (most specific first) that matches this line; one finding per line."""
    for rule in RULES:
        if not any(needle in text for needle in rule.needles):
            continue
        match = rule.pattern.search(text)
        if match is not None and (rule.accept is None or rule.accept(match)):
            return rule, match
    return None


def _scan(lines: list[LogLine]) -> tuple[list[_Hit], list[int]]:
    """Every rule hit (last copies only) and the positions of fatal markers."""
    raw: dict[int, list[tuple[int, re.Match[str]]]] = {}
    rules_by_id: dict[int, Rule] = {}
    fatal: list[int] = []
    frame_indent: int | None = None
    for index, (line, source) in enumerate(lines):
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        # The source line under `File "…", line N` (indented deeper) is code, not a message: a
        # traceback through verl's validation code would otherwise quote its own error strings.
        # Frames of compiled code have no source line; the exception then follows unindented.
        is_code = frame_indent is not None and indent > frame_indent
        frame_indent = indent if _is_frame(text) else None
        if is_code or not text:
            continue
        if _is_fatal_marker(lines, index, text, source):
            fatal.append(index)
        if ANY_NEEDLE_RE.search(text) is None:
            continue
        found = _first_rule_match(text)
        if found is not None:
            rule, match = found
            rules_by_id[id(rule)] = rule
            raw.setdefault(id(rule), []).append((index, match))
    shutdown = max((i for i, line in enumerate(lines) if _SHUTDOWN_MARKER in line.text), default=None)
    hits: list[_Hit] = []
    for rule_id, matches in raw.items():
        rule = rules_by_id[rule_id]
        for index, match in matches[-MAX_HITS_PER_RULE:]:
            phase, in_rollout = error_context(lines, index)
            category = rule.category
            kind = rule.kind
            if category is ErrorCategory.GPU_OOM and rule.kind != "nccl_cuda_oom" and in_rollout:
                # Where the OOM happened decides: in the engine it is the rollout's, with the engine's fix.
                category = ErrorCategory.ROLLOUT_OOM
                kind = "generation_oom" if rule.kind in _GENERATION_OOM_KINDS else rule.kind
            hit = _Hit(rule, category, kind, index, _detail(match), phase)
            hit.demoted = category is ErrorCategory.WORKER_DIED and not_the_failure(
                lines[index], index, shutdown, rule.kind
            )
            if category is ErrorCategory.CONFIG_ERROR and rule.kind in ("verl_validation", "device_mesh"):
                texts = [line.text for line in lines]
                hit.detail = config_key_hint(hit.detail) or key_from_context(texts, index) or hit.detail
            hits.append(hit)
    return hits, fatal


def _is_fatal_marker(lines: list[LogLine], index: int, text: str, source: str | None) -> bool:
    if text.startswith(_RAY_TASK_ERROR):
        return True
    if any(marker in text for marker in _FATAL_ANYWHERE):
        return True
    if not text.startswith(_FATAL_MARKERS):
        return False
    if text.startswith("Traceback"):
        # A worker's traceback is not fatal by itself (the driver re-raises fatal ones as
        # RayTaskError), and Python reports errors in __del__ at exit as "Exception ignored".
        if source is not None:
            return False
        return not any("Exception ignored in" in lines[i].text for i in range(max(0, index - 2), index))
    return True


def _unrecognised(lines: list[LogLine], fatal: list[int], cut: int | None) -> _Hit:
    """The innermost / last exception line after the last fatal marker (else the marker), sorted by
    what it is and where it was raised; ``cut``: the last frame of a traceback the log stops inside."""
    last_marker = fatal[-1]
    chosen, detail = last_marker, None
    for start in (last_marker, fatal[0]):
        for index in range(len(lines) - 1, start - 1, -1):
            match = EXCEPTION_LINE_RE.match(lines[index].text.strip())
            if match is not None:
                chosen, detail = index, match.group("inner") or match.group("cls")
                break
        if detail is not None:
            break
    if cut is not None and (detail is None or cut > chosen):
        chosen, detail = cut, None
    phase, _ = error_context(lines, chosen)
    texts = [line.text for line in lines]
    config = config_error_for(texts, chosen, detail)
    if config is not None:
        return _Hit(None, config[0], config[1], chosen, config[2] or detail, phase)
    where = context_category(texts, chosen)
    if where is not None:
        return _Hit(None, where[0], where[1], chosen, where[2] or detail, phase)
    if detail is None and cut is not None:
        frame = frame_of(texts[cut].strip())
        return _Hit(None, ErrorCategory.UNKNOWN, "traceback_cut", chosen, frame[0] if frame else None, phase)
    kind = "python_exception" if detail is not None else "fatal_without_exception"
    return _Hit(None, ErrorCategory.UNKNOWN, kind, chosen, detail, phase)


def _drop_wrappers(hits: list[_Hit], lines: list[LogLine]) -> list[_Hit]:
    """Innermost first: a `RayTaskError(X)` header defers to the exception printed under it.

    `RayTaskError(OutOfMemoryError)` says only "some OutOfMemoryError": the inner line tells
    a worker's torch OOM from Ray's memory monitor (host RAM). The header counts only when
    nothing decisive follows it (e.g. the tail was cut there).
    """
    inner = sorted(hit.index for hit in hits if not hit.weak and not hit.supporting)
    # A deferring wrapper with an exception under it: it and the wrappers above it step aside.
    deferred = sorted(
        hit.index for hit in hits if hit.kind in _DEFERS_TO_ANY_EXCEPTION and _exception_follows(lines, hit.index)
    )
    kept: list[_Hit] = []
    for hit in hits:
        if hit.weak:
            position = bisect.bisect_right(inner, hit.index)
            if position < len(inner) and inner[position] - hit.index <= CONTEXT_LINES:
                continue
            position = bisect.bisect_left(deferred, hit.index)
            if position < len(deferred) and deferred[position] - hit.index <= CONTEXT_LINES:
                continue
        kept.append(hit)
    return kept


def _exception_follows(lines: list[LogLine], index: int) -> bool:
    for position in range(index + 1, min(len(lines), index + CONTEXT_LINES)):
        match = EXCEPTION_LINE_RE.match(lines[position].text.strip())
        if match is not None and not lines[position].text.startswith(("ray.exceptions.", _RAY_TASK_ERROR)):
            return True
    return False


def _merge(hits: list[_Hit]) -> list[_Hit]:
    """One hit per (category, kind), counting the copies: the most specific rule's last
    (innermost) hit, e.g. Hydra's `Could not override 'full.key'` over `Key 'leaf' is not in struct`."""
    merged: dict[tuple[ErrorCategory, str], _Hit] = {}
    for hit in sorted(hits, key=_Hit.sort_key):
        key = (hit.category, hit.kind)
        if key in merged:
            merged[key].count += hit.count
        else:
            merged[key] = hit
    return list(merged.values())


def _clip(line: str) -> str:
    """A long line cut like `message` (indentation kept), so the message is always inside."""
    body = line.strip()
    return line[: len(line) - len(line.lstrip())] + body[:MESSAGE_MAX_CHARS]


def _excerpt(lines: list[LogLine], index: int) -> str:
    first = max(0, index - EXCERPT_LINES_BEFORE)
    last = min(len(lines), index + EXCERPT_LINES_AFTER + 1)
    window = [_clip(lines[i].text) for i in range(first, last)]
    hit = index - first
    # Drop lines farthest from the hit until it fits.
    while len(window) > 1 and sum(len(line) + 1 for line in window) - 1 > EXCERPT_MAX_CHARS:
        if hit > len(window) - 1 - hit:
            window.pop(0)
            hit -= 1
        else:
            window.pop()
    return redact_generic("\n".join(window))[:EXCERPT_MAX_CHARS]


def _to_finding(lines: list[LogLine], hit: _Hit) -> Finding:
    info = CATEGORY_INFO[hit.category]
    explanation, fix = (
        NONFATAL_NOTES.get(hit.kind, (info.explanation, info.fix))
        if hit.nonfatal
        else (
            info.explanation,
            info.fix,
        )
    )
    return Finding(
        category=hit.category,
        kind=hit.kind,
        line=hit.index + 1,
        excerpt=_excerpt(lines, hit.index),
        message=redact_generic(lines[hit.index].text.strip()[:MESSAGE_MAX_CHARS]),
        phase=hit.phase,
        detail=redact_generic(hit.detail) if hit.detail is not None else None,
        count=hit.count,
        explanation=explanation,
        fix=fix,
        fatal=not hit.nonfatal,
    )


# The part of a log every classification reads (the supervisor at an attempt's end, check_errors' warnings, the
# CLI's `classify FILE`), so that they all see the same error: the fatal one is at the end, and a multi-GB log is
# never read whole.
CLASSIFY_WINDOW_BYTES = 1 << 20


def window_text(data: bytes) -> str:
    """The classification window of a log's bytes (its last CLASSIFY_WINDOW_BYTES) as text."""
    return data[-CLASSIFY_WINDOW_BYTES:].decode("utf-8", errors="replace")


def classify(text: str) -> Classification:
    """Classify a log or its tail. `primary` is None when the log shows no error."""
    lines = [unstamped(clipped(line)) for line in clean_log_lines(bounded_text(text))]
    hits, fatal = _scan(lines)
    kept = _drop_wrappers(hits, lines)
    decisive = [hit for hit in kept if not hit.supporting and not hit.nonfatal]
    # A log that ends inside a traceback is a failure whoever printed it (structure.tail_failure).
    shutdown = max((i for i, line in enumerate(lines) if _SHUTDOWN_MARKER in line.text), default=None)
    tail = tail_failure(lines, shutdown)
    if tail is not None and (not fatal or tail[0] > fatal[-1]):
        fatal.append(tail[0])
    if not decisive and fatal:
        kept.append(_unrecognised(lines, fatal, tail[0] if tail is not None and tail[1] else None))
    ordered = sorted(_merge(kept), key=_Hit.sort_key)[:MAX_FINDINGS]
    findings = [_to_finding(lines, hit) for hit in ordered]
    # Without a decisive hit or a fatal marker only notices that healthy runs print too (or
    # non-fatal findings) were seen: they stay in `findings`, but nothing failed.
    has_failure = bool(decisive or fatal)
    fatal_findings = [finding for finding in findings if finding.fatal]
    primary = fatal_findings[0] if fatal_findings and has_failure else None
    return Classification(primary=primary, findings=findings)


def classify_tail(text: str) -> Classification:
    """Same as classify(); named for the readers that pass a log's window (window_text)."""
    return classify(text)
