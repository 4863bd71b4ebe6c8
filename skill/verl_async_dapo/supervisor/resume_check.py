"""Resume is verified, not assumed (issue #14, item 6).

verl resumes (``trainer.resume_mode=auto``) from ``latest_checkpointed_iteration.txt`` in the checkpoint root:
``RayPPOTrainer._load_checkpoint`` reads it through ``find_latest_ckpt_path`` and prints ``Load from checkpoint
folder: …/global_step_N`` / ``Setting global step to N``, or ``Training from scratch`` when there is none. Its
``_save_checkpoint`` writes ``global_step_N/actor`` then ``data.pt`` and only then the tracker, and skips the
tracker entirely with ``actor.checkpoint.async_save=True`` (verl #7952: "skip write
latest_checkpointed_iteration.txt when async_save is True"), so an FSDP run with async saves relaunches from
step 0 although its steps were saved.

Before a relaunch ``inspect`` says what the next attempt should resume from (and what is wrong with the
tracker); while it runs ``verify`` compares that with what verl printed. A mismatch is said in words
("resumed from 0: 4 steps lost"), in get_progress and check_errors, never silently.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.policy import save_freq_advice
from verl_async_dapo.targets.base import Target

TRACKER = "latest_checkpointed_iteration.txt"
# Checkpoint dirs probed before a relaunch: the save_freq multiples up to the last step seen (bounded).
MAX_PROBED_STEPS = 200


@dataclass(frozen=True)
class CheckpointState:
    """What the checkpoint root holds before a relaunch."""

    tracker_step: int | None  # the step the tracker names (None: no tracker, or not a number)
    complete: bool  # global_step_<tracker_step> has actor/ and data.pt
    saved_steps: tuple[int, ...]  # complete global_step_N dirs found among the probed ones
    note: str | None = None  # what is wrong, in words
    last_step: int | None = None  # the last step the attempt trained (its log's), when known

    @property
    def lost_steps(self) -> int:
        """Steps the attempt trained after the checkpoint the relaunch resumes from: trained again (issue 31)."""
        return max(0, self.last_step - self.expected_step) if self.last_step is not None else 0

    @property
    def expected_step(self) -> int:
        """Where verl will resume: the tracker's step when it is complete, else from scratch (0)."""
        return self.tracker_step if self.tracker_step is not None and self.complete else 0

    @property
    def newest_saved(self) -> int:
        return max((*self.saved_steps, self.expected_step))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "saved_steps": list(self.saved_steps), "expected_step": self.expected_step,
                "lost_steps": self.lost_steps}  # fmt: skip


async def inspect(target: Target, ckpt_dir: str, *, save_freq: int, last_step: int | None) -> CheckpointState:
    """The tracker and the global_step_N dirs it (and save_freq) imply; a read error counts as "absent"."""
    tracker_path = f"{ckpt_dir}/{TRACKER}"
    try:
        text = (await target.read_tail(tracker_path, 64)).decode(errors="replace").strip()
        tracker: int | None = int(text) if text.isdigit() else None
        tracker_text: str | None = text
    except TargetError:
        tracker, tracker_text = None, None
    steps = set(range(save_freq, (last_step or 0) + 1, save_freq)[-MAX_PROBED_STEPS:]) if save_freq > 0 else set()
    if tracker is not None:
        steps.add(tracker)
    paths = [
        p for n in sorted(steps) for p in (f"{ckpt_dir}/global_step_{n}/actor", f"{ckpt_dir}/global_step_{n}/data.pt")
    ]
    try:
        exists = await target.paths_exist(paths) if paths else {}
    except TargetError:
        exists = {}
    saved = tuple(
        n
        for n in sorted(steps)
        if all(exists.get(f"{ckpt_dir}/global_step_{n}/{leaf}") for leaf in ("actor", "data.pt"))
    )
    complete = tracker is not None and tracker in saved
    note: str | None = None
    if tracker is None and saved:
        why = "is missing" if tracker_text is None else f"holds {tracker_text[:20]!r}, not a step"
        note = (f"the checkpoint tracker {tracker_path} {why} although global_step_{max(saved)} is saved "
                "(verl #7952: actor.checkpoint.async_save=True under FSDP never writes it): the relaunch starts "
                f"from scratch, {max(saved)} steps lost")  # fmt: skip
    elif tracker is not None and not complete:
        note = (f"the checkpoint tracker names global_step_{tracker}, which is not complete (no actor/ or data.pt): "
                "verl cannot resume from it")  # fmt: skip
    return CheckpointState(tracker, complete, saved, note, last_step)


def lost_work(ckpt: CheckpointState, attempt_n: int, *, save_freq: int, total_steps: int,
              progress: dict[str, Any]) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """The words and data of a ``steps_lost`` event: what attempt ``attempt_n`` trained past the checkpoint the
    relaunch resumes from, and a save_freq that would bound it when checkpoints are cheap (policy.save_freq_advice)."""
    lost, resume = ckpt.lost_steps, ckpt.expected_step
    advice = save_freq_advice(total_steps=total_steps, save_freq=save_freq, lost_steps=lost,
                              seconds_per_step=progress.get("seconds_per_step"),
                              save_seconds=progress.get("save_checkpoint_seconds"))  # fmt: skip
    message = (f"attempt {attempt_n} trained to step {ckpt.last_step}; the relaunch resumes from "
               f"{f'step {resume}' if resume else 'scratch'}: {lost} step{'s' if lost != 1 else ''} trained again")
    return message, {"attempt": attempt_n, "lost_steps": lost, "last_step": ckpt.last_step, "resume_step": resume,
                     "save_freq": save_freq, "advice": advice}  # fmt: skip


@dataclass(frozen=True)
class ResumeVerdict:
    """How a relaunch resumed against what was saved: ``lost_steps`` (0: as expected) is what a caller decides
    on, ``message`` is what it shows."""

    message: str
    lost_steps: int = 0


def verify(expected: dict[str, Any] | None, progress: dict[str, Any]) -> ResumeVerdict | None:
    """What the new attempt's log says about its resume, against ``expected`` (CheckpointState.to_dict of the
    attempt before). None while verl has not said yet, or when there is nothing to compare with."""
    if not expected:
        return None
    resumed = progress.get("resumed_from_step")
    if resumed is None and not progress.get("training_from_scratch"):
        return None
    actual = int(resumed or 0)
    newest = max([*expected.get("saved_steps", []), int(expected.get("expected_step") or 0)])
    if actual >= newest:
        return ResumeVerdict(f"resumed from step {actual} as expected") if actual else None
    lost = newest - actual
    return ResumeVerdict(f"resumed from {actual}: {lost} step{'s' if lost != 1 else ''} lost "
                         f"(global_step_{newest} was saved)", lost)  # fmt: skip
