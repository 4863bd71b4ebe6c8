"""Where in the run an error happened (pure): the worker method, and whether it was the rollout engine.

Walking up from the error, the first ``ray::Class.method()`` is the innermost Ray call, i.e. the
worker method that raised (the TaskRunner's ``run()`` is only the driver loop); frames of vLLM,
SGLang or verl's rollout workers, or the engine's own processes (vLLM's ``VllmWorker`` /
``EngineCore``, SGLang's scheduler), put it in the rollout. Ray also prints the failed call
*after* a worker's own traceback (``Unhandled error … ray::WorkerDict.actor_rollout_generate_sequences()``),
and SGLang follows an engine OOM with "Received sigquit from a child process": both are read a
few lines below the error (tests/logs/corpus, train split).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from verl_async_dapo.logs.text import LogLine

# How far back from an error the phase (`ray::Class.method()`) and the stack are looked for, and how far below.
CONTEXT_LINES = 400
BELOW_LINES = 12

_RAY_CALL_RE = re.compile(r"ray::(?P<cls>[A-Za-z_]\w*)\.(?P<method>\w+)\(\)")
_FRAME_RE = re.compile(r'^File "(?P<path>[^"]+)", line \d+')
# The rollout side of the hybrid engine and the async servers (not `actor_rollout_ref_update_actor`:
# "rollout" inside that role name says nothing about the phase).
_ROLLOUT_METHOD_RE = re.compile(
    r"generate_sequences|wake_up|sleep|rollout_mode|^rollout_|update_weights|async_generate|chat_completion"
)
_ROLLOUT_CLASS_RE = re.compile(r"(?i:vllm|sglang|trtllm|agentloop|rollout(?!ref)|enginecore|scheduler)")
_ROLLOUT_FRAME_RE = re.compile(r"/vllm/|/sglang/|/workers/rollout/|cumem")
_ENGINE_NOTICES = ("Received sigquit from a child process", "Scheduler hit an exception", "/sglang/srt/")


def _rollout_source(source: str | None) -> bool:
    return source is not None and _ROLLOUT_CLASS_RE.search(source) is not None


def error_context(lines: Sequence[LogLine], index: int) -> tuple[str | None, bool]:
    """(phase, whether the error happened in the rollout) from the lines around an error."""
    in_rollout = _rollout_source(lines[index].source)
    for position in range(index, max(-1, index - CONTEXT_LINES), -1):
        text = lines[position].text.strip()
        frame = _FRAME_RE.match(text)
        if frame is not None and _ROLLOUT_FRAME_RE.search(frame.group("path")):
            in_rollout = True
            continue
        if "ray::" not in text:
            continue
        call = _RAY_CALL_RE.search(text)
        if call is None:
            continue
        cls, method = call.group("cls"), call.group("method")
        if "TaskRunner" in cls:
            return None, in_rollout or _below_in_rollout(lines, index)
        rollout = bool(_ROLLOUT_METHOD_RE.search(method) or _ROLLOUT_CLASS_RE.search(cls))
        return method, in_rollout or rollout
    return None, in_rollout or _below_in_rollout(lines, index)


def _below_in_rollout(lines: Sequence[LogLine], index: int) -> bool:
    """The call Ray names right after a worker's traceback, or the engine's own notice, is the rollout's."""
    for position in range(index + 1, min(len(lines), index + 1 + BELOW_LINES)):
        text = lines[position].text
        if any(notice in text for notice in _ENGINE_NOTICES):
            return True
        call = _RAY_CALL_RE.search(text) if "ray::" in text else None
        if call is not None:
            return bool(_ROLLOUT_METHOD_RE.search(call.group("method")) or _ROLLOUT_CLASS_RE.search(call.group("cls")))
    return False
