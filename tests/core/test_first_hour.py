"""Issue 28 (a new user's first hour), items 5 and 6 at the service level: no futile resume, advice after an
exhausted OOM ladder that does not lead with what is applied, a vanished target said as target_gone, a placeholder
SwanLab key named as one, a missing container answered with the targets that exist and how to make it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from harness.records import run_spec
from verl_async_dapo import policy, runs
from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.context import AppContext
from verl_async_dapo.errors import user_facing_error
from verl_async_dapo.exceptions import SwanlabConfigError, UserInputError
from verl_async_dapo.features import Feature, FeatureSet
from verl_async_dapo.policy import AttemptConfig, MemoryTweaks
from verl_async_dapo.records import AttemptConfigRecord
from verl_async_dapo.supervisor import run_lock
from verl_async_dapo.swanlab.values import check_key_text
from verl_async_dapo.wording import Face


@pytest.fixture
def ctx(tmp_path: Path) -> AppContext:
    return AppContext(home=tmp_path / "state", config_home=tmp_path / "config", env={})


@contextlib.contextmanager
def _supervised(ctx: AppContext, run_id: str) -> Iterator[None]:
    """Hold the run's lock as its supervisor would: resume's spawn then starts nothing for these specless runs."""
    lock = run_lock.try_lock(run_lock.lock_path(ctx, run_id))
    assert lock is not None
    try:
        yield
    finally:
        lock.close()


def _failed_run(ctx: AppContext, category: str, kind: str) -> str:
    run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
    ctx.store.end_attempt(run_id, 1, "failed", exit_code=1,
                          error={"category": category, "kind": kind, "line": 3, "excerpt": "x"})  # fmt: skip
    ctx.store.end_run(run_id, "failed", final_reason=f"{category}: …")
    return run_id


@pytest.mark.parametrize(("category", "kind", "mcp_change", "cli_change"), [
    ("tracking", "swanlab_auth", "configure_swanlab", "SWANLAB_API_KEY"),
    ("missing_file", "file_not_found", "start_training with the right model_path", "MODEL_PATH"),
    ("config_error", "hydra_override", "plan_training", "`verl-async-dapo plan`"),
])  # fmt: skip
def test_a_resume_that_would_fail_the_same_way_is_refused_with_what_to_change(
    ctx: AppContext, category: str, kind: str, mcp_change: str, cli_change: str
) -> None:
    run_id = _failed_run(ctx, category, kind)
    with _supervised(ctx, run_id), pytest.raises(UserInputError) as refused:
        runs.resume_run(ctx, run_id)
    mcp, cli = user_facing_error(refused.value), user_facing_error(refused.value, Face.CLI)
    assert mcp is not None and cli is not None
    assert f"failed as {category}" in mcp and mcp_change in mcp and "resume_training with force=true" in mcp, mcp
    assert cli_change in cli and f"`verl-async-dapo resume {'RUN_ID'} --force`" in cli, cli
    assert ctx.store.run(run_id).status == "failed"  # nothing reopened
    with _supervised(ctx, run_id):  # force: the user fixed the cause outside the run's answers
        resumed = runs.resume_run(ctx, run_id, force=True)
    assert resumed["attempt"] == 2 and ctx.store.run(run_id).status == "starting"


def test_an_oom_resume_is_not_refused(ctx: AppContext) -> None:
    run_id = _failed_run(ctx, "gpu_oom", "torch_cuda_oom")
    with _supervised(ctx, run_id):
        assert runs.resume_run(ctx, run_id)["attempt"] == 2


def test_after_an_exhausted_oom_ladder_the_advice_does_not_lead_with_the_applied_rungs() -> None:
    full = FeatureSet()
    for feature in policy.GPU_OOM_LADDER:
        full = full.with_appended(feature)
    exhausted = AttemptConfig(features=full, tweaks=MemoryTweaks(token_budget_scale=policy.TOKEN_BUDGET_FLOOR))
    decision = policy.decide(exhausted, ErrorCategory.GPU_OOM, relaunches_so_far=1, max_retries=5,
                             base_gpu_memory_utilization=0.6)  # fmt: skip
    assert not decision.relaunch and "already applied" in decision.reason
    first = decision.suggestions[0]
    assert "relaunch with offload" not in first and "all applied" in first, decision.suggestions
    assert all(f.value in first for f in policy.GPU_OOM_LADDER if f in (Feature.OFFLOAD,)), first
    fresh = policy.decide(replace(exhausted, features=FeatureSet()), ErrorCategory.GPU_OOM, relaunches_so_far=2,
                          max_retries=2, base_gpu_memory_utilization=0.6)  # fmt: skip
    assert fresh.suggestions[0].startswith("relaunch with offload")  # rungs left: that advice still stands


def test_a_vanished_target_is_target_gone_in_the_decision_and_in_check_errors(ctx: AppContext) -> None:
    decision = policy.decide(AttemptConfig(features=FeatureSet()), ErrorCategory.ENVIRONMENT, relaunches_so_far=0,
                             max_retries=2, base_gpu_memory_utilization=0.6, kind="target_gone")  # fmt: skip
    assert decision.reason.startswith("target_gone: ") and "flash-attn" not in repr(decision), decision
    run_id = _failed_run(ctx, "environment", "target_gone")  # what supervisor/watch.py records
    item = runs.check_errors(ctx, run_id).attempts[0]
    assert item.category == "target_gone" and item.kind == "target_gone"
    assert "removed or stopped" in (item.explanation or "") and "flash-attn" not in f"{item.explanation}{item.fix}"
    assert "resume" in (item.fix or "")


@pytest.mark.parametrize("key", ["...", "…", "<your-api-key>", "YOUR_API_KEY", "xxxxxxxx", "${SWANLAB_API_KEY}"])
def test_a_placeholder_key_is_named_as_one(key: str) -> None:
    with pytest.raises(SwanlabConfigError, match="SWANLAB_API_KEY looks like a placeholder"):
        check_key_text(key)
    assert check_key_text("k1") == "k1"  # short real-looking keys of the tests stay keys


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SWANLAB_", "VERL_", "DOCKER_HOST"))}
    clean.update({"VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"), "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "c"),
                  "DOCKER_HOST": "unix:///nonexistent/docker.sock", **env})  # fmt: skip
    return subprocess.run([sys.executable, "-m", "verl_async_dapo", *args], env=clean, capture_output=True,
                          text=True, timeout=180, check=False, stdin=subprocess.DEVNULL)  # fmt: skip


def test_the_readme_placeholder_key_is_named_in_the_preflight_report(tmp_path: Path) -> None:
    done = _cli(tmp_path, "preflight", "--container", "host", "--allow-no-gpus", SWANLAB_API_KEY="...",
                VERL_HOME=str(tmp_path / "none"))  # fmt: skip
    line = next(x for x in done.stdout.splitlines() if x.startswith("[error] swanlab: "))
    assert "SWANLAB_API_KEY looks like a placeholder" in line and line.endswith("or set SWANLAB_MODE=local / disabled")
    assert "[error] verl: VERL_HOME" in done.stdout  # the same report: every problem at once


def test_preflight_on_a_missing_container_names_the_targets_and_how_to_create_it(tmp_path: Path) -> None:
    done = _cli(tmp_path, "preflight", "--container", "jins")
    assert done.returncode == 1
    line = next(x for x in done.stdout.splitlines() if x.startswith("[error] target: "))
    assert "no container named 'jins' (Docker did not answer: " in line and "; existing targets: host" in line, line
    assert "docker run -d --name jins --gpus all" in line and "--container with one of them" in line, line


def test_the_quick_start_without_swanlab_lists_the_targets_problems_in_the_same_refusal(tmp_path: Path) -> None:
    """Issue 28, item 4: "SwanLab is not configured" came alone; the verl version and preflight came one run each."""
    done = _cli(tmp_path, "start", "--container", "host", "--allow-no-gpus", VERL_HOME=str(tmp_path / "none"),
                TRAINER_GPUS="1", ROLLOUT_GPUS="1", FRAMEWORK="fsdp")  # fmt: skip
    assert done.returncode == 1
    assert "SwanLab is not configured" in done.stderr and "[error] verl: VERL_HOME" in done.stderr, done.stderr
    assert "[error] MODEL_PATH: " in done.stderr, done.stderr

    placeholder = _cli(tmp_path, "start", "--container", "host", "--allow-no-gpus", VERL_HOME=str(tmp_path / "none"),
                       TRAINER_GPUS="1", ROLLOUT_GPUS="1", FRAMEWORK="fsdp", SWANLAB_API_KEY="...")  # fmt: skip
    assert "SWANLAB_API_KEY looks like a placeholder" in placeholder.stderr, placeholder.stderr
    assert "[error] verl: VERL_HOME" in placeholder.stderr, placeholder.stderr
