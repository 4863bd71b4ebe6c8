"""Crash safety: SIGKILL the MCP server (a ``verl-async-dapo serve`` stdio process driven by the SDK's stdio client)
and the per-run supervisor at seeded random points, across many runs on the HOST target with the verl stand-in.

Each scenario answers the four questions and starts a run, continuing from whatever ``get_session`` says after
every crash (as an agent would with a respawned server), then polls ``get_progress`` (which heals: a run whose
supervisor is gone gets a new one that reattaches). Half the scenarios inject a GPU OOM that offload fixes, so
kills also land between attempts. Afterwards, per lane:

* 0 lost answers: every answer the client saw acknowledged is in the store (and every acknowledged run id);
* 0 lost or duplicated runs: one run per scenario, one session per run, attempt numbers contiguous from 1;
* at most one launcher alive per run at any sampled instant (/proc sampled every 0.1 s);
* every run reattached after its kills and ended in a final state (succeeded: the faults are all survivable);
* the store passes ``PRAGMA integrity_check``; no supervisor or launcher is left running.

Sizes: 12 runs in CI; ``VAD_RELIABILITY_LARGE=1`` runs 50 (``VAD_CRASH_RUNS`` overrides, ``VAD_RELIABILITY_SEED``
changes the seed). Two lanes (own state dir and stdio server each) share one stand-in tree.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from rel_helpers import (
    FINAL,
    LARGE,
    SEED,
    LauncherWatch,
    ServerGone,
    StdioServer,
    end_runs,
    kill,
    launchers,
    prepare_host_tree,
    product_env,
    record,
    result_text,
    supervisors,
    write_control,
)

from verl_async_dapo.store import Store

CI_RUNS, LARGE_RUNS = 12, 50
N_RUNS = int(os.environ.get("VAD_CRASH_RUNS") or (LARGE_RUNS if LARGE else CI_RUNS))
LANES = 2
SCENARIO_DEADLINE_S = 180.0
POLL_S = 0.25
# Where the server is killed: during (or just after) one of these calls.
SERVER_KILL_POINTS = ("select_container", "set_proxy", "choose_features", "start_training", "get_progress")
OOM_CONTROL = {"oom_at_step": 3, "oom_unless": ["offload"]}


@dataclass(frozen=True)
class Scenario:
    index: int
    oom: bool  # a GPU OOM at step 3 that only offload avoids: attempt 1 fails, the supervisor relaunches
    server_kill: tuple[str, float] | None  # (call, seconds after the call was sent)
    supervisor_kills: tuple[float, ...]  # seconds after the run id is known


def scenarios(n: int, seed: int) -> list[Scenario]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        point = SERVER_KILL_POINTS[i % len(SERVER_KILL_POINTS)]  # every kill point is covered, even in CI
        server_kill = (point, round(rng.uniform(0.0, 0.5), 3)) if rng.random() < 0.8 else None
        kills = tuple(sorted(round(rng.uniform(0.0, 5.0), 3) for _ in range(rng.choice((1, 1, 2, 2, 3)))))
        out.append(Scenario(i, rng.random() < 0.5, server_kill, kills))
    return out


@dataclass
class Lane:
    index: int
    home: Path
    server: StdioServer
    control: Path
    acked_answers: list[tuple[str, str, Any]] = field(default_factory=list)  # (session, question, value)
    acked_runs: dict[int, str] = field(default_factory=dict)  # scenario → run id the client saw
    run_of: dict[int, str] = field(default_factory=dict)  # scenario → run id (acknowledged or discovered)
    supervisor_kills: int = 0
    log: list[str] = field(default_factory=list)

    async def call(self, tool: str, args: dict[str, Any], pending: list[tuple[str, float]]) -> Any:
        """The tool's result, or None when the server died (then the next call respawns it)."""
        delay = None
        if pending and pending[0][0] == tool:
            delay = pending.pop()[1]
        try:
            return await self.server.call(tool, args, kill_after=delay)
        except ServerGone as exc:
            self.log.append(f"server killed during {tool}: {exc}")
            return None

    async def scenario(self, sc: Scenario) -> None:
        write_control(self.control.parent, **(OOM_CONTROL if sc.oom else {}))
        pending = [sc.server_kill] if sc.server_kill else []
        no_proxy = f"scenario-{sc.index}.invalid"
        run_id = await self._set_up(sc, pending, no_proxy)
        self.run_of[sc.index] = run_id
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._kill_supervisors, run_id, sc.supervisor_kills)
            await self._until_final(run_id, pending)
        # The supervisor leaves right after writing the final state; the next scenario rewrites the control file.
        deadline = time.monotonic() + 30
        while supervisors(run_id) and time.monotonic() < deadline:
            await anyio.sleep(0.1)

    async def _set_up(self, sc: Scenario, pending: list[tuple[str, float]], no_proxy: str) -> str:
        """Answer whatever get_session asks next until this scenario's run exists (bounded)."""
        for _ in range(40):
            got = await self.call("get_session", {}, pending)
            if got is None:
                continue
            session = got.structured_content
            assert not got.is_error and session is not None, result_text(got)
            state = session["state"]
            if state == "running":
                assert session["run_id"], session
                return str(session["run_id"])
            step: dict[str, tuple[str, dict[str, Any]]] = {
                "ask_container": ("select_container", {"name": "host"}),
                "ask_proxy": ("set_proxy", {"http_proxy": "无", "no_proxy": no_proxy}),
                "ask_features": ("choose_features", {"names": ["default"]}),
                "ready": ("start_training", {}),
            }
            assert state in step, f"scenario {sc.index}: unexpected session state {state!r}: {session}"
            tool, args = step[state]
            result = await self.call(tool, args, pending)
            if result is None:
                continue
            assert not result.is_error, f"scenario {sc.index}: {tool} refused: {result_text(result)}"
            out = result.structured_content
            assert out is not None
            if tool == "start_training":
                self.acked_runs[sc.index] = out["run_id"]
                return str(out["run_id"])
            question = {"select_container": "container", "set_proxy": "proxy", "choose_features": "features"}[tool]
            value = {"container": "host", "proxy": no_proxy, "features": ["default"]}[question]
            self.acked_answers.append((out["session_id"], question, value))
        raise AssertionError(f"scenario {sc.index}: the set-up did not converge: {self.log[-5:]}")

    async def _until_final(self, run_id: str, pending: list[tuple[str, float]]) -> None:
        deadline = time.monotonic() + SCENARIO_DEADLINE_S
        while True:
            got = await self.call("get_progress", {"run_id": run_id}, pending)
            if got is not None:
                assert not got.is_error, result_text(got)
                if got.structured_content and got.structured_content["status"] in FINAL:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"run {run_id} not final after {SCENARIO_DEADLINE_S:g} s:\n{explain(self, run_id)}"
                )
            await anyio.sleep(POLL_S)

    async def _kill_supervisors(self, run_id: str, delays: tuple[float, ...]) -> None:
        began = time.monotonic()
        for delay in delays:
            await anyio.sleep(max(0.0, began + delay - time.monotonic()))
            for proc in supervisors(run_id):
                if kill(proc.pid):
                    self.supervisor_kills += 1
                    self.log.append(f"supervisor {proc.pid} of {run_id} killed at +{delay:.2f} s")


