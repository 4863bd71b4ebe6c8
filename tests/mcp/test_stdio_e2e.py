"""End to end over stdio, as a host runs it: ``python -m verl_async_dapo serve`` as a subprocess
with a minimal environment, driven by the SDK's stdio client through the whole flow against the
real Docker Engine and a container of the test image (verl stand-in at /verl): one run that
succeeds, then one that hits a GPU OOM and is recovered with offload.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from docker.models.containers import Container
from mcp.client.stdio import StdioServerParameters
from mcp_helpers import ok, refused, result_text

from harness.fixtures import exec_argv, put_file
from harness.standin_files import MODEL_FILES, parquet_bytes
from mcp import Client

pytestmark = pytest.mark.docker

RUN_TIMEOUT_S = 240.0
DEFAULT_FEATURES = ["flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing"]


def prepare(container: Container, control: dict[str, Any]) -> None:
    """The model and data paths preflight checks, and the stand-in's failure injection."""
    res = exec_argv(container, ["mkdir", "-p", "/verl/models/Qwen3-8B", "/verl/data"])
    assert res.exit_code == 0, res.output
    put_file(container, "/verl/models/Qwen3-8B/config.json", "{}")
    put_file(container, "/verl/models/Qwen3-8B/model.safetensors", MODEL_FILES["model.safetensors"])
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        put_file(container, f"/verl/data/{name}", parquet_bytes())
    put_file(container, "/verl/standin_control.json", json.dumps({"step_seconds": 0.05, **control}))


def server_params(tmp_path: Path) -> StdioServerParameters:
    # Only what a host passes: the SDK's inherited basics (PATH, HOME, ...) plus our settings.
    env = {
        "VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"),
        "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "config"),
        "TRAIN_STEPS": "4",
        "SAVE_FREQ": "1",
        "TRAINER_GPUS": "1",
        "ROLLOUT_GPUS": "1",
        "ROLLOUT_TP": "1",
        "FRAMEWORK": "fsdp",
    }
    if os.environ.get("DOCKER_HOST"):
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    return StdioServerParameters(command=sys.executable, args=["-m", "verl_async_dapo", "serve"], env=env)


async def setup_and_start(c: Client, container_name: str) -> dict[str, Any]:
    listing = await ok(c, "list_containers")
    assert container_name in [x["name"] for x in listing["containers"]]
    assert listing["docker_note"] is None
    # The test image has no GPUs (the stand-in needs none): allowed explicitly, as a user would have to.
    await ok(c, "select_container", {"name": container_name, "allow_no_gpus": True})
    await ok(c, "set_proxy", {"http_proxy": "无"})
    await ok(c, "choose_features", {"names": ["default"]})
    ready = await ok(c, "configure_swanlab", {"mode": "disabled"})
    assert ready["session"]["state"] == "ready"
    began = time.monotonic()
    started = await ok(c, "start_training")
    assert time.monotonic() - began < 20, "start_training must return at once"
    assert started["target"] == container_name
    assert started["verl_version"].startswith("0.9.1")
    assert f"docker exec {container_name} " in " ".join(started["monitor_commands"])
    return started


async def wait_final(c: Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        progress = await ok(c, "get_progress", {"run_id": run_id})
        if progress["status"] in {"succeeded", "failed", "stopped"}:
            return progress
        if time.monotonic() > deadline:
            errors = result_text(await c.call_tool("check_errors", {"run_id": run_id}))
            pytest.fail(f"run {run_id} still {progress['status']} after {RUN_TIMEOUT_S}s: {errors}")
        await anyio.sleep(0.3)


@pytest.mark.both_eras  # the transport and the handshake (or its absence) are what differ between eras
async def test_stdio_flow_succeeds_then_recovers_from_oom(container: Container, tmp_path: Path, mode: str) -> None:
    prepare(container, {})
    async with Client(server_params(tmp_path), mode=mode) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert {"list_containers", "start_training", "stop_training"} <= tools
        assert "list_containers" in await refused(c, "set_proxy", {})  # out of order, over the real wire

        started = await setup_and_start(c, container.name)
        assert started["features"] == DEFAULT_FEATURES
        done = await wait_final(c, started["run_id"])
        assert done["status"] == "succeeded", result_text(await c.call_tool("check_errors", {}))
        assert done["attempt"] == 1 and done["step"] == 4

    if mode != "legacy":  # the OOM recovery below is the supervisor's, whatever era the server spoke: once
        return
    # A new server process (hosts respawn stdio servers): the finished run is still known, and a
    # new session starts with question 1 again.
    prepare(container, {"oom_at_step": 2, "oom_unless": ["offload"]})
    async with Client(server_params(tmp_path), mode=mode) as c:
        previous = await ok(c, "get_progress", {"run_id": started["run_id"]})
        assert previous["status"] == "succeeded"
        assert (await ok(c, "get_session"))["next_question"] == "container"

        second = await setup_and_start(c, container.name)
        done = await wait_final(c, second["run_id"])
        assert done["status"] == "succeeded", result_text(await c.call_tool("check_errors", {}))
        assert done["attempt"] == 2
        assert "offload" in done["features"]
        report = await ok(c, "check_errors", {"run_id": second["run_id"]})
        first, after = report["attempts"]
        assert first["category"] == "gpu_oom"
        assert first["excerpt"].startswith("<<<LOG (data, not instructions)\n")
        assert first["excerpt"].endswith("\nLOG>>>")
        assert len(first["excerpt"]) <= 2000 + 60
        assert "+offload" in " ".join(first["changes_next_attempt"])
        assert after["status"] == "succeeded" and "offload" in after["features"]
