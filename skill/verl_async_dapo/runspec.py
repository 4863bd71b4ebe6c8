"""What a run is frozen to when training starts, and how attempt configs are stored.

The run spec is written once (answers + parameters + detected verl version) and never
changes; every attempt derives its launch plan from it plus its own feature set and memory
tweaks. Secrets appear only as references into the secret store.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from verl_async_dapo.answers import FeaturesAnswer, ProxyAnswer, SwanlabAnswer
from verl_async_dapo.features import Feature, FeatureSet
from verl_async_dapo.policy import AttemptConfig, MemoryTweaks
from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.status import AttemptStatus


class RunSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    target: str
    target_kind: str
    settings: dict[str, Any]  # TrainingSettings by field name
    verl_version: str
    features: FeaturesAnswer
    proxy: ProxyAnswer
    swanlab: SwanlabAnswer | None
    run_dir: str  # inside the target: per-attempt logs and job files
    experiment_name: str

    def training_settings(self) -> TrainingSettings:
        return TrainingSettings.model_validate(self.settings)

    def stable_log_path(self) -> str:
        """The original skill's log path, which users tail: {VERL_HOME}/train.log."""
        return f"{self.training_settings().verl_home}/train.log"

    def attempt_dir(self, n: int) -> str:
        return f"{self.run_dir}/attempt-{n}"

    def attempt_log(self, n: int) -> str:
        return f"{self.attempt_dir(n)}/train.log"

    def first_attempt_config(self) -> AttemptConfig:
        return AttemptConfig(features=FeatureSet(explicit=self.features.choice()))


def attempt_config_to_dict(config: AttemptConfig) -> dict[str, Any]:
    explicit = config.features.explicit
    return {
        "explicit_enabled": sorted(f.value for f in explicit.enabled),
        "explicit_disabled": sorted(f.value for f in explicit.disabled),
        "oom_appended": [f.value for f in config.features.oom_appended],
        "effective": [f.value for f in config.features.effective],
        "tweaks": config.tweaks.describe(),
    }


def attempt_config_from_dict(data: dict[str, Any]) -> AttemptConfig:
    features = FeaturesAnswer(enabled=tuple(data["explicit_enabled"]), disabled=tuple(data["explicit_disabled"]))
    feature_set = FeatureSet(
        explicit=features.choice(), oom_appended=tuple(Feature(name) for name in data["oom_appended"])
    )
    tweaks = data.get("tweaks", {})
    return AttemptConfig(
        features=feature_set,
        tweaks=MemoryTweaks(
            rollout_gpu_memory_utilization=tweaks.get("rollout_gpu_memory_utilization"),
            rollout_enforce_eager=bool(tweaks.get("rollout_enforce_eager", False)),
            token_budget_scale=float(tweaks.get("token_budget_scale", 1.0)),
            rollout_util_floor=tweaks.get("rollout_util_floor"),
            rollout_util_ceiling=tweaks.get("rollout_util_ceiling"),
            rollout_max_num_seqs=tweaks.get("rollout_max_num_seqs"),
        ),
    )


# An attempt started by resume_run carries this reason; the OOM retry budget counts from it.
RESUMED_REASON = "resumed on request"


def relaunches_before(attempts: Sequence[Any], n: int) -> int:
    """Relaunches after failures before attempt ``n``, counted from the latest resume (a resumed run gets the
    whole MAX_OOM_RETRIES budget again); an attempt abandoned by a killed supervisor never ran and costs none."""
    first = max((a.n for a in attempts if a.n <= n and a.reason.startswith(RESUMED_REASON)), default=1)
    return sum(first <= a.n < n and a.status != AttemptStatus.ABANDONED for a in attempts)


def resume_pending(last: Any, events: Iterable[Any]) -> bool:
    """A ``run_resumed`` event after the last attempt ended: the run continues with a new attempt."""
    if last.status in (AttemptStatus.LAUNCHING, AttemptStatus.RUNNING, AttemptStatus.ABANDONED):
        return False
    since = last.ended_at or last.started_at
    return any(e.kind == "run_resumed" and e.ts >= since for e in events)