def explain(lane: Lane, run_id: str) -> str:
    store = Store(lane.home / "state.db")
    try:
        row = store.run(run_id)
        lines = [f"run {run_id}: {row.status if row else None} reason={row.final_reason if row else None}"]
        for a in store.attempts(run_id):
            lines.append(f"  attempt {a.n}: {a.status} exit={a.exit_code} error={a.error} decision={a.decision}")
        lines += [f"  event {e.kind}: {e.message}" for e in store.events(run_id)]
    finally:
        store.close()
    for name in ("supervisor.log", "supervisor.out"):
        path = lane.home / "runs" / run_id / name
        if path.is_file():
            lines.append(f"--- {name} ---\n{path.read_text(errors='replace')[-3000:]}")
    return "\n".join(lines + lane.log[-10:])


def check_lane(lane: Lane, mine: list[Scenario]) -> dict[str, int]:
    """The invariants of one lane's store after all its scenarios; returns its figures."""
    store = Store(lane.home / "state.db")
    try:
        assert store.integrity_ok(), "state.db failed PRAGMA integrity_check"
        runs = store.runs(10_000)
        by_id = {r.id: r for r in runs}
        # 0 lost or duplicated runs: exactly one run per scenario, each its own session, no orphan session.
        assert len(runs) == len(mine) == len(set(lane.run_of.values())), (len(runs), len(mine), lane.run_of)
        assert set(lane.run_of.values()) == set(by_id)
        assert len({r.session_id for r in runs}) == len(runs)
        with sqlite3.connect(f"file:{lane.home / 'state.db'}?mode=ro", uri=True) as conn:
            sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        assert sessions == len(runs), f"{sessions} sessions for {len(runs)} runs (a crash left an orphan session)"
        # 0 lost answers: everything the client saw acknowledged is stored.
        for session_id, question, value in lane.acked_answers:
            answers = store.answers(session_id)
            assert question in answers, f"acknowledged {question} answer of {session_id} is lost"
            stored = answers[question]
            if question == "container":
                assert stored["name"] == value
            elif question == "proxy":
                assert stored["no_proxy"] == value
        for index, run_id in lane.acked_runs.items():
            assert run_id in by_id, f"acknowledged run {run_id} of scenario {index} is lost"
            assert lane.run_of[index] == run_id
        attempts_total = abandoned = 0
        for sc in mine:
            run_id = lane.run_of[sc.index]
            run = by_id[run_id]
            attempts = store.attempts(run_id)
            numbers = [a.n for a in attempts]
            assert numbers == list(range(1, len(attempts) + 1)), f"{run_id}: attempt numbers {numbers}"
            assert run.status == "succeeded", f"scenario {sc}:\n{explain(lane, run_id)}"
            assert attempts[-1].status == "succeeded", explain(lane, run_id)
            failed = [a for a in attempts[:-1] if a.status != "abandoned"]
            if sc.oom:
                assert "offload" in attempts[-1].config.effective, explain(lane, run_id)
                assert [a.error["category"] for a in failed if a.error] == ["gpu_oom"] * len(failed), explain(
                    lane, run_id
                )
                assert len(failed) == 1, f"one OOM, one relaunch:\n{explain(lane, run_id)}"
            else:
                assert failed == [], f"a healthy run had a failed attempt:\n{explain(lane, run_id)}"
            attempts_total += len(attempts)
            abandoned += len(attempts) - len(failed) - 1
        reattached = sum(
            (lane.home / "runs" / r / "supervisor.log").read_text(errors="replace").count("reattaching to attempt")
            for r in by_id
            if (lane.home / "runs" / r / "supervisor.log").is_file()
        )
        heals = sum(1 for r in by_id for e in store.events(r, limit=10_000) if e.kind == "supervisor_restarted")
    finally:
        store.close()
    return {"attempts": attempts_total, "abandoned_attempts": abandoned, "reattaches": reattached, "heals": heals}


