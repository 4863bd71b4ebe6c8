"""Benchmark 2: OOM reaction, from the stand-in's OOM traceback to the next attempt's process start.

Real runs (``verl-async-dapo start`` → detached supervisor → the stand-in in a container) with
``{"oom_at_step": 1, "oom_unless": []}``: every attempt hits a GPU OOM at step 1, so with MAX_OOM_RETRIES=3 each run
climbs the whole ladder (+offload, +recompute, token budget ×0.5) and yields 3 reactions. Timestamps come from the
files in the container (ns mtimes, one clock): the OOM time is the attempt log's mtime (the traceback is the last
thing the stand-in writes; the launcher writes ``rc`` beside, never into, the log), the start is the next attempt's
``started`` file (written by the launcher right before it execs the workload). No stand-in change was needed.

Also here: the naive baseline (the original skill's loop — poll every 30 s with ``kill -0`` and an OOM grep, then
cleanup, ``sleep 10``, relaunch — emulated against the same stand-in) and a profiler that runs the supervisor
in-process with every target call timed, to show where a reaction's time goes.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from docker.models.containers import Container

from bench import common
from bench.common import Sample, State

CONTROL = {"oom_at_step": 1, "oom_unless": [], "step_seconds": 0.2}
RELAUNCHES_PER_RUN = 3
ORIGINAL_POLL_S, ORIGINAL_SLEEP_S = 30.0, 10.0
FINAL = {"succeeded", "failed", "stopped"}


@dataclass
class Reaction:
    run_id: str
    attempt: int  # the attempt that hit the OOM
    oom_at: float  # its log's last write
    exited_at: float | None  # its rc file
    next_started_at: float  # the next attempt's `started` file

    @property
    def total(self) -> float:
        return self.next_started_at - self.oom_at

    @property
    def after_exit(self) -> float | None:
        return None if self.exited_at is None else self.next_started_at - self.exited_at


@dataclass
class OomBench:
    reactions: list[Reaction] = field(default_factory=list)
    naive: list[float] = field(default_factory=list)
    profile: list[dict[str, Any]] = field(default_factory=list)  # per relaunch: where the time went

    @property
    def sample(self) -> Sample:
        return Sample("ours", [r.total for r in self.reactions])

    def stats(self) -> dict[str, Any]:
        exits = [r.exited_at - r.oom_at for r in self.reactions if r.exited_at is not None]
        after = [r.after_exit for r in self.reactions if r.after_exit is not None]
        return {
            **self.sample.summary(),
            "median_exit_lag_s": statistics.median(exits) if exits else None,
            "median_after_exit_s": statistics.median(after) if after else None,
        }


def _reactions_of(container: Container, state: State, run_id: str) -> list[Reaction]:
    spec, attempts = common.read_run(state, run_id)
    spec_dir = spec["run_dir"]
    paths: list[str] = []
    for n, _ in attempts:
        base = f"{spec_dir}/attempt-{n}"
        paths += [f"{base}/train.log", f"{base}/rc", f"{base}/started"]
    times = common.mtime_ns(container, paths)
    found: list[Reaction] = []
    for n, error in attempts[:-1]:
        base, nxt = f"{spec_dir}/attempt-{n}", f"{spec_dir}/attempt-{n + 1}"
        oom, started = times.get(f"{base}/train.log"), times.get(f"{nxt}/started")
        if error and error.get("category") == "gpu_oom" and oom and started:
            found.append(Reaction(run_id, n, oom, times.get(f"{base}/rc"), started))
    return found


def _wait_final(state: State, run_id: str, timeout: float = 180) -> str:
    def final() -> str | None:
        status = common.run_status(state, run_id)
        return status if status in FINAL else None

    return common.wait_for(final, timeout, f"run {run_id} to end", interval=0.25)


def measure(
    image: str, samples: int = 20, *, naive: int = 0, profile: bool = False, pythonpath: str | None = None
) -> OomBench:
    """``pythonpath``: run the CLI and the supervisors from that tree (common.revision_tree: the code before)."""
    bench = OomBench()
    extra = {"PYTHONPATH": pythonpath} if pythonpath else {}
    with common.bench_container(image, prefix="vad-bench-oom") as container, \
            common.isolated_state(TRAIN_STEPS="6", MAX_OOM_RETRIES=str(RELAUNCHES_PER_RUN), **extra) as state:  # fmt: skip
        common.write_control(container, CONTROL)
        while len(bench.reactions) < samples:
            run_id = common.start_run(state, container)
            try:
                status = _wait_final(state, run_id)
            finally:
                common.stop_run(state, run_id)
            found = _reactions_of(container, state, run_id)
            if not found:
                raise RuntimeError(f"run {run_id} ended {status} without an OOM relaunch")
            bench.reactions += found
            common.log(f"OOM run {run_id}: {status}; reactions " + ", ".join(f"{r.total:.3f}s" for r in found))
        bench.reactions = bench.reactions[:samples]
        if profile:
            bench.profile = profile_supervisor(state, container)
        for _ in range(naive):
            bench.naive.append(naive_reaction(container))
            common.log(f"naive baseline reaction: {bench.naive[-1]:.2f} s")
    return bench


# -- the original skill's loop, emulated --------------------------------------------------------------------------
NAIVE_DIR = "/verl/.vad-naive"  # inside the container
# The stand-in launched the way the original run_dapo.sh does (`nohup python3 -m recipe.dapo.main_dapo … >> log &`
# plus a pid file); each attempt logs to its own file so its mtime is its OOM time, and `started` is touched right
# before the exec, like our launcher's.
NAIVE_LAUNCH = (
    f"mkdir -p {NAIVE_DIR}/$1 && cd /verl && echo $$ > {NAIVE_DIR}/pid && touch {NAIVE_DIR}/$1/started && "
    f"exec python3 -m recipe.dapo.main_dapo trainer.total_training_steps=6 >> {NAIVE_DIR}/$1/train.log 2>&1"
)
# One poll of the original loop: `kill -0 $pid` and, once the job is gone, check_oom (a case-insensitive grep).
NAIVE_POLL = (
    f"if kill -0 $(cat {NAIVE_DIR}/pid) 2>/dev/null; then echo running; "
    f"elif grep -qiE 'out of memory|OOM' {NAIVE_DIR}/$1/train.log; then echo oom; else echo done; fi"
)
NAIVE_CLEANUP = "command -v ray >/dev/null 2>&1 && ray stop --force; true"


def naive_reaction(container: Container) -> float:
    """One OOM → relaunch of the original loop (30 s polls, cleanup, ``sleep 10``), timed like ours."""
    common.sh(container, f"rm -rf {NAIVE_DIR} && mkdir -p {NAIVE_DIR}")
    container.exec_run(["sh", "-c", NAIVE_LAUNCH, "naive", "attempt-1"], detach=True)
    try:
        while True:
            time.sleep(ORIGINAL_POLL_S)
            result = container.exec_run(["sh", "-c", NAIVE_POLL, "naive", "attempt-1"])
            state = (result.output or b"").decode().strip()
            if state == "oom":
                break
            if state != "running":
                raise RuntimeError(f"naive baseline: the stand-in ended without an OOM ({state!r})")
        common.sh(container, NAIVE_CLEANUP)
        time.sleep(ORIGINAL_SLEEP_S)
        container.exec_run(["sh", "-c", NAIVE_LAUNCH, "naive", "attempt-2"], detach=True)
        log_path, started = f"{NAIVE_DIR}/attempt-1/train.log", f"{NAIVE_DIR}/attempt-2/started"
        times = common.wait_for(lambda: (t := common.mtime_ns(container, [log_path, started])) and all(t.values()) and t,
                                30, "the naive relaunch")  # fmt: skip
        return times[started] - times[log_path]
    finally:
        common.sh(container, f"kill $(cat {NAIVE_DIR}/pid) 2>/dev/null; true", check=False)


# -- profiler -------------------------------------------------------------------------------------------------------
@dataclass
class Span:
    name: str
    start: float
    end: float
    depth: int


def _instrument(spans: list[Span]) -> Callable[[], None]:
    """Wrap the supervisor's collaborators so every call records a wall-clock span; returns an undo function."""
    from verl_async_dapo import supervisor
    from verl_async_dapo.plans import prelaunch
    from verl_async_dapo.targets import docker as docker_target

    depth = {"n": 0}
    undo: list[Callable[[], None]] = []

    def wrap_async(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.time()
            depth["n"] += 1
            try:
                return await original(*args, **kwargs)
            finally:
                depth["n"] -= 1
                spans.append(Span(label, began, time.time(), depth["n"]))

        setattr(owner, name, wrapper)
        undo.append(lambda: setattr(owner, name, original))

    def wrap_sync(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.time()
            try:
                return original(*args, **kwargs)
            finally:
                spans.append(Span(label, began, time.time(), depth["n"]))

        setattr(owner, name, wrapper)
        undo.append(lambda: setattr(owner, name, original))

    cls = docker_target.DockerTarget
    for method in ("job_status", "read_tail", "stop_job", "start_detached", "paths_exist", "run", "_exec"):
        wrap_async(cls, method, f"target.{method}")
    for fn in ("validate_overrides",):
        if hasattr(prelaunch, fn):  # the supervisor's relaunch check (ValidationCache.result) calls it
            wrap_async(prelaunch, fn, fn)
    for fn in ("classify", "plan_for"):
        wrap_sync(supervisor, fn, fn)
    for method in ("_make_sure_dead", "_checkpointed_step"):
        wrap_async(supervisor.Supervisor, method, method)

    def restore() -> None:
        for item in reversed(undo):
            item()

    return restore


def profile_supervisor(state: State, container: Container) -> list[dict[str, Any]]:
    """One OOM run with the supervisor in this process and its calls timed; a breakdown per relaunch."""
    from verl_async_dapo import runs, supervisor
    from verl_async_dapo.cli import quickstart
    from verl_async_dapo.supervisor import run_lock

    spans: list[Span] = []
    restore = _instrument(spans)
    original_spawn = runs.start.spawn_supervisor  # where start_training looks it up
    runs.start.spawn_supervisor = lambda ctx, run_id: None  # type: ignore[assignment]
    ctx = state.ctx()
    try:
        args = argparse.Namespace(
            container=container.name, mode=None, framework=None, features=None, http_proxy=None, https_proxy=None,
            no_proxy=None, swanlab_mode=None, skip_preflight=True, allow_shared_gpus=False, allow_no_gpus=False,
            wait=False,
        )  # fmt: skip
        result = anyio.run(quickstart.start_from_cli, ctx, args)
        lock = run_lock.try_lock(run_lock.lock_path(ctx, result.run_id))
        try:
            anyio.run(supervisor.Supervisor(ctx, result.run_id).run)
        finally:
            if lock is not None:
                lock.close()
        reactions = _reactions_of(container, state, result.run_id)
    finally:
        runs.start.spawn_supervisor = original_spawn  # type: ignore[assignment]
        restore()
        ctx.close()
    breakdowns = []
    for r in reactions:
        begin = r.exited_at or r.oom_at
        window = [s for s in spans if begin - 0.5 <= s.start <= r.next_started_at]
        top = [s for s in window if s.depth == 0]
        by_name: dict[str, float] = {}
        for s in top:  # clipped at the next start (start_detached returns after the job is up)
            by_name[s.name] = by_name.get(s.name, 0.0) + (min(s.end, r.next_started_at) - max(s.start, begin))
        execs = [s for s in window if s.name == "target._exec"]
        first = min((s.start for s in window), default=r.next_started_at)
        breakdowns.append({
            "attempt": r.attempt,
            "total_s": r.total,
            "stand_in_exit_s": (r.exited_at - r.oom_at) if r.exited_at else None,
            "exit_to_first_call_s": first - (r.exited_at or r.oom_at),
            "calls_s": dict(sorted(by_name.items(), key=lambda kv: -kv[1])),
            "docker_execs": len(execs),
            "median_exec_s": statistics.median([s.end - s.start for s in execs]) if execs else None,
        })  # fmt: skip
    return breakdowns
