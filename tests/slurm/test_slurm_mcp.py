"""The question flow over MCP (in-memory client) onto the SLURM target: list_containers offers ``slurm`` with its
partitions, the four questions are answered, start_training takes the slurm_* arguments, and the run trains on
the stand-in as real batch jobs: a GPU OOM at step 3 is recovered as a new job (offload) that resumes from the
step-2 checkpoint and trains to the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from mcp import Client
from verl_async_dapo.server import mcp

pytestmark = pytest.mark.usefixtures("time_limit_run")  # started first, checked by test_slurm_time_limit.py
RUN_TIMEOUT_S = 150.0


def _isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tree: Path) -> None:
    for name in list(os.environ):
        if name.upper().startswith(("SWANLAB_", "VAD_SLURM_")) or name.upper().endswith("_PROXY"):
            monkeypatch.delenv(name, raising=False)
    for name, value in {"VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"), "SWANLAB_MODE": "disabled",
                        "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "config"), "VERL_HOME": str(tree),
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                        "TRAIN_STEPS": "6", "SAVE_FREQ": "2", "TRAINER_GPUS": "1", "ROLLOUT_GPUS": "1",
                        "ROLLOUT_TP": "1", "FRAMEWORK": "fsdp"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)


async def _ok(client: Client, tool: str, args: dict[str, object] | None = None) -> dict[str, object]:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error and result.structured_content is not None, (tool, result.content)
    return result.structured_content


async def test_the_question_flow_starts_a_slurm_run_that_trains(slurm_partition: str, slurm_tree: Path,
                                                                tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    _isolate(monkeypatch, tmp_path, slurm_tree)
    (slurm_tree / "standin_control.json").write_text(json.dumps(
        {"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": 0.1}), "utf-8")  # fmt: skip
    run_id = None
    try:
        async with Client(mcp) as c:
            listing = await _ok(c, "list_containers")
            (entry,) = [t for t in listing["containers"] if t["name"] == "slurm"]  # type: ignore[union-attr]
            assert entry["kind"] == "slurm" and f"{slurm_partition} (default)" in entry["note"]
            assert "SLURM 集群" in str(listing["menu_zh"])
            await _ok(c, "select_container", {"name": "slurm"})
            await _ok(c, "set_proxy", {})
            ready = await _ok(c, "choose_features", {"names": ["default"]})
            assert ready["state"] == "ready"  # SwanLab preconfigured (disabled): question 4 is skipped
            started = await _ok(c, "start_training", {"slurm_partition": slurm_partition, "slurm_gpus_per_node": 0,
                                                      "slurm_time_limit": "10", "slurm_startup_seconds": 30,
                                                      "slurm_step_seconds": 5})  # fmt: skip
            run_id = started["run_id"]
            assert started["target"] == "slurm"
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while (progress := await _ok(c, "get_progress", {"run_id": run_id}))["status"] not in (
                    "succeeded", "failed", "stopped"):  # fmt: skip
                assert time.monotonic() < deadline, progress
                await anyio.sleep(0.5)
            assert progress["status"] == "succeeded", await c.call_tool("check_errors", {"run_id": run_id})
            assert (progress["attempt"], progress["resumed_from_step"], progress["step"]) == (2, 2, 6), progress
            first, second = (await _ok(c, "check_errors", {"run_id": run_id}))["attempts"]  # type: ignore[misc]
            assert (first["category"], first["changes_next_attempt"]) == ("gpu_oom", ["+offload"])
            assert second["reason_started"].endswith("resuming from step 2")
    finally:
        if run_id is not None:
            from verl_async_dapo import runs
            from verl_async_dapo.context import AppContext

            app = AppContext.from_environment()
            try:
                await runs.stop_training(app, str(run_id), wait_seconds=5)
                attempts = app.store.attempts(str(run_id))
            finally:
                app.close()
    jobs = [(a.job or {}).get("exec_id") for a in attempts]
    assert len(set(jobs)) == 2 and all(jobs)  # two batch jobs, as SLURM saw them, with the arguments' options:
    states = [subprocess.run(["squeue", "-h", "-j", str(job), "-t", "all", "-o", "%T|%P|%l"], capture_output=True,
                             text=True, timeout=30, check=False).stdout.strip() for job in jobs]  # fmt: skip
    assert states == [f"FAILED|{slurm_partition}|10:00", f"COMPLETED|{slurm_partition}|10:00"], states
    log1, log2 = (Path(a.job["log_path"]).read_text() for a in attempts if a.job)
    assert log1.startswith("[verl-async-dapo] queued: SLURM batch job")
    assert f"[verl-async-dapo] started: SLURM job {jobs[0]} on 1 node(s)" in log1 and "CUDA out of memory" in log1
    assert f"[verl-async-dapo] started: SLURM job {jobs[1]} on 1 node(s)" in log2 and "Setting global step to 2" in log2
