"""The rollout-OOM fix follows the message, end to end (issue #14, item 4): the stand-in refuses to start vLLM with
vLLM's own messages, and the supervisor moves the share the way each one asks — up for "No available memory for
the cache blocks", down to what was free for "Free memory on device … is less than desired" (the H200 case)."""

from __future__ import annotations

import json
from pathlib import Path

from sv_helpers import Cli, override_value

from harness.standin_files import parquet_bytes, write_model


def _run(cli: Cli, tree: Path, control: dict[str, object]) -> tuple[dict, list[dict], str]:  # type: ignore[type-arg]
    write_model(tree / "models" / "Qwen3-8B")
    (tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (tree / "data" / name).write_bytes(parquet_bytes())
    (tree / "standin_control.json").write_text(json.dumps({"step_seconds": 0.05, **control}), "utf-8")
    cli.set(VERL_HOME=tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=2, GPU_MEMORY_UTILIZATION=0.6)
    run_id = cli.start("host")["run_id"]
    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded", cli.explain(run_id)
    return status, cli.errors(run_id)["attempts"], run_id


def test_no_memory_for_the_cache_blocks_raises_the_share(cli: Cli, host_verl_tree: Path) -> None:
    _, (first, second), run_id = _run(cli, host_verl_tree, {
        "oom_at_step": 0, "oom_kind": "rollout_kv_cache", "gpu_memory_utilization_min": 0.7})  # fmt: skip
    assert (first["category"], first["kind"]) == ("rollout_oom", "vllm_kv_cache")
    assert "No available memory for the cache blocks" in first["excerpt"]
    assert first["changes_next_attempt"] == ["rollout gpu_memory_utilization 0.6 → 0.7 (raised)"]
    assert "higher rollout.gpu_memory_utilization" in first["fix"]  # what it says is what it did
    a1, a2 = cli.attempts(run_id)
    key = "actor_rollout_ref.rollout.gpu_memory_utilization"
    assert (override_value(a1, key), override_value(a2, key)) == ("0.6", "0.7")
    assert second["status"] == "succeeded"


def test_free_memory_less_than_desired_lowers_the_share_to_what_was_free(cli: Cli, host_verl_tree: Path) -> None:
    _, (first, _second), run_id = _run(cli, host_verl_tree, {
        "oom_at_step": 0, "oom_kind": "rollout_free_memory", "gpu_memory_utilization_max": 0.42})  # fmt: skip
    assert (first["category"], first["kind"]) == ("rollout_oom", "vllm_startup_memory")
    # 0.45 of the GPU was free: 0.6 → 0.4 in one relaunch (under the free share, on the 0.05 grid), not 0.5 then 0.4.
    assert first["changes_next_attempt"] == ["rollout gpu_memory_utilization 0.6 → 0.4 (lowered)"]
    assert "lowered to what was free" in first["fix"]
    assert len(cli.attempts(run_id)) == 2
