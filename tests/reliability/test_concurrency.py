"""Concurrency: many agents (or a confused one) calling at once must never make two runs of one session, two
supervisors of one run, or two trainings on one container's GPUs without the user's explicit choice.

* 20 concurrent ``start_training`` calls on one ready session, from TWO stdio server processes sharing the state
  store (10 each): exactly one run, one supervisor, one launcher; the 19 others get a ToolError saying why.
* then the supervisor is killed and 20 concurrent ``get_progress`` calls (both servers) race to heal it: exactly one
  new supervisor takes over, still one launcher, and the run still succeeds. This part runs with every core busy
  (busy loops on the idle ones for at most the test's duration, ``cpu_load``): on a busy 2-core machine the kill
  lands anywhere in the supervisor's launch (issue 27, item 7: it once saw attempts [1, 2]).
* two sessions on one container: the second is refused while the first trains there (its GPUs are busy), through
  the MCP tool and through the CLI, unless the user explicitly passes ``allow_shared_gpus`` / ``--allow-shared-gpus``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from docker.models.containers import Container
from rel_helpers import (
    FINAL,
    LauncherWatch,
    StdioServer,
    end_runs,
    is_bare_crash,
    kill,
    prepare_host_tree,
    product_env,
    record,
    result_text,
    supervisors,
    write_control,
)

from harness.fixtures import put_file
from harness.standin_files import put_tree
from mcp import Client
from verl_async_dapo.runspec import RunSpec
from verl_async_dapo.server import mcp
from verl_async_dapo.store import Store

CALLS_PER_SERVER = 10
CORES = os.cpu_count() or 1
BUSY_SECONDS = 240  # each loop ends by itself after this, even if the test process is killed
SAMPLE_S = 0.5


def busy_cores(window: float = SAMPLE_S) -> float:
    """How many cores the machine kept busy over the last ``window`` seconds (/proc/stat)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        idle = values[3] + values[4]  # idle + iowait
        return sum(values) - idle, sum(values)

    busy0, total0 = sample()
    time.sleep(window)
    busy1, total1 = sample()
    return CORES * (busy1 - busy0) / max(1, total1 - total0)


@pytest.fixture
def cpu_load() -> Iterator[int]:
    """Every core busy for the test's duration: busy loops (each exits after BUSY_SECONDS at the latest) for the
    cores that are idle now. Run alone, that is one loop per core and the product's processes get about half of
    the CPU; in the suite the other workers already fill the cores, and loops on top would only slow the suite.
    Yields the number of loops started."""
    busy = f"import time\nend = time.monotonic() + {BUSY_SECONDS}\nwhile time.monotonic() < end: pass"
    wanted = max(0, CORES - round(busy_cores()))
    loops = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(wanted)]
    try:
        yield wanted
    finally:
        for loop in loops:
            loop.kill()
            loop.wait(timeout=10)


async def test_twenty_concurrent_starts_from_two_servers_make_one_run(
    tmp_path: Path, host_verl_tree: Path, cpu_load: int
) -> None:
    prepare_host_tree(host_verl_tree)
    write_control(host_verl_tree, step_seconds=0.25)  # ~2 s of training: time for the heal race below
    env = product_env(tmp_path / "home", host_verl_tree)
    store = Store(tmp_path / "home" / "state.db")
    run_ids: list[str] = []
    try:
        with LauncherWatch(under=str(host_verl_tree)) as watch:
            async with StdioServer(env, mode="legacy") as a, StdioServer(env, mode="auto") as b:
                await a.ok("select_container", {"name": "host"})
                await b.ok("set_proxy", {})  # the other process continues the same session (shared store)
                ready = await a.ok("choose_features", {"names": ["default"]})
                assert ready["state"] == "ready", ready
                await b.ok("get_session")  # both servers up before the race

                results: list[tuple[str, Any]] = []

                async def start(server: StdioServer, name: str) -> None:
                    results.append((name, await server.call("start_training", {})))

                began = time.monotonic()
                async with anyio.create_task_group() as tg:
                    for i in range(CALLS_PER_SERVER):
                        tg.start_soon(start, a, f"a{i}")
                        tg.start_soon(start, b, f"b{i}")
                race_s = time.monotonic() - began
                wins = [r for _, r in results if not r.is_error]
                losses = [r for _, r in results if r.is_error]
                assert len(results) == 2 * CALLS_PER_SERVER
                assert len(wins) == 1, [result_text(r) for r in wins]
                run_id = wins[0].structured_content["run_id"]
                run_ids.append(run_id)
                for r in losses:
                    text = result_text(r)
                    assert not is_bare_crash("start_training", r), text
                    assert any(w in text for w in ("already", "busy", "running")), text
                assert [r.id for r in store.runs(100)] == [run_id]

                # One supervisor (the losers spawned none), then a heal race after killing it.
                await anyio.sleep(1.0)
                first = supervisors(run_id)
                assert len(first) <= 1, first
                for p in first:
                    kill(p.pid)
                heals: list[Any] = []

                async def progress(server: StdioServer) -> None:
                    heals.append(await server.call("get_progress", {"run_id": run_id}))

                async with anyio.create_task_group() as tg:
                    for _ in range(CALLS_PER_SERVER):
                        tg.start_soon(progress, a)
                        tg.start_soon(progress, b)
                assert all(not r.is_error for r in heals), [result_text(r) for r in heals if r.is_error]
                await anyio.sleep(1.5)  # every spawned supervisor has started (and all but one left)
                after = supervisors(run_id)
                assert len(after) <= 1, f"{len(after)} supervisors alive for one run: {after}"
                restarted = [e for e in store.events(run_id) if e.kind == "supervisor_restarted"]

                deadline = time.monotonic() + 120
                while (done := await a.ok("get_progress", {"run_id": run_id}))["status"] not in FINAL:
                    assert time.monotonic() < deadline, done
                    await anyio.sleep(0.5)
                assert done["status"] == "succeeded", result_text(await a.call("check_errors", {"run_id": run_id}))
        assert not watch.violations, watch.seen_together
        assert store.integrity_ok()
        # One attempt was launched. A kill before the launch began (under load the supervisor may still be
        # validating) leaves an attempt that never started: "abandoned", no job dir, relaunched as the next
        # number (references/notifications.md §7: it costs nothing). A kill after it began must not (the next
        # supervisor waits for the launcher's pgid), nor one after the attempt ended (test_supervisor_finished_
        # attempt.py has both moments made exact).
        spec = RunSpec.model_validate(store.run(run_id).spec)  # type: ignore[union-attr]
        attempts = store.attempts(run_id)
        seen = [(a.n, a.status, a.reason, Path(spec.attempt_dir(a.n)).exists()) for a in attempts]
        with_launch = [a.n for a in attempts if Path(spec.attempt_dir(a.n)).exists()]
        assert len(with_launch) == 1 and attempts[-1].n == with_launch[0], seen
        assert all(a.status == "abandoned" and a.job is None for a in attempts[:-1]), seen
    finally:
        end_runs(run_ids)
        store.close()
    record("concurrency_start", calls=2 * CALLS_PER_SERVER, servers=2, runs=1, race_seconds=round(race_s, 2),
           heal_calls=len(heals), heals_recorded=len(restarted), max_supervisors=len(after), attempts=len(attempts),
           launched_attempts=len(with_launch), busy_loops=cpu_load,
           max_launchers=max(watch.max_per_run.values(), default=0))  # fmt: skip