async def test_sigkill_of_server_and_supervisor_loses_nothing(tmp_path: Path, host_verl_tree: Path) -> None:
    prepare_host_tree(host_verl_tree)
    plan = scenarios(N_RUNS, SEED)
    lanes: list[Lane] = []
    for i in range(LANES):
        home = tmp_path / f"lane{i}"
        control = home / "control" / "standin_control.json"
        control.parent.mkdir(parents=True)
        env = product_env(home, host_verl_tree, STANDIN_CONTROL=str(control))
        lanes.append(Lane(i, home, StdioServer(env, mode=("legacy", "auto")[i % 2]), control))
    began = time.monotonic()

    async def run_lane(lane: Lane) -> None:
        async with lane.server:
            for sc in plan[lane.index :: LANES]:
                await lane.scenario(sc)

    try:
        with LauncherWatch(under=str(host_verl_tree)) as watch:
            async with anyio.create_task_group() as tg:
                for lane in lanes:
                    tg.start_soon(run_lane, lane)
        elapsed = time.monotonic() - began
        assert not watch.violations, "more than one launcher alive at once: " + "\n".join(
            f"{run}: {watch.seen_together[run][:3]}\n{explain(lane, run)}"
            for run in watch.violations
            for lane in lanes
            if run in lane.run_of.values()
        )
        figures = [check_lane(lane, plan[lane.index :: LANES]) for lane in lanes]
        all_runs = [r for lane in lanes for r in lane.run_of.values()]
        assert not any(supervisors(r) for r in all_runs), "a supervisor outlived its run"
        assert not launchers(under=str(host_verl_tree)), "a launcher outlived its run"
    finally:
        end_runs(r for lane in lanes for r in lane.run_of.values())
    server_kills = sum(lane.server.kills for lane in lanes)
    record(
        "crash_safety", runs=len(plan), seed=SEED, seconds=round(elapsed, 1),
        server_kills=server_kills, server_starts=sum(lane.server.starts for lane in lanes),
        supervisor_kills=sum(lane.supervisor_kills for lane in lanes),
        oom_runs=sum(sc.oom for sc in plan), launcher_samples=watch.samples,
        max_launchers_per_run=max(watch.max_per_run.values(), default=0),
        lost_answers=0, lost_runs=0, duplicated_runs=0,
        **{k: sum(f[k] for f in figures) for k in figures[0]},
    )  # fmt: skip
    assert server_kills >= 1 and sum(lane.supervisor_kills for lane in lanes) >= 1
