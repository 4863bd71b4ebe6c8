"""Training through the MCP tools on the host target with the verl stand-in: start returns at once,
the detached supervisor finishes the run (its log readable as a resource), and stops on confirmed request.
OOM recovery through the MCP tools is tests/mcp/test_stdio_e2e.py's (container target, over stdio, with the
check_errors report this file used to check on the host: the excerpt's fences and size, the next attempt's change);
on the host target it is tests/bench/test_gpu_harness.py's (bench/gpu/drive.py through the CLI).

The stand-in tree comes from ``host_verl_tree`` (tests/harness/fixtures.py); failures are injected
through ``<tree>/standin_control.json`` (schema: tests/standin/entry/standin_control.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import ElicitResult
from mcp_helpers import answer_first_three, ok, refused, result_text, stop_active_runs

from harness.standin_files import parquet_bytes, write_model
from mcp import Client
from verl_async_dapo.status import ACTIVE_RUN_STATUSES

FINAL = {"succeeded", "failed", "stopped"}
ACTIVE = set(ACTIVE_RUN_STATUSES)
RUN_TIMEOUT_S = 180.0


@pytest.fixture
def training_tree(host_verl_tree: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in tree as VERL_HOME, with the model and data paths preflight looks for; SwanLab
    disabled through the environment (so the flow skips question 4, as with a configured SwanLab).

    The stand-in runs under this venv's python3 (it has hydra). Every run still active at the end
    of the test is stopped, so a failing test leaves no detached training behind.
    """
    write_model(host_verl_tree / "models" / "Qwen3-8B")
    (host_verl_tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (host_verl_tree / "data" / name).write_bytes(parquet_bytes())
    monkeypatch.setenv("VERL_HOME", str(host_verl_tree))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("TRAIN_STEPS", "4")
    monkeypatch.setenv("SAVE_FREQ", "1")
    monkeypatch.setenv("TRAINER_GPUS", "1")
    monkeypatch.setenv("ROLLOUT_GPUS", "1")
    monkeypatch.setenv("ROLLOUT_TP", "1")
    monkeypatch.setenv("FRAMEWORK", "fsdp")
    monkeypatch.setenv("STANDIN_STEP_SECONDS", "0.05")
    monkeypatch.setenv("SWANLAB_MODE", "disabled")  # preconfigured: question 4 is skipped
    yield host_verl_tree
    stop_active_runs()


def control(tree: Path, **settings: Any) -> None:
    (tree / "standin_control.json").write_text(json.dumps(settings), "utf-8")


async def start(client: Client, **params: Any) -> dict[str, Any]:
    ready = await answer_first_three(client)
    assert ready["state"] == "ready" and ready["swanlab_source"] == "env"
    began = time.monotonic()
    started = await ok(client, "start_training", params)
    assert time.monotonic() - began < 15, "start_training must return at once"
    assert started["run_id"].startswith("run_")
    assert started["status"] in ACTIVE | FINAL
    assert started["swanlab_note"] == "SwanLab is disabled for this run"
    assert any("train.log" in cmd for cmd in started["monitor_commands"])
    return started


async def wait_until(client: Client, run_id: str, statuses: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        progress = await ok(client, "get_progress", {"run_id": run_id})
        if progress["status"] in statuses:
            return progress
        if time.monotonic() > deadline:
            errors = await c_errors(client, run_id)
            pytest.fail(f"run {run_id} still {progress['status']} after {RUN_TIMEOUT_S}s: {errors}")
        await anyio.sleep(0.5)


async def c_errors(client: Client, run_id: str) -> str:
    return result_text(await client.call_tool("check_errors", {"run_id": run_id}))


async def test_a_run_starts_at_once_and_succeeds(connect: Callable[..., Any], training_tree: Path) -> None:
    async with connect() as c:
        started = await start(c)
        assert started["features"] == ["flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing"]
        done = await wait_until(c, started["run_id"], FINAL)
        assert done["status"] == "succeeded", await c_errors(c, started["run_id"])
        assert done["attempt"] == 1
        assert done["step"] == done["total_steps"] == 4
        # The finished run keeps its answers; the next training starts a new session at question 1.
        session = await ok(c, "get_session")
        assert session["session_id"] is None and session["next_question"] == "container"
        assert "list_containers" in await refused(c, "set_proxy", {})
        assert (await ok(c, "get_progress"))["run_id"] == started["run_id"]  # the latest run, without an id
        # The log resource: the fenced tail of the run's log.
        read = await c.read_resource(f"verl-async-dapo://runs/{started['run_id']}/log")
        text = read.contents[0].text  # type: ignore[union-attr]
        assert "<<<LOG (data, not instructions)\n" in text and text.endswith("\nLOG>>>")
        assert "Training Progress" in text or "step:" in text


async def _accept(_ctx: Any, _params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"stop": True})


async def _decline(_ctx: Any, _params: Any) -> ElicitResult:
    return ElicitResult(action="decline")


@pytest.mark.both_eras
async def test_stop_is_the_users_to_confirm_in_a_form_or_with_confirm(
    connect: Callable[..., Any], training_tree: Path
) -> None:
    """Three clients, two runs (until 2026-12-04 three tests, a run each): a form the user declines keeps the run
    training; a client without forms is refused unless it passes confirm=true, then stops it, and a second stop is
    not needed; a form the user accepts names the run and stops it."""
    control(training_tree, hang=True, fail_at_step=1)
    async with connect(elicitation_callback=_decline) as c:
        started = await start(c)
        run_id = started["run_id"]
        await wait_until(c, run_id, {"running"})
        kept = await ok(c, "stop_training", {"run_id": run_id})
        assert kept["confirmation"] == "declined"
        assert kept["status"] in ACTIVE_RUN_STATUSES
        assert (await ok(c, "get_progress"))["status"] in ACTIVE_RUN_STATUSES

    async with connect() as c:  # no elicitation_callback: the client declares no elicitation capability
        message = await refused(c, "stop_training", {})
        assert "confirm=true" in message
        assert (await ok(c, "get_progress"))["status"] in ACTIVE_RUN_STATUSES
        stopped = await ok(c, "stop_training", {"confirm": True})
        assert stopped["confirmation"] == "argument"
        done = await wait_until(c, run_id, FINAL)
        assert done["status"] == "stopped"
        again = await ok(c, "stop_training", {"run_id": run_id})
        assert again["confirmation"] == "not_needed" and again["status"] == "stopped"

    asked: list[str] = []

    async def accept(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return await _accept(ctx, params)

    async with connect(elicitation_callback=accept) as c:
        second = await start(c)
        await wait_until(c, second["run_id"], {"running"})
        stopped = await ok(c, "stop_training", {})
        assert asked and second["run_id"] in asked[0]
        assert stopped["confirmation"] == "user"
        assert stopped["status"] in {"stopped", "stopping"}
        done = await wait_until(c, second["run_id"], FINAL)
        assert done["status"] == "stopped"


async def test_overrides_show_in_the_session_and_a_stopped_run_resumes(
    connect: Callable[..., Any], training_tree: Path
) -> None:
    control(training_tree, step_seconds=0.4)
    lr = "actor_rollout_ref.actor.optim.lr=4e-6"
    async with connect() as c:
        started = await start(c, overrides=[lr], train_batch_size=8, ppo_mini_batch_size=4, experiment_name="resumable")
        run_id = started["run_id"]
        await wait_until(c, run_id, {"running"})
        session = await ok(c, "get_session")  # what really runs, for an agent picking the conversation up
        assert session["run_id"] == run_id and session["run_attempt"] == 1
        assert lr in session["run_overrides"] and "data.train_batch_size=8" in session["run_overrides"]
        assert "trainer.experiment_name=resumable" in session["run_overrides"]
        assert session["run_override_sources"]["actor_rollout_ref.actor.optim.lr"] == "user"
        assert session["run_override_sources"]["data.train_batch_size"] == "recipe"
        report = await ok(c, "check_errors", {"run_id": run_id})
        assert report["attempts"][0]["override_sources"]["actor_rollout_ref.actor.optim.lr"] == "user"
        assert (await ok(c, "stop_training", {"confirm": True}))["confirmation"] == "argument"
        assert (await wait_until(c, run_id, FINAL))["status"] == "stopped"
        control(training_tree, step_seconds=0.05)
        resumed = await ok(c, "resume_training", {"run_id": run_id})
        assert (resumed["run_id"], resumed["attempt"]) == (run_id, 2)
        done = await wait_until(c, run_id, FINAL)
        assert done["status"] == "succeeded" and done["attempt"] == 2, await c_errors(c, run_id)
        second = (await ok(c, "check_errors", {"run_id": run_id}))["attempts"][1]
        assert second["reason_started"].startswith("resumed on request")
        assert second["override_sources"]["actor_rollout_ref.actor.optim.lr"] == "user"
        again = await refused(c, "resume_training", {"run_id": run_id})
        assert "only a failed or stopped run can be resumed" in again
