"""The rollout-OOM fix follows vLLM's message (issue #14, item 4), in-process: up for "No available memory for the
cache blocks", down to what was free for "Free memory on device … is less than desired" (the H200 case).
Moved here from tests/supervisor/test_supervisor_rollout_memory.py; the relaunch at a lower share ran on the real
H200 (docs/GPU.md §3)."""

from __future__ import annotations

from typing import Any

import pytest
from test_oom_ladder import override

from harness.inprocess_runs import InProcessRuns, write_control

KEY = "actor_rollout_ref.rollout.gpu_memory_utilization"


@pytest.fixture(autouse=True)
def two_steps_at_0_6(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAIN_STEPS", "2")
    monkeypatch.setenv("GPU_MEMORY_UTILIZATION", "0.6")


async def _run(inprocess: InProcessRuns, control: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    write_control(inprocess.tree, {"step_seconds": 0.01, **control})
    run_id = await inprocess.start()
    assert await inprocess.supervise(run_id) == "succeeded", inprocess.explain(run_id)
    return inprocess.errors(run_id), run_id


async def test_no_memory_for_the_cache_blocks_raises_the_share(inprocess: InProcessRuns) -> None:
    (first, second), run_id = await _run(inprocess, {"oom_at_step": 0, "oom_kind": "rollout_kv_cache",
                                                     "gpu_memory_utilization_min": 0.7})  # fmt: skip
    assert (first["category"], first["kind"]) == ("rollout_oom", "vllm_kv_cache")
    assert "No available memory for the cache blocks" in first["excerpt"]
    assert first["changes_next_attempt"] == ["rollout gpu_memory_utilization 0.6 → 0.7 (raised)"]
    assert "higher rollout.gpu_memory_utilization" in first["fix"]  # what it says is what it did
    a1, a2 = inprocess.ctx.store.attempts(run_id)
    assert (override(a1, KEY), override(a2, KEY)) == ("0.6", "0.7")
    assert second["status"] == "succeeded"


async def test_free_memory_less_than_desired_lowers_the_share_to_what_was_free(inprocess: InProcessRuns) -> None:
    (first, _second), run_id = await _run(inprocess, {"oom_at_step": 0, "oom_kind": "rollout_free_memory",
                                                      "gpu_memory_utilization_max": 0.42})  # fmt: skip
    assert (first["category"], first["kind"]) == ("rollout_oom", "vllm_startup_memory")
    # 0.45 of the GPU was free: 0.6 → 0.4 in one relaunch (under the free share, on the 0.05 grid), not 0.5 then 0.4.
    assert first["changes_next_attempt"] == ["rollout gpu_memory_utilization 0.6 → 0.4 (lowered)"]
    assert "lowered to what was free" in first["fix"]
    assert len(inprocess.ctx.store.attempts(run_id)) == 2
