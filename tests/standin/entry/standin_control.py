"""Failure-injection control for the verl stand-in, and the config predicates it decides with.

Tests write ``<verl tree>/standin_control.json`` (or point ``STANDIN_CONTROL`` at a file); no file means a
healthy run. Whether an injected OOM fires is decided from the *composed* config on every attempt, the way
real memory pressure would be: a relaunch with the right overrides gets past it, an unchanged one does not.

Schema (every key optional)::

    {
      "oom_at_step": 3,            # first step (>= 1) at which the OOM fires; 0 = at start-up (model/engine init)
      "oom_kind": "gpu",           # "gpu" (torch, update_actor) | "rollout" (vLLM wake-up) | "host" (Ray memory monitor)
                                   # | "rollout_kv_cache" (vLLM "No available memory for the cache blocks" while
                                   #   rollout.gpu_memory_utilization < gpu_memory_utilization_min)
                                   # | "rollout_free_memory" (vLLM "Free memory on device … is less than desired"
                                   #   while it is > gpu_memory_utilization_max; "free" = that max + 0.03)
      "oom_unless": ["offload"],   # predicates that must ALL hold to avoid the OOM ([] = nothing avoids it)
      "gpu_memory_utilization_max": 0.45, # "rollout" kind: OOM while rollout.gpu_memory_utilization > this
      "gpu_memory_utilization_min": 0.0,  # "rollout_kv_cache" kind: OOM while it is below this
                                          # (or while an oom_unless predicate fails)
      "fail": null,                # "config" | "missing_file" | "import" | "nccl_timeout" | "worker_died"
                                   # | "too_difficult" | "sigkill"
      "fail_at_step": 1,           # step for runtime failures and hang (0 = start-up)
      "hang": false,               # stop making progress at fail_at_step and sleep until killed
      "step_seconds": 0.2,         # seconds per step (else env STANDIN_STEP_SECONDS, else 0.2)
      "offload_slowdown": 1.0,     # a step with CPU offload takes this many times as long
      "startup_seconds": 0.0,      # spent in start-up, in thirds: Ray start, model load, rollout engine start-up
      "skip_tracker": false,       # verl #7952: like actor.checkpoint.async_save=True under FSDP, save every
                                   # checkpoint but never write latest_checkpointed_iteration.txt
      "train_samples": 17398,      # dataset sizes behind "Size of train dataloader" (17398 = DAPO-Math-17k)
      "val_samples": 30
    }

Predicates in ``oom_unless``: a feature name from FEATURES, ``!name`` (must be absent), ``dotted.key=value``
(string compare, case-insensitive) or ``dotted.key<=N`` / ``dotted.key>=N`` (numeric).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

CONTROL_FILE = "standin_control.json"
FAILURES = ("config", "missing_file", "import", "nccl_timeout", "worker_died", "too_difficult", "sigkill")
OOM_KINDS = ("gpu", "rollout", "host", "rollout_kv_cache", "rollout_free_memory")


def select(cfg: DictConfig, key: str) -> Any:
    """OmegaConf.select that tolerates missing keys and unresolvable interpolations (like verl's .get chains)."""
    try:
        return OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
    except Exception:
        return None


def truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _offload(cfg: DictConfig) -> bool:
    return truthy(select(cfg, "actor_rollout_ref.actor.fsdp_config.param_offload")) or truthy(
        select(cfg, "actor_rollout_ref.actor.megatron.param_offload")
    )


def _recompute(cfg: DictConfig) -> bool:
    granularity = select(cfg, "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity")
    return truthy(select(cfg, "actor_rollout_ref.model.enable_activation_offload")) or str(granularity) == "full"


def _optimizer_offload(cfg: DictConfig) -> bool:
    return truthy(select(cfg, "actor_rollout_ref.actor.fsdp_config.optimizer_offload")) or truthy(
        select(cfg, "actor_rollout_ref.actor.megatron.optimizer_offload")
    )


# The project's memory features, as the composed config shows them (verl.md §5.1).
FEATURES: dict[str, Callable[[DictConfig], bool]] = {
    "offload": _offload,
    "optimizer_offload": _optimizer_offload,
    "recompute": _recompute,
    "enforce_eager": lambda cfg: truthy(select(cfg, "actor_rollout_ref.rollout.enforce_eager")),
}

_PREDICATE = re.compile(r"^(?P<key>[\w.@-]+)\s*(?P<op><=|>=|=)\s*(?P<value>.+)$")


def holds(cfg: DictConfig, predicate: str) -> bool:
    """True when one ``oom_unless`` predicate holds for the composed config."""
    text = predicate.strip()
    if text.startswith("!"):
        return not holds(cfg, text[1:])
    if text in FEATURES:
        return FEATURES[text](cfg)
    match = _PREDICATE.match(text)
    if not match:
        raise ValueError(f"{CONTROL_FILE}: unknown oom_unless predicate {predicate!r}")
    actual = select(cfg, match["key"])
    if match["op"] == "=":
        return str(actual).strip().lower() == match["value"].strip().lower()
    try:
        number = float(actual)
    except (TypeError, ValueError):
        return False
    limit = float(match["value"])
    return number <= limit if match["op"] == "<=" else number >= limit


@dataclass(frozen=True)
class Control:
    oom_at_step: int | None = None
    oom_kind: str = "gpu"
    oom_unless: list[str] = field(default_factory=list)
    gpu_memory_utilization_max: float = 0.45
    gpu_memory_utilization_min: float = 0.0
    fail: str | None = None
    fail_at_step: int = 1
    hang: bool = False
    step_seconds: float | None = None
    # A step with CPU offload takes this many times as long (the H200: Adam on the CPU made update_actor ~3x slower).
    offload_slowdown: float = 1.0
    startup_seconds: float = 0.0
    skip_tracker: bool = False
    # From this step's metrics line on, tqdm's redraw before it gets no newline, so the line is glued onto the bar
    # (``…2.50it/s](TaskRunner pid=N) step:7 - …``, as a terminal-less tqdm under Ray printed it: issue 26).
    glue_tqdm_from_step: int | None = None
    # Printed by the TaskRunner right after its hostname line, as given (a test's crafted or hostile lines).
    echo_lines: list[str] = field(default_factory=list)
    train_samples: int = 17398
    val_samples: int = 30

    def __post_init__(self) -> None:
        if self.oom_kind not in OOM_KINDS:
            raise ValueError(f"{CONTROL_FILE}: oom_kind must be one of {OOM_KINDS}, got {self.oom_kind!r}")
        if self.fail is not None and self.fail not in FAILURES:
            raise ValueError(f"{CONTROL_FILE}: fail must be one of {FAILURES} or null, got {self.fail!r}")

    @property
    def seconds_per_step(self) -> float:
        if self.step_seconds is not None:
            return float(self.step_seconds)
        return float(os.environ.get("STANDIN_STEP_SECONDS", "0.2"))

    def oom_fires(self, cfg: DictConfig, step: int) -> bool:
        """Whether the injected OOM hits at ``step`` (0 = start-up) for this composed config."""
        if self.oom_at_step is None or step < self.oom_at_step:
            return False
        # Every predicate must hold; an empty list protects nothing (but see "rollout" below).
        features = all(holds(cfg, p) for p in self.oom_unless)
        if self.oom_kind in ("rollout_kv_cache", "rollout_free_memory"):
            try:
                share = float(select(cfg, "actor_rollout_ref.rollout.gpu_memory_utilization"))
            except (TypeError, ValueError):
                return True
            if self.oom_kind == "rollout_kv_cache":
                return share < self.gpu_memory_utilization_min
            return share > self.gpu_memory_utilization_max
        if self.oom_kind == "rollout":
            utilization = select(cfg, "actor_rollout_ref.rollout.gpu_memory_utilization")
            try:
                low_enough = float(utilization) <= self.gpu_memory_utilization_max
            except (TypeError, ValueError):
                low_enough = False
            return not (features and low_enough)
        return not (self.oom_unless and features)


def control_path(tree_root: Path) -> Path:
    override = os.environ.get("STANDIN_CONTROL")
    return Path(override) if override else tree_root / CONTROL_FILE


def load(tree_root: Path) -> Control:
    """Read the control file; unknown keys are an error so a misspelt test setting cannot pass silently."""
    path = control_path(tree_root)
    if not path.is_file():
        return Control()
    data = json.loads(path.read_text(encoding="utf-8") or "{}")
    known = {f.name for f in fields(Control)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; known: {sorted(known)}")
    return Control(**data)
