"""The GPU-memory fit through the MCP tools, on the host target with the verl stand-in, and the chart.

nvidia-smi on PATH prints the real output captured on an H200 while another process held 64 GiB
(tests/memory/fixtures/h200-busy-*.csv): start_training refuses before anything starts and names the fix;
with apply_memory_fix=true the lower share (and the proposed offload) is what the attempt runs with. get_progress(chart=true) then returns
the run's curves as PNG image content.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import answer_first_three, ok, refused, result_text, stop_active_runs

from harness.standin_files import MODEL_FILES, parquet_bytes
from mcp import Client
from verl_async_dapo.context import AppContext

FIXTURES = Path(__file__).parents[1] / "memory" / "fixtures"
FINAL = {"succeeded", "failed", "stopped"}
QWEN25_05B_CONFIG = ('{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, '
                     '"num_hidden_layers": 24, "vocab_size": 151936, "intermediate_size": 4864, '
                     '"num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": true}')  # fmt: skip


@pytest.fixture
def busy_gpu_tree(host_verl_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    model = host_verl_tree / "models" / "Qwen2.5-0.5B"
    model.mkdir(parents=True)
    (model / "config.json").write_text(QWEN25_05B_CONFIG)
    (model / "model.safetensors").write_bytes(MODEL_FILES["model.safetensors"])
    (host_verl_tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (host_verl_tree / "data" / name).write_bytes(parquet_bytes())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"  # replays the real H200 output for the two queries preflight sends
    smi.write_text(f"""#!/bin/sh
case "$1" in
  --query-gpu=*) exec cat '{FIXTURES / "h200-busy-gpus-nounits.csv"}' ;;
  --query-compute-apps=*) exec cat '{FIXTURES / "h200-busy-apps-nounits.csv"}' ;;
esac
exit 2
""")
    smi.chmod(0o755)
    for key, value in {"VERL_HOME": str(host_verl_tree), "MODEL_PATH": "Qwen2.5-0.5B", "TRAIN_STEPS": "4",
                       "SAVE_FREQ": "1", "N_GPUS": "1", "ROLLOUT_TP": "1", "FRAMEWORK": "fsdp",
                       "STANDIN_STEP_SECONDS": "0.05", "SWANLAB_MODE": "disabled"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield host_verl_tree
    stop_active_runs()


async def wait_final(client: Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        progress = await ok(client, "get_progress", {"run_id": run_id})
        if progress["status"] in FINAL:
            return progress
        await anyio.sleep(0.5)
    pytest.fail(f"run {run_id} did not finish")


def test_cli_start_refuses_then_applies_the_memory_fix(busy_gpu_tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`verl-async-dapo start` (what scripts/quick_start.sh runs) takes the same decision and the same fix."""
    from verl_async_dapo import cli

    args = ["start", "--container", "host", "--swanlab-mode", "disabled", "--json"]
    assert cli.main(args) == cli.EXIT_FAIL
    err = capsys.readouterr().err
    assert "vLLM will refuse to start" in err and "start --apply-memory-fix" in err
    assert cli.main([*args, "--apply-memory-fix"]) == cli.EXIT_OK
    started = json.loads(capsys.readouterr().out)
    assert started["memory_fix_applied"] == {"gpu_memory_utilization": 0.5, "add_features": ["offload"]}


async def test_no_fit_is_refused_then_the_fix_applies_and_the_chart_comes_back(
    connect: Callable[..., Any], busy_gpu_tree: Path
) -> None:
    async with connect() as c:
        await answer_first_three(c)
        message = await refused(c, "start_training", {})
        assert "preflight failed, nothing was started" in message
        assert "vLLM will refuse to start: it asks 0.6 x 139.8 GiB = 83.9 GiB" in message
        assert "held by pid 544 python3 64.5 GiB" in message
        assert "gpu_memory_utilization=0.5" in message and "apply_memory_fix=true" in message
        # At 0.5 vLLM starts, but wakes up beside the trainer's resident fp32 weights + Adam state (0.49B x 12 B
        # = 5.5 GiB): 69.9 + 5.5 + contexts > 75.3 GiB free. Offload moves that state to host RAM.
        assert "[warn] memory estimate: 0.49B params" in message and "turn on offload" in message
        app = AppContext.from_environment()
        try:
            assert app.store.runs(5) == []  # zero GPU time: no run, no supervisor, no launch
        finally:
            app.close()

        started = await ok(c, "start_training", {"apply_memory_fix": True})
        assert started["memory_fix_applied"] == {"gpu_memory_utilization": 0.5, "add_features": ["offload"]}
        assert "offload" in started["features"]
        assert any(line.startswith("[warn] gpu memory: GPU 0: vLLM share 0.5 x 139.8 = 69.9 GiB")
                   for line in started["preflight"]), started["preflight"]  # fmt: skip
        assert any(line.startswith("[ok] memory estimate: 0.49B params") for line in started["preflight"])
        assert started["memory_estimate"]["fit"]["starts"] is True
        done = await wait_final(c, started["run_id"])
        assert done["status"] == "succeeded"
        app = AppContext.from_environment()
        try:
            (attempt,) = app.store.attempts(started["run_id"])  # the supervisor launched what preflight checked
            assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.5" in attempt.overrides
            assert "actor_rollout_ref.actor.fsdp_config.param_offload=True" in attempt.overrides
        finally:
            app.close()

        plain = await c.call_tool("get_progress", {"run_id": started["run_id"]})
        assert [block.type for block in plain.content] == ["text"]
        assert plain.structured_content is not None and plain.structured_content["chart_note"] is None
        charted = await c.call_tool("get_progress", {"run_id": started["run_id"], "chart": True})
        assert not charted.is_error, result_text(charted)
        kinds = [block.type for block in charted.content]
        assert kinds == ["text", "image"]
        image = charted.content[1]
        assert image.mime_type == "image/png"  # type: ignore[union-attr]
        assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")  # type: ignore[union-attr]
        assert charted.structured_content is not None
        assert charted.structured_content["chart_note"] == "4 step(s) over 1 attempt(s)"
