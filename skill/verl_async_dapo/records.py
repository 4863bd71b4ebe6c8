"""Typed records the services return and the faces only render (pure: pydantic, no I/O).

The MCP face validates them into its wire models (server/models.py, whose field descriptions make the tool schema);
the CLI prints ``model_dump()`` or renders it as text. The field order is the order of the JSON the CLI prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from verl_async_dapo.answers import FeaturesAnswer
from verl_async_dapo.features import Feature, FeatureSet
from verl_async_dapo.policy import AttemptConfig, MemoryTweaks, Outcome


@dataclass(frozen=True)
class JobHandle:
    """A detached job inside a target; everything needed to find it again after a restart (stored on its attempt:
    the store serialises it, ``AttemptRow.handle`` reads it back)."""

    target: str  # container name, or "host"
    job_dir: str  # holds pgid, rc, started
    log_path: str
    exec_id: str | None = None  # docker exec id while the daemon remembers it


class AttemptConfigRecord(BaseModel):
    """An attempt's configuration as stored on it (``AttemptRow.config``): the feature set and memory tweaks that
    recovery changes (``attempt_config()`` / ``of()`` convert to and from policy.AttemptConfig), the features in
    force, and the plan's value sources and notes. The store serialises the fields that were set, so the stored JSON
    keeps its shape; keys this record does not name are kept as they are."""

    model_config = ConfigDict(extra="allow")

    explicit_enabled: list[str] = []
    explicit_disabled: list[str] = []
    oom_appended: list[str] = []  # in the order the OOM ladder appended them
    effective: list[str] = []  # as computed when the attempt was recorded
    tweaks: dict[str, Any] = {}  # policy.MemoryTweaks.describe()
    override_sources: dict[str, str] = {}  # Hydra key → recipe / feature / oom_ladder / user
    plan_notes: list[str] = []

    @classmethod
    def of(cls, config: AttemptConfig, *, override_sources: dict[str, str] | None = None,
           plan_notes: list[str] | None = None) -> AttemptConfigRecord:  # fmt: skip
        explicit = config.features.explicit
        plan: dict[str, Any] = {}  # set only when given: an attempt whose plan failed records none (the stored shape)
        if override_sources is not None:
            plan["override_sources"] = override_sources
        if plan_notes is not None:
            plan["plan_notes"] = plan_notes
        return cls(
            explicit_enabled=sorted(f.value for f in explicit.enabled),
            explicit_disabled=sorted(f.value for f in explicit.disabled),
            oom_appended=[f.value for f in config.features.oom_appended],
            effective=[f.value for f in config.features.effective],
            tweaks=config.tweaks.describe(),
            **plan,
        )

    def attempt_config(self) -> AttemptConfig:
        """The config recovery works on; tweaks missing from an old row take their defaults."""
        explicit = FeaturesAnswer(enabled=tuple(self.explicit_enabled), disabled=tuple(self.explicit_disabled)).choice()
        tweaks = self.tweaks
        return AttemptConfig(
            features=FeatureSet(explicit=explicit, oom_appended=tuple(Feature(n) for n in self.oom_appended)),
            tweaks=MemoryTweaks(
                rollout_gpu_memory_utilization=tweaks.get("rollout_gpu_memory_utilization"),
                rollout_enforce_eager=bool(tweaks.get("rollout_enforce_eager", False)),
                token_budget_scale=float(tweaks.get("token_budget_scale", 1.0)),
                rollout_util_floor=tweaks.get("rollout_util_floor"),
                rollout_util_ceiling=tweaks.get("rollout_util_ceiling"),
                rollout_max_num_seqs=tweaks.get("rollout_max_num_seqs"),
            ),
        )


class AttemptErrors(BaseModel):
    """One attempt in check_errors: how it was launched, what ended it, what the supervisor did about it."""

    attempt: int
    status: str
    exit_code: int | None
    features: list[str]
    override_diff: list[str]  # what changed from the previous attempt
    overrides: list[str]
    override_sources: dict[str, str]
    plan_notes: list[str]
    reason_started: str | None
    category: str | None  # None: the attempt recorded no error
    kind: str | None
    excerpt: str | None  # scrubbed by the service; a face may fence or shorten it
    explanation: str | None
    fix: str | None
    supervisor_action: str | None
    changes_next_attempt: list[str]
    resume_check: str | None
    # Steps this attempt trained past the checkpoint the next one resumed from (trained again), and a save_freq
    # that would bound that when checkpoints are cheap (issue 31).
    lost_steps: int | None
    save_freq_advice: str | None
    # What the memory features this attempt added cost, against the attempt before (logs.pace.feature_cost).
    feature_cost: str | None


class LiveFinding(BaseModel):
    """A non-fatal finding in the current attempt's log (training goes on): never an attempt's error."""

    attempt: int
    category: str
    kind: str
    count: int
    message: str | None  # scrubbed
    explanation: str
    fix: str


class ErrorReport(BaseModel):
    """check_errors: a run's attempts with their errors, how it ended, its latest stall."""

    run_id: str
    status: str
    attempts: list[AttemptErrors]
    final_reason: str | None  # scrubbed
    suggestions: list[str]
    stall: dict[str, Any] | None  # watchman.view.stall_state
    warnings: list[LiveFinding] = []  # read from the live log by check_errors_live only


