"""The shape of a traceback, not its words (pure): does the log end inside one, and whose code raised.

A log that ends in a traceback is a dead run, whatever prints it (the driver, a worker, torchrun's
``[rank0]:``, vLLM's logger) and even when the excerpt starts mid-traceback or stops before the
exception line. And where an exception no rule names was raised says what kind of failure it is:
under a checkpoint load or save, a reward function, the dataset code, a tracker. Real logs in
tests/logs/corpus (train split) taught each case.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.logs.text import LogLine

C = ErrorCategory

# ``File "/x/y.py", line 3, in f`` (CPython), ``x/y.py:111, in f`` / ``File ~/x.py:17 in f`` (IPython, Spyder).
_FRAME_RE = re.compile(
    r'^(?:File "(?P<p1>[^"]+)", line \d+(?:, in (?P<f1>[\w<>.]+))?|File (?P<p2>\S+\.py):\d+,? in (?P<f2>[\w<>.]+)'
    r"|(?P<p3>\S+\.py):\d+, in (?P<f3>[\w<>.]+))"
)
EXCEPTION_LINE_RE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<cls>[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|StopIteration|StopAsyncIteration)\b"
    r"(?:\((?P<inner>[\w.]+)\))?(?::|$)"
)
# Lines printed after a traceback that say nothing more (Hydra's and CUDA's hints).
_TRAILING_NOISE = (
    "Set the environment variable HYDRA_FULL_ERROR",
    "CUDA kernel errors might be asynchronously reported",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING",
    "Compile with `TORCH_USE_CUDA_DSA`",
    "^^^",
    "~~~",
)
# How many meaningful lines at the end of a log are read, and how far above an exception a frame may be.
TAIL_LINES = 12
FRAME_REACH = 40
# Python logging's default format, as verl's agent loop uses it for handled errors.
_LOGGER_RE = re.compile(r"^(?:ERROR|WARNING|INFO|DEBUG):\d{4}-\d\d-\d\d ")
_KEY_RE = re.compile(r"^(?:[\w.]+\.)?KeyError: '(?P<key>\w+)")
# Fields of verl's dataset rows (verl/utils/dataset/rl_dataset.py, the preprocessing scripts): a KeyError on
# one of them is data without that column, wherever the code that read it lives (often a reward manager).
DATASET_FIELDS = frozenset(
    {
        "reward_model",
        "ground_truth",
        "data_source",
        "prompt",
        "raw_prompt",
        "raw_prompt_ids",
        "extra_info",
        "ability",
        "question",
        "answer",
        "messages",
        "tools",
        "images",
        "videos",
    }
)
_CHECKPOINT_FUNCS = frozenset(
    {
        "load_checkpoint",
        "_load_checkpoint",
        "save_checkpoint",
        "_save_checkpoint",
        "load_state",
        "save_state",
        "_restore_main_state",
        "_restore_checkpoint",
        "load_state_dict",
    }
)
_REWARD_PATHS = ("/reward_score/", "/reward_manager/", "/reward_loop/", "/rewards/")
_REWARD_FUNCS = frozenset({"compute_score", "reward_fn", "compute_reward", "_compute_reward", "verify_reward"})
_DATA_PATHS = ("/utils/dataset/", "rl_dataset.py", "sft_dataset.py", "/datasets/", "/dataset/")
_DATA_FUNCS = frozenset({"filter_long_prompt", "maybe_filter_out_long_prompts", "_read_files_and_tokenize"})
_TRACKER_PATHS = ("/wandb/", "/swanlab/", "/weave/", "/mlflow/")


def frame_of(text: str) -> tuple[str, str] | None:
    """(path, function) of a traceback frame line (function '' when the line has none)."""
    match = _FRAME_RE.match(text)
    if match is None:
        return None
    path = match.group("p1") or match.group("p2") or match.group("p3") or ""
    return path, match.group("f1") or match.group("f2") or match.group("f3") or ""


def _meaningful(text: str) -> bool:
    body = text.strip()
    return bool(body) and not any(body.startswith(noise) for noise in _TRAILING_NOISE)


def _logged(texts: Sequence[str], index: int) -> bool:
    """Whether the traceback holding line ``index`` was handled: the line above its first frame (or above
    its ``Traceback`` header) is a logger's ``ERROR:<date>…`` or Python's "Exception ignored in …"."""
    position = index
    while position > 0 and (
        frame_of(texts[position].strip())
        or texts[position].startswith((" ", "\t"))
        or not _meaningful(texts[position])
        or EXCEPTION_LINE_RE.match(texts[position].strip())
    ):
        position -= 1  # fmt: skip
        if index - position > FRAME_REACH * 3:
            return False
    above = texts[position].strip()
    if above.startswith("Traceback (most recent call last)") and position > 0:
        above = texts[position - 1].strip()
    # Python prints errors in __del__ at exit as "Exception ignored in …": not what ended the run.
    return _LOGGER_RE.match(above) is not None or above.startswith("Exception ignored in")


def tail_failure(lines: Sequence[LogLine], shutdown: int | None) -> tuple[int, bool] | None:
    """(line index, cut) when the log ends inside a traceback: its exception line (cut False) or, when the
    excerpt stops before it, its last frame (cut True). None for any other ending: output from another
    process after it, a traceback a logger printed (handled), or anything after "Final validation metrics"
    (workers torn down at exit print tracebacks too)."""
    texts = [line.text for line in lines]
    tail = [i for i in range(len(texts) - 1, max(-1, len(texts) - 1 - TAIL_LINES * 4), -1) if _meaningful(texts[i])]
    tail = tail[:TAIL_LINES]
    if not tail or (shutdown is not None and tail[-1] > shutdown):
        return None
    last_source = lines[tail[0]].source
    for index in tail:  # newest first: the first frame or exception line met decides
        if lines[index].source != last_source:
            return None
        text = texts[index].strip()
        if frame_of(text) is not None:
            return None if _logged(texts, index) else (index, True)
        if EXCEPTION_LINE_RE.match(text):
            framed = any(frame_of(texts[j].strip()) for j in range(max(0, index - FRAME_REACH), index))
            return (index, False) if framed and not _logged(texts, index) else None
    return None


def frames_above(texts: Sequence[str], index: int, reach: int = FRAME_REACH) -> list[tuple[str, str, str]]:
    """(path, function, source line) of the frames above ``index``, innermost first (the line itself included)."""
    found: list[tuple[str, str, str]] = []
    for position in range(index, max(-1, index - reach), -1):
        frame = frame_of(texts[position].strip())
        if frame is not None:
            below = texts[position + 1].strip() if position + 1 < len(texts) else ""
            found.append((*frame, "" if frame_of(below) else below))
    return found


def context_category(texts: Sequence[str], index: int) -> tuple[ErrorCategory, str, str | None] | None:
    """(category, kind, detail) for an exception (or a cut traceback) no rule names, from what it is and
    where it was raised: a KeyError on a dataset field, then the innermost frame that is checkpoint,
    reward, dataset or tracker code."""
    key = _KEY_RE.match(texts[index].strip())
    if key is not None and key.group("key") in DATASET_FIELDS:
        return C.DATA_ERROR, "missing_field", key.group("key")
    for path, func, source in frames_above(texts, index):
        where = f"{path}:{func}" if func else path
        if func in _CHECKPOINT_FUNCS or "checkpoint" in path.rsplit("/", 1)[-1] or "/utils/checkpoint/" in path:
            return C.CHECKPOINT_ERROR, "checkpoint_io", where
        calls_reward = any(f"{name}(" in source for name in _REWARD_FUNCS)
        if func in _REWARD_FUNCS or calls_reward or any(part in path for part in _REWARD_PATHS):
            return C.REWARD_ERROR, "reward_fn_raised", where
        if func in _DATA_FUNCS or any(part in path for part in _DATA_PATHS):
            return C.DATA_ERROR, "dataset_code", where
        if any(part in path for part in _TRACKER_PATHS):
            return C.TRACKING, "tracker_raised", where
    return None
