"""When is a run stalled? (pure: times come in as arguments)

A run is *stalled* when its log has not grown — so no new step line either — for
``max(K × median step time, M)``. K (``VAD_STALL_FACTOR``, default 5) absorbs the slow steps every run has
(validation, checkpoint saves); M (``VAD_STALL_MIN_SECONDS``, default 1200 = 20 min) is the floor and the
window until two steps were seen. Before the first step line the window is at least ``VAD_STALL_STARTUP_SECONDS``
(default 1800 = 30 min): model loading, Ray and the rollout engine's start-up print little for minutes. The
median is over the wall-clock gaps between the step lines this supervisor saw. ``VAD_STALL_RELAUNCH=1`` opts in to stopping a
stalled attempt and relaunching it from the last checkpoint (it uses the run's one relaunch budget).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from verl_async_dapo.categories import CATEGORY_INFO, ErrorCategory
from verl_async_dapo.exceptions import StallConfigError
from verl_async_dapo.policy import AttemptConfig, Decision, Outcome

DEFAULT_FACTOR = 5.0
DEFAULT_MIN_SECONDS = 1200.0
DEFAULT_STARTUP_SECONDS = 1800.0
RECENT_GAPS = 50


@dataclass(frozen=True)
class StallSettings:
    factor: float = DEFAULT_FACTOR
    min_seconds: float = DEFAULT_MIN_SECONDS
    relaunch: bool = False
    startup_seconds: float = DEFAULT_STARTUP_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StallSettings:
        def number(name: str, default: float, floor: float) -> float:
            text = env.get(name, "").strip()
            if not text:
                return default
            try:
                value = float(text)
            except ValueError:
                raise StallConfigError(f"{name} must be a number, not {text[:20]!r}") from None
            if value < floor:
                raise StallConfigError(f"{name} must be at least {floor:g}, not {value:g}")
            return value

        relaunch = env.get("VAD_STALL_RELAUNCH", "").strip().lower() in ("1", "true", "yes")
        return cls(number("VAD_STALL_FACTOR", DEFAULT_FACTOR, 1.0), number("VAD_STALL_MIN_SECONDS",
                   DEFAULT_MIN_SECONDS, 1.0), relaunch,
                   number("VAD_STALL_STARTUP_SECONDS", DEFAULT_STARTUP_SECONDS, 1.0))  # fmt: skip


@dataclass
class StallTracker:
    """Fed by the supervisor as the log streams in (monotonic seconds)."""

    settings: StallSettings
    started_at: float
    last_output_at: float = 0.0
    last_step: int | None = None
    last_step_at: float | None = None
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_GAPS))
    flagged_at: float | None = None  # when this silence was reported (None = not stalled)

    def __post_init__(self) -> None:
        self.last_output_at = self.last_output_at or self.started_at

    def output(self, now: float, step: int | None) -> bool:
        """Log bytes arrived (with the parser's current step). True if this ends a reported stall."""
        self.last_output_at = now
        if step is not None and step != self.last_step:
            if self.last_step is not None and self.last_step_at is not None and step > self.last_step:
                self.gaps.append((now - self.last_step_at) / (step - self.last_step))
            self.last_step, self.last_step_at = step, now
        cleared = self.flagged_at is not None
        self.flagged_at = None
        return cleared

    def queued(self, now: float) -> None:
        """The job is waiting in a batch scheduler's queue: that silence is a phase, not a hang (its clock restarts)."""
        self.last_output_at = now
        self.flagged_at = None

    def median_step_seconds(self) -> float | None:
        return statistics.median(self.gaps) if self.gaps else None

    def window(self) -> float:
        if self.last_step is None:  # still starting up
            return max(self.settings.min_seconds, self.settings.startup_seconds)
        median = self.median_step_seconds()
        return max(self.settings.factor * median, self.settings.min_seconds) if median else self.settings.min_seconds

    def silent_for(self, now: float) -> float:
        return max(0.0, now - self.last_output_at)

    def newly_stalled(self, now: float) -> bool:
        """True once per silence, when it first exceeds the window."""
        if self.flagged_at is not None or self.silent_for(now) < self.window():
            return False
        self.flagged_at = now
        return True


def stall_decision(current: AttemptConfig, *, relaunches_so_far: int, max_retries: int, relaunch: bool) -> Decision:
    """After a stalled attempt was stopped: relaunch it unchanged (resuming from the last checkpoint) when the user
    opted in and the run's one relaunch budget (shared with OOM recovery) allows; otherwise fail with the fix."""
    tips = (CATEGORY_INFO[ErrorCategory.STALLED].fix,)
    if not relaunch:
        return Decision(Outcome.GIVE_UP, "stalled: no progress for the stall window; the attempt was left as it is",
                        suggestions=tips)  # fmt: skip
    if relaunches_so_far >= max_retries:
        return Decision(Outcome.BUDGET_EXHAUSTED, f"stalled again after {relaunches_so_far} relaunch(es); "
                        f"MAX_OOM_RETRIES={max_retries} (the run's one relaunch budget) reached",
                        suggestions=tips)  # fmt: skip
    return Decision(Outcome.RELAUNCH, "stalled: relaunching from the last checkpoint", current,
                    ("same settings (after a stall)",))
