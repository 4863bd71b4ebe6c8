"""Benchmark 1: progress of a run whose log is 10 MiB, 100 MiB, 1 GiB, against the original skill's grep.

One real run (``verl-async-dapo start`` → detached supervisor → the verl stand-in in a container, a step every
few seconds, a long TRAIN_STEPS). For each size its attempt log is grown to that size with realistic verl blocks
(bench/loggen.py, inside the container) while the supervisor is ended, so it does not stream the filler; the next
``get_progress`` heals the run with a new supervisor, which reattaches at the log's last MiB. Then, on the same
file:

* ours, fresh path: ``runs.get_progress`` in-process (the supervisor's snapshot in the store) and the CLI
  ``verl-async-dapo status --json`` end to end;
* ours, stale path: the job is paused (SIGSTOP, a hung job: the supervisor stays alive but the snapshot stops
  moving) and its ``progress_at`` aged past the 30 s limit, so every call reads the log's tail from the container;
* theirs: ``docker exec C sh -c 'grep "Training Progress" /verl/train.log | tail -1'``.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from docker.models.containers import Container

from bench import common
from bench.common import Sample, State
from bench.loggen import GENERATOR

MIB = 1 << 20
SIZES = {"10 MiB": 10 * MIB, "100 MiB": 100 * MIB, "1 GiB": 1024 * MIB}
STEP_SECONDS = 3.0


@dataclass
class SizeResult:
    label: str
    size: int
    samples: dict[str, Sample] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProgressBench:
    results: list[SizeResult] = field(default_factory=list)
    exec_floor: Sample | None = None  # `docker exec C true`: the cost of any docker exec here
    after: Any = None  # what run(after=...) returned


def grow_log(container: Container, path: str, size: int) -> None:
    """Append realistic verl blocks until the file has ``size`` bytes (runs inside the container)."""
    common.log(f"growing {path} to {size >> 20} MiB")
    result = container.exec_run(["python3", "-c", GENERATOR, path, str(size)], demux=True)
    if result.exit_code != 0:
        raise RuntimeError(f"log generator failed: {(result.output[1] or b'').decode()[-1000:]}")


def _time_subprocess(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    began = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    elapsed = time.perf_counter() - began
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {proc.stderr[-500:]}")
    return elapsed, proc.stdout


async def _in_process(state: State, run_id: str, reps: int, expect_tail_reads: bool) -> tuple[Sample, dict[str, Any]]:
    """``runs.get_progress`` in this process, counting how often it fell back to reading the log tail."""
    from verl_async_dapo import runs

    original = runs.progress._progress_from_tail
    tail_reads = 0

    async def counting(handle: Any) -> Any:
        nonlocal tail_reads
        tail_reads += 1
        return await original(handle)

    runs.progress._progress_from_tail = counting  # type: ignore[assignment]
    ctx = state.ctx()
    sample = Sample("in-process")
    last: Any = None
    try:
        last = await runs.get_progress(ctx, run_id)  # warm-up (imports, SQLite page cache, docker client)
        tail_reads = 0
        for _ in range(reps):
            began = time.perf_counter()
            last = await runs.get_progress(ctx, run_id)
            sample.values.append(time.perf_counter() - began)
    finally:
        runs.progress._progress_from_tail = original  # type: ignore[assignment]
        ctx.close()
    if expect_tail_reads and tail_reads != reps:
        raise AssertionError(f"stale path: expected {reps} tail reads, saw {tail_reads}")
    if not expect_tail_reads and tail_reads:
        raise AssertionError(f"fresh path: expected no tail read, saw {tail_reads}")
    return sample, {"step": last.step if last else None, "status": last.status if last else None,
                    "tail_reads": tail_reads}  # fmt: skip


def _cli(state: State, run_id: str, reps: int) -> Sample:
    sample = Sample("cli")
    for _ in range(reps):
        elapsed, _ = _time_subprocess([common.CLI, "status", "--json", run_id], env=state.env)
        sample.values.append(elapsed)
    return sample


def _baseline(container: Container, reps: int) -> tuple[Sample, str]:
    sample = Sample("grep | tail -1")
    out = ""
    for _ in range(reps):
        elapsed, out = _time_subprocess(["docker", "exec", container.name, "sh", "-c", common.BASELINE_PROGRESS_SH])
        sample.values.append(elapsed)
    return sample, out.strip()


def _heal_and_wait_fresh(state: State, run_id: str) -> None:
    """One get_progress heals the run (a new supervisor reattaches); wait until it has written a snapshot."""
    from verl_async_dapo import runs

    began = time.time()
    ctx = state.ctx()
    try:
        anyio.run(runs.get_progress, ctx, run_id)

        def fresh() -> bool:
            row = ctx.store.run(run_id)
            return row is not None and row.progress_at is not None and row.progress_at > began

        common.wait_for(fresh, 60, "the new supervisor's first snapshot", interval=0.2)
    finally:
        ctx.close()


def _tqdm_step(line: str) -> int | None:
    found = re.search(r"Training Progress:.*?\|\s*(\d+)/(\d+)", line)
    return int(found.group(1)) if found else None


def _wait_for_live_step(state: State, container: Container, run_id: str) -> None:
    """After the filler, wait until the live run has written a step (its bar ends the log again) and the snapshot
    shows it."""

    def caught_up() -> bool:
        out = common.sh(container, common.BASELINE_PROGRESS_SH)
        theirs = _tqdm_step(out)
        ctx = state.ctx()
        try:
            row = ctx.store.run(run_id)
            ours = (row.progress or {}).get("step") if row else None
        finally:
            ctx.close()
        return theirs is not None and theirs < 100000 and ours == theirs

    common.wait_for(caught_up, 60, "the live run's next step", interval=0.5)


def _agreement(state: State, container: Container, run_id: str) -> dict[str, Any]:
    """Ours and the original command, back to back: the same step (a step may land in between: ±1)."""
    from verl_async_dapo import runs

    ctx = state.ctx()
    try:
        ours = anyio.run(runs.get_progress, ctx, run_id).step
    finally:
        ctx.close()
    theirs = _tqdm_step(common.sh(container, common.BASELINE_PROGRESS_SH))
    return {"ours_step": ours, "grep_step": theirs,
            "same": ours is not None and theirs is not None and abs(ours - theirs) <= 1}  # fmt: skip


def _age_snapshot(state: State, run_id: str, seconds: float) -> None:
    ctx = state.ctx()
    try:
        ctx.store.update_run(run_id, progress_at=time.time() - seconds)
    finally:
        ctx.close()


def measure_size(
    state: State, container: Container, run_id: str, label: str, size: int, *, reps_fast: int, reps_slow: int
) -> SizeResult:
    ctx = state.ctx()
    try:
        job = ctx.store.attempts(run_id)[-1].job
    finally:
        ctx.close()
    assert job is not None
    log_path = job["log_path"]
    pgid = common.job_pgid(container, state, run_id)
    common.kill_supervisor(state, run_id)
    common.sh(container, f"kill -STOP -{pgid}")  # the filler is history: the live run's lines come after it
    try:
        grow_log(container, log_path, size)
    finally:
        common.sh(container, f"kill -CONT -{pgid}", check=False)
    _heal_and_wait_fresh(state, run_id)
    _wait_for_live_step(state, container, run_id)
    actual = int(common.sh_output(container, f"stat -L -c %s {common.LOG_LINK}").strip())
    result = SizeResult(label, actual)
    common.log(f"{label}: log is {actual} bytes; measuring the fresh path")
    # Warm the page cache for the baseline, as a log being written is.
    common.sh(container, f"cat {common.LOG_LINK} > /dev/null")
    result.samples["theirs: grep | tail -1"], last_line = _baseline(container, reps_slow)
    result.samples["ours fresh: get_progress"], info = anyio.run(_in_process, state, run_id, reps_fast, False)
    result.samples["ours fresh: CLI status --json"] = _cli(state, run_id, reps_slow)
    result.checks["fresh"] = info
    result.checks["grep_last_line"] = last_line.strip()[-120:]
    result.checks["agree"] = _agreement(state, container, run_id)
    # Stale: a hung job (SIGSTOP) keeps the supervisor alive but its snapshot stops; age it past the limit.
    common.sh(container, f"kill -STOP -{pgid}")
    try:
        time.sleep(2.5)  # the supervisor writes its last snapshot at most every 2 s
        _age_snapshot(state, run_id, 120)
        common.log(f"{label}: measuring the stale path (tail read)")
        result.samples["ours stale: get_progress"], info = anyio.run(_in_process, state, run_id, reps_slow, True)
        result.samples["ours stale: CLI status --json"] = _cli(state, run_id, reps_slow)
        result.checks["stale"] = info
    finally:
        common.sh(container, f"kill -CONT -{pgid}", check=False)
    return result


def run(
    image: str,
    sizes: dict[str, int] | None = None,
    *,
    reps_fast: int = 30,
    reps_slow: int = 5,
    after: Callable[[State, Container, str], Any] | None = None,
) -> ProgressBench:
    """Benchmark 1; ``after(state, container, run_id)`` then runs on the same live run (benchmark 4 does)."""
    sizes = sizes or SIZES
    bench = ProgressBench()
    with common.bench_container(image, prefix="vad-bench-progress") as container, \
            common.isolated_state(TRAIN_STEPS="100000") as state:  # fmt: skip
        common.write_control(container, {"step_seconds": STEP_SECONDS})
        run_id = common.start_run(state, container)
        try:
            ctx = state.ctx()
            try:
                common.wait_for(lambda: (ctx.store.run(run_id).progress or {}).get("step"), 90,  # type: ignore[union-attr]
                                "the first step", interval=0.3)  # fmt: skip
            finally:
                ctx.close()
            floor = Sample("docker exec true")
            for _ in range(reps_slow):
                floor.values.append(_time_subprocess(["docker", "exec", container.name, "true"])[0])
            bench.exec_floor = floor
            for label, size in sizes.items():
                bench.results.append(
                    measure_size(state, container, run_id, label, size, reps_fast=reps_fast, reps_slow=reps_slow)
                )
            if after is not None:
                bench.after = after(state, container, run_id)
        finally:
            with contextlib.suppress(Exception):
                common.stop_run(state, run_id)
    return bench
