"""The rollout-OOM ladder (pure): which way the rollout engine's memory share moves depends on the message.

vLLM and SGLang reserve a *share* of the GPU (``rollout.gpu_memory_utilization``; SGLang calls it
``mem_fraction_static``) and fit weights + activations + KV cache inside it. Their memory errors say two
opposite things (read in their sources: vLLM ``v1/core/kv_cache_utils.py`` ``_check_enough_kv_cache_memory``
and ``v1/worker/utils.py`` ``request_memory``; SGLang ``model_runner`` / ``pool_configurator``
``MemoryPoolConfig`` and ``cuda_graph_runner``):

* the share is too SMALL — "No available memory for the cache blocks. Try increasing
  `gpu_memory_utilization`", "To serve at least one request with the model's max seq len (N) … larger
  than the available KV cache memory", SGLang "Not enough memory. Please try to increase
  --mem-fraction-static": raise the share while the GPU has room, else lower ``max_num_seqs`` (a smaller
  profiling batch leaves more of the share to the KV cache); never lower the share;
* the share is too LARGE for what is free — "Free memory on device … on startup is less than desired GPU
  memory utilization" (seen on the H200: other processes, or the colocated trainer, hold memory), a CUDA OOM
  while capturing CUDA graphs or waking the engine up: lower the share (to what the message says is free),
  then turn CUDA graphs off.

Each failure also records what it proved (a floor or a ceiling for the share), and every later share lies
strictly between them: the ladder is bounded and never tries a share twice, so it cannot oscillate.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl_async_dapo.policy import AttemptConfig

UTIL_STEP = 0.1
UTIL_MIN = 0.3  # below this a colocated vLLM rarely fits even a small model's weights + graphs
UTIL_MAX = 0.9  # above this the trainer's own memory (colocated) and CUDA context have no room left
UTIL_GRAIN = 0.05  # shares are multiples of this: a finite set, so a bounded ladder
FREE_MARGIN = 0.02  # keep under what the message reported free (the CUDA context of the next start)
MAX_NUM_SEQS_LADDER = (128, 64, 32)

# Kinds (logs/rules.py) whose message says the share is too small for weights + activations + KV cache.
SHARE_TOO_SMALL = frozenset({"vllm_kv_cache", "vllm_max_len", "sglang_memory"})
# Kinds where fewer concurrent sequences come first: the sampler's warm-up batch, and a CUDA/NPU OOM raised inside
# the engine while it generated (logs/classify.py files it as "generation_oom").
FEWER_SEQS_FIRST = frozenset({"vllm_sampler_warmup", "generation_oom"})
# "Free memory on device (75.62/139.8 GiB) on startup is less than desired GPU memory utilization (0.6, …)"
_FREE_RE = re.compile(r"Free memory on device \S* ?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\)")

# What the user is told for each kind: the same thing the ladder below does (check_errors shows it).
FIX_BY_KIND: dict[str, str] = {
    "vllm_kv_cache": "the engine's share is too small for its weights + activations + KV cache: relaunch with a "
    f"higher rollout.gpu_memory_utilization while the GPU has room (+{UTIL_STEP:g}, at most {UTIL_MAX:g}, what verl's "
    "'device memory used/total' line leaves free, and below any share that failed for lack of free memory), "
    f"then a lower rollout.max_num_seqs ({', '.join(map(str, MAX_NUM_SEQS_LADDER))})",
    "vllm_max_len": "the KV cache cannot hold one max-length sequence: relaunch with a higher "
    f"rollout.gpu_memory_utilization (+{UTIL_STEP:g}, at most {UTIL_MAX:g}), then a lower rollout.max_num_seqs; "
    "or lower MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH (max_model_len)",
    "sglang_memory": "SGLang's static share (mem_fraction_static = rollout.gpu_memory_utilization) is too small: "
    f"relaunch with a higher share (+{UTIL_STEP:g}, at most {UTIL_MAX:g}), then a lower rollout.max_num_seqs",
    "vllm_sampler_warmup": "the profiling batch of max_num_seqs requests did not fit: relaunch with a lower "
    f"rollout.max_num_seqs ({', '.join(map(str, MAX_NUM_SEQS_LADDER))}), then a lower rollout.gpu_memory_utilization",
    "generation_oom": "the engine ran out of memory while generating (activations of the concurrent sequences, "
    "on top of its KV cache): relaunch with a lower rollout.max_num_seqs "
    f"({', '.join(map(str, MAX_NUM_SEQS_LADDER))}), then a lower rollout.gpu_memory_utilization; offloading the actor "
    "does not help the engine",
    "vllm_startup_memory": "less GPU memory was free at engine start than the share asks for (other processes or "
    "the colocated trainer hold it): relaunch with rollout.gpu_memory_utilization lowered to what was free "
    f"(at least −{UTIL_STEP:g}, not below {UTIL_MIN:g}); free the GPU if it keeps failing",
    "vllm_sleep_memory_grew": "another process allocated memory on the rollout's GPU while vLLM slept (the GPU is "
    f"shared): relaunch with a lower rollout.gpu_memory_utilization (−{UTIL_STEP:g}, not below {UTIL_MIN:g}) to "
    "leave it room; better, give the run GPUs of its own (preflight names the processes that hold memory)",
}
FIX_LOWER = (
    f"relaunch with a lower rollout.gpu_memory_utilization (−{UTIL_STEP:g}, not below {UTIL_MIN:g}), "
    "then eager mode (no CUDA graphs)"
)


def fix_for_kind(kind: str | None) -> str:
    """The rollout-OOM fix in words, for the kind the classifier found."""
    return FIX_BY_KIND.get(kind or "", FIX_LOWER)


def _between(low: float | None, high: float | None) -> float | None:
    """A share on the grain strictly inside (low, high), nearest the middle; None when there is none."""
    lo, hi = (low if low is not None else UTIL_MIN - UTIL_GRAIN), (high if high is not None else UTIL_MAX + UTIL_GRAIN)
    candidates = [
        v for v in (round(UTIL_MIN + i * UTIL_GRAIN, 2) for i in range(round((UTIL_MAX - UTIL_MIN) / UTIL_GRAIN) + 1))
        if lo < v < hi
    ]  # fmt: skip
    if not candidates:
        return None
    middle = (lo + hi) / 2
    return min(candidates, key=lambda v: (abs(v - middle), v))


def _free_share(evidence: str | None) -> float | None:
    """The share that was free at start-up, from vLLM's message (None when it is not there)."""
    found = _FREE_RE.search(evidence or "")
    if found is None or float(found.group("total")) <= 0:
        return None
    share = float(found.group("free")) / float(found.group("total")) - FREE_MARGIN
    return math.floor(share / UTIL_GRAIN) * UTIL_GRAIN


