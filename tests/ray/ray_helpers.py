"""Helpers for tests/ray: a cluster's tool config, the stand-in tree and argv, the cluster's job list, starting
runs through the CLI and waiting on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness.standin_files import parquet_bytes, write_model
from harness.waiting import wait_until
from verl_async_dapo import runs
from verl_async_dapo.context import AppContext
from verl_async_dapo.status import ACTIVE_RUN_STATUSES
from verl_async_dapo.store import RunRow
from verl_async_dapo.targets.ray.api import JobInfo, RayJobsClient

FINAL = {"succeeded", "failed", "stopped"}
RUN_TIMEOUT_S = 150.0
CLI_OUTPUTS: list[str] = []  # stdout + stderr of every cli() call, for tests that scan them (e.g. for a secret)


def use_cluster(name: str, address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Isolated tool state under tmp_path whose ``ray_clusters.json`` names ``address`` ``ray:<name>``."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "ray_clusters.json").write_text(json.dumps({name: address}))
    monkeypatch.setenv("VERL_ASYNC_DAPO_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("VERL_ASYNC_DAPO_CONFIG_DIR", str(config))
    monkeypatch.delenv("VERL_ASYNC_DAPO_RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return f"ray:{name}"


def standin_tree(tree: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in tree as VERL_HOME on the cluster's (= this) machine: model, data, small settings, SwanLab off."""
    write_model(tree / "models" / "Qwen3-8B")
    (tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (tree / "data" / name).write_bytes(parquet_bytes())
    # VERL_VERSION: with --skip-preflight nothing detects the version in the target.
    settings = {"VERL_HOME": str(tree), "TRAIN_STEPS": "5", "SAVE_FREQ": "1", "TRAINER_GPUS": "1",
                "ROLLOUT_GPUS": "1", "ROLLOUT_TP": "1", "FRAMEWORK": "fsdp", "SWANLAB_MODE": "disabled",
                "VERL_VERSION": "0.9.1"}  # fmt: skip
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    return tree


def stop_active_runs() -> None:
    """Stop every run still active in this test's state, so a failing test leaves no Ray job running."""
    ctx = AppContext.from_environment()
    try:
        for row in ctx.store.runs(50):
            if row.status in ACTIVE_RUN_STATUSES:
                anyio.run(runs.stop_training, ctx, row.id)
    finally:
        ctx.close()


def standin_argv(tree: Path, steps: int, *extra: str) -> list[str]:
    """The stand-in DAPO entry as a job runs it: ``python3`` from the job's PATH (the venv: it has hydra)."""
    return [
        "python3", "-m", "recipe.dapo.main_dapo",
        "actor_rollout_ref.rollout.name=vllm", "data.train_batch_size=512",
        f"trainer.total_training_steps={steps}", "trainer.logger=[console]",
        f"trainer.default_local_dir={tree / 'ckpt'}", "trainer.save_freq=1", "trainer.val_before_train=False",
        *extra,
    ]  # fmt: skip


def control(tree: Path, **settings: Any) -> None:
    """The stand-in's failure injection (schema: tests/standin/entry/standin_control.py)."""
    (tree / "standin_control.json").write_text(json.dumps(settings), "utf-8")


def jobs_under(address: str, prefix: str) -> list[JobInfo]:
    """Our attempt jobs on the cluster whose job_dir starts with ``prefix`` (e.g. a run's directory)."""
    return [
        j for j in RayJobsClient(address).jobs()
        if j.metadata.get("verl-async-dapo") == "attempt" and j.metadata.get("job_dir", "").startswith(prefix)
    ]  # fmt: skip


def probe_jobs(address: str) -> list[JobInfo]:
    return [j for j in RayJobsClient(address).jobs() if j.metadata.get("verl-async-dapo") == "probe"]


def cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``verl-async-dapo ARGS`` in a fresh process with this test's (monkeypatched) environment."""
    done = subprocess.run(
        [sys.executable, "-m", "verl_async_dapo", *args], env=dict(os.environ), capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    CLI_OUTPUTS.append(done.stdout + done.stderr)
    return done


def start(ray_target: str, *extra: str) -> str:
    """``start --skip-preflight`` through the CLI; the new run's id."""
    done = cli("start", "--container", ray_target, "--skip-preflight", "--swanlab-mode", "disabled", "--json", *extra)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["run_id"])


def run_dir(tree: Path, run_id: str) -> str:
    """Where a run's attempts live in the target (job dirs, mirrored logs)."""
    return f"{tree}/.verl-async-dapo/runs/{run_id}"


def wait_final(run_id: str) -> str:
    """The run's final status; the test fails with describe() when it does not end in time."""
    try:
        wait_until(lambda: run_row(run_id).status in FINAL, f"run {run_id} to end", RUN_TIMEOUT_S, interval=0.3)
    except AssertionError:
        pytest.fail(describe(run_id))
    return run_row(run_id).status


def run_row(run_id: str) -> RunRow:
    ctx = AppContext.from_environment()
    try:
        row = ctx.store.run(run_id)
        assert row is not None
        return row
    finally:
        ctx.close()


def attempts(run_id: str) -> list[Any]:
    ctx = AppContext.from_environment()
    try:
        return ctx.store.attempts(run_id)
    finally:
        ctx.close()


def describe(run_id: str) -> str:
    """Everything useful when a run test fails: the run, its attempts and the supervisor's log."""
    ctx = AppContext.from_environment()
    try:
        row = ctx.store.run(run_id)
        lines = [f"run: {row.status if row else None} {row.final_reason if row else ''}"]
        for a in ctx.store.attempts(run_id):
            lines.append(f"attempt {a.n}: {a.status} exit={a.exit_code} error={a.error} reason={a.reason}")
        log = ctx.run_dir(run_id) / "supervisor.log"
        out = ctx.run_dir(run_id) / "supervisor.out"
        for path in (log, out):
            if path.exists():
                lines.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(lines)
    finally:
        ctx.close()
