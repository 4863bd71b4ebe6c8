"""What a verl run is doing right now, from the lines it prints (pure).

Before its first step a verl run spends minutes that no step counter shows: on the H200 the first step came
~4 minutes after launch (tests/logs/real/). The markers below are the lines verl 0.9.1 + vLLM 0.24.0 print at
each stage there, in this order:

* ``ray init kwargs: {...}`` (verl ``main_ppo.run_ppo``, just before ``ray.init``)            → starting Ray
* ``Started a local Ray instance`` / ``Connected to Ray cluster`` (Ray ``worker.py``)           → loading model
  (the TaskRunner prints the config, builds the datasets, then ``init_workers`` loads the model: ``Loading
  weights``, ``Before FSDP, memory allocated``)
* the first line of the rollout server actor (``(vLLMHttpServer pid=…)`` / ``(SGLangHttpServer pid=…)``) or of
  an in-worker engine (``Initializing a V1 LLM engine``, ``Capturing CUDA graphs``)            → rollout engine start-up
* ``Checkpoint tracker file does not exist`` / ``Training from scratch`` / ``Load from checkpoint folder``
  (``RayPPOTrainer._load_checkpoint``, the first thing ``fit`` does) and tqdm's bar at its start → first step
  (warm-up: compile, CUDA graphs, the first rollout)
* ``test_gen_batch meta info`` (``_validate``)                                                 → validation
* ``local_global_step_folder:`` (``_save_checkpoint``)                                         → saving checkpoint
* ``validation generation end`` and every ``step:N - …`` metrics line                          → training
* ``Final validation metrics``                                                                 → finishing

A batch job (the SLURM target) adds one phase before all of these: ``[verl-async-dapo] queued:``, which the
target writes into the log when it submits the job → queued (waiting in the scheduler's queue, not a hang), until
the job script's ``[verl-async-dapo] started:`` → starting.

Inside a step verl saves and validates *before* printing that step's metrics line, so the phase after
``local_global_step_folder`` is "saving checkpoint" until the next marker.
"""

from __future__ import annotations

import re
from enum import Enum


class Phase(str, Enum):
    QUEUED = "queued"  # a batch job waiting for its allocation (targets/slurm/script.py's markers)
    STARTING = "starting"  # python imports, Hydra composition: before verl calls ray.init
    STARTING_RAY = "starting Ray"
    LOADING_MODEL = "loading model"
    ROLLOUT_STARTUP = "rollout engine start-up"
    WARMUP = "first step (warm-up)"
    VALIDATION = "validation"
    SAVING_CHECKPOINT = "saving checkpoint"
    TRAINING = "training"
    FINISHING = "finishing"


# Start-up phases, in order: a later marker never moves the phase back into an earlier one.
_STARTUP_ORDER = (Phase.STARTING, Phase.STARTING_RAY, Phase.LOADING_MODEL, Phase.ROLLOUT_STARTUP)
_RAY_UP = ("Started a local Ray instance", "Connected to Ray cluster", "Connecting to existing Ray cluster")
_ROLLOUT_ACTORS = ("vLLMHttpServer pid=", "SGLangHttpServer pid=", "AsyncvLLMServer pid=", "AsyncSglangServer pid=")
_ROLLOUT_LINES = ("Initializing a V1 LLM engine", "Capturing CUDA graph", "Initializing an LLM engine")
_QUEUED_MARK = "[verl-async-dapo] queued:"  # the same text as targets/slurm/script.py (tested there)
_JOB_STARTED_MARK = "[verl-async-dapo] started:"
_FIT_STARTS = ("Checkpoint tracker file does not exist", "Training from scratch", "Load from checkpoint folder")


# One search decides whether a line can be a marker at all (most lines are not): the parser stays cheap.
_ANY_MARKER_RE = re.compile(
    "|".join(
        re.escape(m)
        for m in (
            "ray init kwargs",
            _QUEUED_MARK,
            _JOB_STARTED_MARK,
            *_RAY_UP,
            *_ROLLOUT_LINES,
            *_FIT_STARTS,
            "Training Progress",
            "test_gen_batch meta info",
            "local_global_step_folder:",
            "validation generation end",
            "Final validation metrics",
        )
    )
)


def next_phase(current: Phase, raw: str, line: str, *, training_started: bool) -> Phase | None:
    """The phase after this line (``raw`` as printed, ``line`` cleaned), or None when it does not change it.

    ``training_started``: a metrics line was seen in this attempt (the first step is no longer warming up).
    """
    if current is Phase.QUEUED:  # any sign of life ends the wait; the start-up markers count from "starting"
        if _JOB_STARTED_MARK in line:
            return Phase.STARTING
        return next_phase(Phase.STARTING, raw, line, training_started=training_started) or Phase.STARTING
    starting = current in _STARTUP_ORDER
    if not (starting and "Server pid=" in raw) and _ANY_MARKER_RE.search(line) is None:
        return None
    if _QUEUED_MARK in line:
        return Phase.QUEUED if current is Phase.STARTING else None
    if _JOB_STARTED_MARK in line:
        return None
    if starting:
        rank = _STARTUP_ORDER.index(current)
        if rank < 1 and "ray init kwargs" in line:
            return Phase.STARTING_RAY
        if rank < 2 and any(marker in line for marker in _RAY_UP):
            return Phase.LOADING_MODEL
        if rank < 3 and (any(a in raw for a in _ROLLOUT_ACTORS) or any(m in line for m in _ROLLOUT_LINES)):
            return Phase.ROLLOUT_STARTUP
    if any(marker in line for marker in _FIT_STARTS) or ("Training Progress" in line and not training_started):
        return None if current in (Phase.WARMUP, Phase.VALIDATION) and "Training Progress" in line else Phase.WARMUP
    if "test_gen_batch meta info" in line:
        return Phase.VALIDATION
    if "local_global_step_folder:" in line:
        return Phase.SAVING_CHECKPOINT
    if "validation generation end" in line:
        return Phase.TRAINING if training_started else Phase.WARMUP
    if "Final validation metrics" in line:
        return Phase.FINISHING
    return None