def rollout_oom_step(
    current: AttemptConfig,
    base_util: float,
    kind: str | None,
    evidence: str | None,
    gpu_used_share: float | None = None,
) -> tuple[AttemptConfig, tuple[str, ...]] | None:
    """The next rollout configuration after a rollout OOM of ``kind``, or None when nothing is left to try.

    ``gpu_used_share``: what the GPU had in use before the engine started (logs.memory): the room a raise may take.
    """
    tweaks = current.tweaks
    util = tweaks.rollout_gpu_memory_utilization or base_util
    low, high = tweaks.rollout_util_floor, tweaks.rollout_util_ceiling
    if kind in SHARE_TOO_SMALL:
        low = util if low is None else max(low, util)
        if gpu_used_share is not None:  # shares above the room left beside what was in use cannot be had
            room = math.floor((1.0 - gpu_used_share - FREE_MARGIN) / UTIL_GRAIN) * UTIL_GRAIN
            high = min(high if high is not None else math.inf, round(room + UTIL_GRAIN, 2))
        wanted = round(util + UTIL_STEP, 2)
        if not (wanted < (high if high is not None else math.inf) and wanted <= UTIL_MAX):
            wanted = _between(low, high)  # type: ignore[assignment]
        if wanted is not None and low < wanted <= UTIL_MAX and (high is None or wanted < high):
            new = replace(tweaks, rollout_gpu_memory_utilization=wanted, rollout_util_floor=low)
            return replace(current, tweaks=new), (f"rollout gpu_memory_utilization {util:g} → {wanted:g} (raised)",)
        seqs = next((n for n in MAX_NUM_SEQS_LADDER if tweaks.rollout_max_num_seqs is None
                     or n < tweaks.rollout_max_num_seqs), None)  # fmt: skip
        if seqs is None:
            return None
        new = replace(tweaks, rollout_max_num_seqs=seqs, rollout_util_floor=low)
        return replace(current, tweaks=new), (f"rollout max_num_seqs → {seqs}",)
    if kind in FEWER_SEQS_FIRST and (tweaks.rollout_max_num_seqs or 10**9) > MAX_NUM_SEQS_LADDER[-1]:
        # vLLM's own advice, in order: a smaller (profiling or generating) batch first (the share itself may be right).
        seqs = next(
            n for n in MAX_NUM_SEQS_LADDER if tweaks.rollout_max_num_seqs is None or n < tweaks.rollout_max_num_seqs
        )
        return replace(current, tweaks=replace(tweaks, rollout_max_num_seqs=seqs)), (f"rollout max_num_seqs → {seqs}",)
    # The share is too large for what is free (or for the graphs / wake-up on top of it): lower it.
    high = util if high is None else min(high, util)
    wanted = round(util - UTIL_STEP, 2)
    free = _free_share(evidence) if kind == "vllm_startup_memory" else None
    if free is not None:
        wanted = min(wanted, round(free, 2))
    if wanted < UTIL_MIN or (low is not None and wanted <= low):
        wanted = _between(low, high)  # type: ignore[assignment]
    if wanted is not None and wanted >= UTIL_MIN and wanted < high and (low is None or wanted > low):
        new = replace(tweaks, rollout_gpu_memory_utilization=wanted, rollout_util_ceiling=high)
        return replace(current, tweaks=new), (f"rollout gpu_memory_utilization {util:g} → {wanted:g} (lowered)",)
    # Graphs don't matter before the engine starts, nor to memory another process takes while the engine sleeps.
    if kind not in ("vllm_startup_memory", "vllm_sleep_memory_grew") and not tweaks.rollout_enforce_eager:
        new = replace(tweaks, rollout_enforce_eager=True, rollout_util_ceiling=high)
        return replace(current, tweaks=new), ("rollout enforce_eager (no CUDA graphs)",)
    return None
