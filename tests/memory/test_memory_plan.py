"""`verl-async-dapo plan --json` carries the plan's peak-memory estimate, following the plan's own features."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_memory_estimate import QWEN3_8B

from verl_async_dapo import cli


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    assert cli.main(["plan", "--json", "--framework", "fsdp", *args]) == cli.EXIT_OK
    return json.loads(capsys.readouterr().out)["memory_estimate"]


def test_plan_shows_the_estimate_and_follows_offload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MODE", "N_GPUS", "TRAINER_GPUS", "ROLLOUT_GPUS", "ROLLOUT_TP", "USER_FEATURES", "ENABLE_OFFLOAD",
                 "MODEL_PATH", "GPU_MEMORY_UTILIZATION"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN3_8B))
    base = plan(capsys, "--model-config", str(config), "--gpu-memory-gib", "139.8")
    assert base["params_billion"] == 8.191
    assert base["terms_gib"]["params_grads_optimizer"] == round(8190735360 * 16 / 8 / 2**30, 3)  # 8 GPUs (4 + 4)
    assert base["rollout_gib"] == round(0.6 * 139.8, 2) and base["phase"] == "rollout"
    assert base["proposed_features"] == []  # 8 x H200: fits as planned
    monkeypatch.setenv("N_GPUS", "1")
    monkeypatch.setenv("ROLLOUT_TP", "1")
    one_gpu = plan(capsys, "--model-config", str(config), "--gpu-memory-gib", "139.8")
    assert one_gpu["proposed_features"] == ["offload"]  # 122 GiB of fp32 state on one GPU
    assert one_gpu["proposed_peak_per_gpu_gib"] <= 139.8 < one_gpu["peak_per_gpu_gib"]
    monkeypatch.setenv("USER_FEATURES", "no_offload")
    refused = plan(capsys, "--model-config", str(config), "--gpu-memory-gib", "139.8")
    assert "offload" not in refused["proposed_features"]  # the user's no_offload is kept
    for name in ("N_GPUS", "ROLLOUT_TP", "USER_FEATURES"):
        monkeypatch.delenv(name)
    offloaded = plan(capsys, "--model-config", str(config), "--features", "offload")
    assert offloaded["terms_gib"]["params_grads_optimizer"] == 0.0
    assert offloaded["rollout_gib"] is None and offloaded["peak_per_gpu_gib"] is None  # no GPU size given
    after_oom = plan(capsys, "--model-config", str(config), "--oom-step", "1")  # the ladder's first rung: offload
    assert after_oom["terms_gib"] == offloaded["terms_gib"]
    missing = plan(capsys, "--model-config", str(tmp_path / "nope.json"))
    assert missing["note"].startswith(f"no estimate: {tmp_path / 'nope.json'}")
