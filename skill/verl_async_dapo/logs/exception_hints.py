"""What an exception verl did not label itself says about the config (pure).

verl checks much of its config with bare ``assert`` in worker and config init, and a config
value of the wrong type (e.g. ``trainer.nnodes=$UNSET_VAR`` arrives as a string) surfaces as
a ``TypeError`` on the line that uses it. Neither is "an error this tool does not know": both
are config errors, and the traceback's source lines usually name the key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from verl_async_dapo.categories import ErrorCategory

_FRAME_RE = re.compile(r'^File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>.]+)')
_DOTTED_KEY_RE = re.compile(
    r"\b(?P<key>(?:actor_rollout_ref|data|trainer|critic|algorithm|reward_model|custom_reward_function"
    r"|rollout|actor|ref|model)\.[a-z_][\w]*(?:\.[a-z_]\w*)*)"
)
# Names verl's messages use for a config key.
KEY_ALIASES: dict[str, str] = {
    "infer_tp": "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "ppo_mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "log_prob_micro_batch_size_per_gpu": "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "train_batch_size": "data.train_batch_size",
    "ulysses_sequence_parallel_size": "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "ulysses_device_mesh": "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "n_gpus_per_node": "trainer.n_gpus_per_node",
    "nnodes": "trainer.nnodes",
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "max_num_batched_tokens": "actor_rollout_ref.rollout.max_num_batched_tokens",
    "lr_warmup_steps": "actor_rollout_ref.actor.optim.lr_warmup_steps",
}
_ALIAS_RE = re.compile(r"\b(" + "|".join(sorted(KEY_ALIASES, key=len, reverse=True)) + r")\b")
# Where verl validates its config: worker construction and the config classes.
_INIT_FUNCS = frozenset(
    {"__init__", "__post_init__", "init_model", "_validate_config", "validate_config", "check_mutually_exclusive"}
)
_CONFIG_PATHS = ("/verl/workers/config/", "/verl/utils/config", "/verl/trainer/config/")
# Functions and files that check arguments and settings (the ValueError they raise is a config error).
_VALIDATING_FUNC_RE = re.compile(r"_?(?:verify|validate|check)_?\w*$|__post_init__$")
_ARGUMENT_PATHS = ("/argument/", "_args.py", "arg_utils.py", "/config/", "sampling_params.py")
# How far above an exception its frames are looked for.
_FRAMES_BACK = 40


def config_key_hint(*texts: str | None) -> str | None:
    """The config key a message or a source line names, fully qualified when we know it."""
    for text in texts:
        if not text:
            continue
        keys = [m.group("key") for m in _DOTTED_KEY_RE.finditer(text)]
        if keys:
            key = keys[-1]
            # verl's messages drop the top-level group ("rollout.x" is "actor_rollout_ref.rollout.x").
            return f"actor_rollout_ref.{key}" if key.startswith(("rollout.", "actor.", "ref.")) else key
        alias = _ALIAS_RE.search(text)
        if alias:
            return KEY_ALIASES[alias.group(1)]
    return None


def _frames_above(texts: Sequence[str], index: int) -> list[tuple[str, str, str]]:
    """(path, function, source line) of the frames above ``index``, innermost first."""
    frames: list[tuple[str, str, str]] = []
    for position in range(index - 1, max(-1, index - _FRAMES_BACK), -1):
        match = _FRAME_RE.match(texts[position].strip())
        if match is None:
            continue
        below = texts[position + 1].strip() if position + 1 < index else ""
        source = "" if _FRAME_RE.match(below) else below
        frames.append((match.group("path"), match.group("func"), source))
    return frames


def config_error_for(texts: Sequence[str], index: int, cls: str | None) -> tuple[ErrorCategory, str, str | None] | None:
    """(config_error, kind, key) when an unrecognised exception is verl rejecting its config."""
    if cls not in ("AssertionError", "TypeError", "ValueError"):
        return None
    frames = _frames_above(texts, index)
    if not frames:
        return None
    message = texts[index].strip()
    _path, func, source = frames[0]
    if cls == "ValueError":
        # A value a library's argument check rejects (vLLM's SamplingParams._verify_args, an *_args.py
        # dataclass __post_init__): a setting, whichever library validates it.
        if _VALIDATING_FUNC_RE.match(func) or any(part in _path for part in _ARGUMENT_PATHS):
            return ErrorCategory.CONFIG_ERROR, "invalid_value", config_key_hint(message, source)
        return None
    verl_frames = [frame for frame in frames if "/verl/" in frame[0]]
    if cls == "TypeError":
        if "config." in source or func in ("_validate_config", "validate_config"):
            return ErrorCategory.CONFIG_ERROR, "config_type", config_key_hint(source)
        return None
    if not verl_frames:
        return None
    # A library's constructor that verl called asserting on a value verl passed from its config (Megatron's
    # OptimizerParamScheduler: `assert self.lr_warmup_steps < self.lr_decay_steps`, seen on the H200): the
    # innermost source line names the key.
    if func in _INIT_FUNCS and "/verl/" not in _path and config_key_hint(source):
        return ErrorCategory.CONFIG_ERROR, "verl_validation", config_key_hint(source)
    vpath, vfunc, vsource = verl_frames[0]
    if vfunc in _INIT_FUNCS or vfunc.startswith(("_build_", "_check_")) or any(p in vpath for p in _CONFIG_PATHS):
        return ErrorCategory.CONFIG_ERROR, "verl_validation", config_key_hint(message, vsource)
    return None


def key_from_context(texts: Sequence[str], index: int) -> str | None:
    """The config key named in the source lines of the frames above ``index`` (device-mesh errors)."""
    for _path, _func, source in _frames_above(texts, index):
        key = config_key_hint(source)
        if key:
            return key
    return None