class AttemptError(BaseModel):
    """What ended an attempt, stored on it: the classifier's primary finding (attempt_log.attempt_error), or one the
    supervisor or the watchman words itself (kind plan_error, prelaunch_validation, launch_failed, target_gone,
    no_exit_code, no_progress). The store serialises the fields that were set, so the stored JSON keeps its shape;
    keys this record does not name (e.g. ``gpu_used_share``) are kept as they are."""

    model_config = ConfigDict(extra="allow")

    category: str  # categories.ErrorCategory value
    kind: str | None = None
    line: int | None = None  # 1-based, in the cleaned log text; None when the error is not from the log
    excerpt: str | None = None  # scrubbed
    phase: str | None = None  # the verl/Ray method it happened in, when the log names it


class SupervisorDecision(BaseModel):
    """What the supervisor decided once an attempt ended, stored on the attempt (the store serialises it: the fields
    that were set, so a decision read back and re-stored keeps its shape)."""

    relaunch: bool | None = None  # None: no decision was taken (a stopped attempt whose run the user resumed)
    outcome: Outcome | None = None  # None: no decision, or one stored before outcomes were (read: relaunch above)
    reason: str | None = None
    changes: list[str] = []  # what the next attempt changes (features, OOM ladder rungs)
    suggestions: list[str] = []  # for the user, when it gave up
    checkpoint: dict[str, Any] | None = None  # resume_check.CheckpointState.to_dict(): where the next one resumes
    pace: dict[str, Any] | None = None  # logs.pace.pace_of: the ended attempt's steady pace, to price the next one's


class StartupPhase(BaseModel):
    """One phase of an attempt's start-up and the seconds spent in it (the open one: so far)."""

    phase: str
    seconds: float


class ProgressReport(BaseModel):
    """get_progress: the run's status and its current attempt's progress snapshot (the supervisor's, or the log
    tail's when that is stale). Numbers stay as the snapshot has them (an int ETA is not made a float)."""

    run_id: str
    status: str  # the run's, or "finishing" while an ended attempt's outcome is being recorded
    attempt: int  # 0 before the first launch
    stalled: bool
    stalled_for_seconds: float | None
    step: int | None
    total_steps: int | None
    percent: float | None
    eta_seconds: float | int | None
    eta_basis: str | None
    seconds_per_step: float | int | None
    phase: str | None
    phase_seconds: float | None
    # Where the current attempt's start-up went, phase by phase (Ray, model load, rollout engine, warm-up, …), from
    # the times verl's markers arrived; empty when the supervisor did not follow it live.
    startup: list[StartupPhase]
    startup_seconds: float | None
    lost_steps: int  # steps trained again after crashes, in all (each relaunch resumes from the last checkpoint)
    feature_cost: str | None  # what the memory features of the current attempt cost (logs.pace.feature_cost)
    features: list[str]
    metrics: dict[str, Any]
    metrics_step: int | None
    resumed_from_step: int | None
    resume_check: str | None
    swanlab_url: str | None
    parsing_cut_short: bool  # reading the log ran out of its time budget (its end was still read)
    as_of: str | None  # ISO 8601, UTC
    final_reason: str | None
    suggestions: list[str]
