"""Typed records for tests that write store rows directly (the store takes records, not dicts), and what tests read
back from them."""

from __future__ import annotations

from verl_async_dapo.answers import FeaturesAnswer, ProxyAnswer
from verl_async_dapo.runspec import RunSpec
from verl_async_dapo.store import AttemptRow


def run_spec(target: str = "host", *, target_kind: str | None = None, **settings: object) -> RunSpec:
    """A run spec for a store row: no answers, the given run parameters (defaults otherwise), nothing on disk."""
    return RunSpec(target=target, target_kind=target_kind or ("host" if target == "host" else "docker"),
                   settings=dict(settings), verl_version="0.9.1", features=FeaturesAnswer(), proxy=ProxyAnswer(),
                   swanlab=None, run_dir=f"/nonexistent/verl-async-dapo-test/{target}", experiment_name="test")  # fmt: skip


def checkpoint_dir(attempt: AttemptRow) -> str:
    """The checkpoint root the attempt was launched with (``trainer.default_local_dir``)."""
    for item in attempt.overrides:
        if item.startswith("trainer.default_local_dir="):
            return item.split("=", 1)[1].strip("'\"")
    raise AssertionError(f"attempt {attempt.n} has no trainer.default_local_dir override: {attempt.overrides}")