def _prepare_container(container: Container) -> None:
    put_tree(container)
    put_file(container, "/verl/standin_control.json", '{"hang": true, "fail_at_step": 1, "step_seconds": 0.05}')


async def test_second_session_on_a_busy_container_needs_explicit_consent(
    container_factory: Callable[..., Container], monkeypatch: Any
) -> None:
    box = container_factory()
    _prepare_container(box)
    for var, value in {"FRAMEWORK": "fsdp", "TRAIN_STEPS": "4", "TRAINER_GPUS": "1", "ROLLOUT_GPUS": "1",
                       "ROLLOUT_TP": "1", "SWANLAB_MODE": "disabled"}.items():  # fmt: skip
        monkeypatch.setenv(var, value)
    run_ids: list[str] = []
    try:
        async with Client(mcp) as c:
            for tool, args in (("select_container", {"name": box.name}), ("set_proxy", {}),
                               ("choose_features", {"names": ["default"]})):  # fmt: skip
                assert not (r := await c.call_tool(tool, args)).is_error, result_text(r)
            first = await c.call_tool("start_training", {})
            assert not first.is_error, result_text(first)
            run_ids.append(first.structured_content["run_id"])  # type: ignore[index]
            first_session = (await c.call_tool("get_session", {})).structured_content["session_id"]  # type: ignore[index]

            # A second session on the same container: refused, naming the busy GPUs and the way out.
            busy = await c.call_tool("select_container", {"name": box.name})
            text = result_text(busy)
            assert busy.is_error and not is_bare_crash("select_container", busy), text
            assert "busy" in text and "GPUs" in text and "allow_shared_gpus" in text, text
            now = (await c.call_tool("get_session", {})).structured_content  # type: ignore[union-attr]
            assert now is not None and now["session_id"] == first_session and now["state"] == "running"

            # The CLI refuses too (its own session), unless told explicitly.
            env = product_env(Path(os.environ["VERL_ASYNC_DAPO_HOME"]), FRAMEWORK="fsdp", TRAIN_STEPS="4",
                              TRAINER_GPUS="1", ROLLOUT_GPUS="1", ROLLOUT_TP="1", SWANLAB_MODE="disabled",
                              VERL_ASYNC_DAPO_CONFIG_DIR=os.environ["VERL_ASYNC_DAPO_CONFIG_DIR"])  # fmt: skip
            cli = subprocess.run([sys.executable, "-m", "verl_async_dapo", "start", "--container", box.name,
                                  "--skip-preflight", "--json"], env=env, capture_output=True, text=True,
                                 timeout=120, check=False)  # fmt: skip
            assert cli.returncode == 1 and "busy" in cli.stderr and "allow" in cli.stderr, cli.stderr

            # The user explicitly accepts sharing: a new session, then a second run on the same container.
            shared = await c.call_tool("select_container", {"name": box.name, "allow_shared_gpus": True})
            assert not shared.is_error, result_text(shared)
            second_session = shared.structured_content["session_id"]  # type: ignore[index]
            assert second_session != first_session
            assert shared.structured_content["answers"]["container"]["allow_shared_gpus"] is True  # type: ignore[index]
            for tool, args in (("set_proxy", {}), ("choose_features", {"names": ["default"]})):
                assert not (r := await c.call_tool(tool, args)).is_error, result_text(r)
            second = await c.call_tool("start_training", {})
            assert not second.is_error, result_text(second)
            run_ids.append(second.structured_content["run_id"])  # type: ignore[index]
            for run_id in run_ids:
                progress = (await c.call_tool("get_progress", {"run_id": run_id})).structured_content
                assert progress is not None and progress["status"] not in FINAL, progress
            for run_id in run_ids:
                stopped = await c.call_tool("stop_training", {"run_id": run_id, "confirm": True})
                assert not stopped.is_error, result_text(stopped)
    finally:
        end_runs(run_ids)
    record("concurrency_shared_container", sessions=2, refused_without_consent=2, runs_with_consent=2)
