"""Helpers for tests/ray: the stand-in's argv and control file, the cluster's job list, waiting on runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from verl_async_dapo.app import AppContext
from verl_async_dapo.store import RunRow
from verl_async_dapo.targets.ray_api import JobInfo, RayJobsClient

FINAL = {"succeeded", "failed", "stopped"}


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
    return subprocess.run(
        [sys.executable, "-m", "verl_async_dapo", *args], env=dict(os.environ), capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


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


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


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
