"""start_training refuses what cannot work, with every problem in one answer, in the words of the face.

On the host target with the verl stand-in (this machine has no nvidia-smi, so no GPU is visible): without an explicit
allowance that is an error; a missing model and a plan that cannot be built are reported in the same refusal; the MCP
refusal names tool arguments, the CLI's the flags and environment variables.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import ok, refused, stop_active_runs

from harness.standin_files import parquet_bytes, write_model
from verl_async_dapo import cli, runs
from verl_async_dapo.context import AppContext


@pytest.fixture
def tree(host_verl_tree: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """VERL_HOME = the stand-in tree, data present but no model; SwanLab disabled; GPUs not allowed to be missing."""
    (host_verl_tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (host_verl_tree / "data" / name).write_bytes(parquet_bytes())
    for name, value in {"VERL_HOME": str(host_verl_tree), "TRAIN_STEPS": "2", "TRAINER_GPUS": "1",
                        "ROLLOUT_GPUS": "1", "FRAMEWORK": "fsdp", "SWANLAB_MODE": "disabled",
                        "MODE": "one_step_off_policy", "ROLLOUT_TP": "2", "STANDIN_STEP_SECONDS": "0.05",
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(runs.ALLOW_NO_GPUS_ENV, raising=False)
    yield host_verl_tree
    stop_active_runs()


async def _answer(client: Any, **container: Any) -> None:
    await ok(client, "list_containers")
    await ok(client, "select_container", {"name": "host", **container})
    await ok(client, "set_proxy", {})
    await ok(client, "choose_features", {"names": ["default"]})


async def test_no_gpus_model_and_plan_are_refused_together(connect: Any, tree: Path) -> None:
    async with connect() as client:
        await _answer(client)
        text = await refused(client, "start_training")
        assert "nothing was started" in text
        assert "[error] gpus: no GPU visible: nvidia-smi is not available in this machine" in text
        assert "install the NVIDIA driver on this machine" in text and "allow_no_gpus=true" in text
        assert "--gpus all" not in text  # host advice for the host
        assert "[error] MODEL_PATH:" in text and "the start_training argument model_path" in text
        assert "[error] plan: " in text and "ROLLOUT_TP" in text  # the plan problem in the same refusal
        assert "--allow-no-gpus" not in text  # CLI words stay out of the MCP face
        sessions = AppContext.from_environment()
        try:
            assert sessions.store.runs(5) == []  # nothing was created
        finally:
            sessions.close()


async def test_explicit_allowance_lets_a_gpu_less_target_start(connect: Any, tree: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    write_model(tree / "models" / "Qwen3-8B")
    monkeypatch.setenv("ROLLOUT_TP", "1")
    async with connect() as client:
        await _answer(client, allow_no_gpus=True)
        started = await ok(client, "start_training")
        assert started["run_id"].startswith("run_")
        assert any(line.startswith("[warn] gpus: ") and "allowed" in line for line in started["preflight"])
        deadline = time.monotonic() + 60
        progress = await ok(client, "get_progress", {"run_id": started["run_id"]})
        while progress["as_of"] is None and time.monotonic() < deadline:
            await anyio.sleep(0.5)
            progress = await ok(client, "get_progress", {"run_id": started["run_id"]})
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", progress["as_of"] or ""), progress  # ISO 8601, UTC


def test_cli_start_names_flags_and_variables(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A plan that cannot be built, no model and no GPU: all three in one refusal, before a session exists.
    assert cli.main(["start", "--container", "host"]) == cli.EXIT_FAIL
    err = capsys.readouterr().err
    assert err.startswith("error: invalid training parameters: ROLLOUT_TP=2 must divide"), err
    assert "[error] MODEL_PATH: " in err and "or set MODEL_PATH" in err and "[error] gpus: " in err, err
    assert "start_training" not in err and "--allow-no-gpus" in err, err
    write_model(tree / "models" / "Qwen3-8B")
    code = cli.main(["start", "--container", "host", "--mode", "dapo"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_FAIL, err
    assert "[error] gpus: " in err and "--allow-no-gpus" in err and "allow_no_gpus=true" not in err, err
    assert "start_training" not in err, err
    assert cli.main(["start", "--container", "host", "--mode", "dapo", "--allow-no-gpus"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "run id:   run_" in out and "call get_progress" not in out
