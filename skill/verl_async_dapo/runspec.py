"""What a run is frozen to when training starts, and how attempts count against the relaunch budget.

The run spec is written once (answers + parameters + detected verl version) and never
changes; every attempt derives its launch plan from it plus its own feature set and memory
tweaks. Secrets appear only as references into the secret store.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from verl_async_dapo.answers import FeaturesAnswer, ProxyAnswer, SwanlabAnswer
from verl_async_dapo.features import FeatureSet
from verl_async_dapo.policy import AttemptConfig
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
