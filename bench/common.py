"""Shared plumbing for the benchmarks: the test image, labelled containers, isolated state, runs, statistics.

Everything talks to the real Docker Engine. Every container made here carries ``io.verl-async-dapo.test=1`` (so
the test suite's stale-container cleanup also finds it) and ``io.verl-async-dapo.bench=<pid>``, and is removed
when its ``with`` block ends. Processes started here are ended by their own pid only.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from docker.models.containers import Container

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "bench"
VENV_BIN = REPO / ".venv" / "bin"
CLI = str(VENV_BIN / "verl-async-dapo")
BUILD_IMAGE = REPO / "tests" / "harness" / "build_image.sh"

TEST_LABEL = "io.verl-async-dapo.test"
BENCH_LABEL = "io.verl-async-dapo.bench"
VERL_HOME = "/verl"
LOG_LINK = f"{VERL_HOME}/train.log"
# The original skill's progress command, as fixed text (peers.md: `grep "Training Progress" /verl/train.log | tail -1`).
BASELINE_PROGRESS_SH = f'grep "Training Progress" {LOG_LINK} | tail -1'

# Environment for every run the benchmarks start (the manual run that works, plus speed-ups that change no path).
RUN_ENV = {
    "FRAMEWORK": "fsdp",
    "SWANLAB_MODE": "disabled",
    "SAVE_FREQ": "2",
    "VERL_VERSION": "0.9.1",
    "TRAINER_GPUS": "1",
    "ROLLOUT_GPUS": "1",
    "ROLLOUT_TP": "1",
}
# Variables of the caller's shell that would change what a run does.
_SCRUB_PREFIXES = ("SWANLAB_", "VERL_ASYNC_DAPO_")
_SCRUB_NAMES = {
    "VERL_HOME", "MODE", "MODEL_PATH", "TRAIN_FILE", "VAL_FILE", "TRAIN_STEPS", "N_GPUS", "MAX_RESPONSE_LENGTH",
    "MAX_OOM_RETRIES", "USER_FEATURES", "ENABLE_OFFLOAD", "EXP_NAME", "CKPT_DIR", "HTTP_PROXY", "HTTPS_PROXY",
    "NO_PROXY", "ALL_PROXY",
}  # fmt: skip


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- statistics ---------------------------------------------------------------------------------------------------
@dataclass
class Sample:
    """Repeated timings of one thing (seconds)."""

    name: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def p90(self) -> float:
        if not self.values:
            return float("nan")
        ordered = sorted(self.values)
        return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]

    @property
    def minimum(self) -> float:
        return min(self.values) if self.values else float("nan")

    def summary(self) -> dict[str, Any]:
        return {"n": len(self.values), "median_s": self.median, "p90_s": self.p90, "min_s": self.minimum}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


def fmt_s(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "n/a"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def fmt_ratio(ratio: float) -> str:
    if ratio != ratio:
        return "n/a"
    return f"{ratio:.0f}×" if ratio >= 100 else f"{ratio:.2f}×" if ratio < 10 else f"{ratio:.1f}×"


# -- machine ------------------------------------------------------------------------------------------------------
def machine() -> dict[str, str]:
    mem_kib = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    try:
        docker_version = docker.from_env(timeout=30).version().get("Version", "?")
    except Exception as exc:  # a description, never a failure
        docker_version = f"unavailable ({type(exc).__name__})"
    cpu = "?"
    with contextlib.suppress(OSError):
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "?")  # fmt: skip
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "memory": f"{mem_kib / (1 << 20):.1f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "docker": docker_version,
        "load average at start": load,
    }


# -- image and containers -----------------------------------------------------------------------------------------
def test_image() -> str:
    """The test image tag (built or cached by tests/harness/build_image.sh: its last stdout line)."""
    proc = subprocess.run(["bash", str(BUILD_IMAGE)], capture_output=True, text=True, timeout=1800, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"build_image.sh exited {proc.returncode}: {proc.stderr[-2000:]}")
    return lines[-1].strip()


def client() -> docker.DockerClient:
    return docker.from_env(timeout=300)


@contextlib.contextmanager
def bench_container(image: str, *, prefix: str = "vad-bench") -> Iterator[Container]:
    """A running container of the test image (network none) with the model/data paths preflight checks; removed
    on exit whatever happens."""
    dc = client()
    name = f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    made = dc.containers.run(image, detach=True, name=name, network_mode="none",
                             labels={TEST_LABEL: "1", BENCH_LABEL: str(os.getpid())})  # fmt: skip
    try:
        sh(made, "mkdir -p /verl/models/Qwen3-8B /verl/data && touch /verl/data/dapo-math-17k.parquet "
                 "/verl/data/aime-2024.parquet")  # fmt: skip
        yield made
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            made.remove(force=True, v=True)


def sh(container: Container, script: str, *, check: bool = True) -> str:
    """Fixed bench-owned shell text in the container (never user input); returns stdout."""
    result = container.exec_run(["sh", "-c", script], demux=True)
    out, err = result.output or (None, None)
    text = (out or b"").decode("utf-8", "replace")
    if check and result.exit_code != 0:
        raise RuntimeError(f"`{script[:120]}` exited {result.exit_code}: {(err or b'').decode()[-800:]}")
    return text


def sh_output(container: Container, script: str, tries: int = 3) -> str:
    """``sh`` for a script that always prints (a size, a pid): an empty reply is an answer Docker lost (moby#27289,
    the product's DockerTarget asks again the same way), so it is asked again; a fresh-clone suite run once failed
    with ``int('')`` on a file size."""
    for _ in range(tries):
        text = sh(container, script)
        if text.strip():
            return text
    raise RuntimeError(f"`{script[:120]}` printed nothing in {tries} tries")


def write_control(container: Container, control: dict[str, Any]) -> None:
    """The stand-in's failure injection (<VERL_HOME>/standin_control.json)."""
    payload = json.dumps(control).replace("'", "")
    sh(container, f"printf '%s' '{payload}' > {VERL_HOME}/standin_control.json")


def mtime_ns(container: Container, paths: Sequence[str]) -> dict[str, float | None]:
    """Modification times (seconds, ns precision) of files inside the container; None when missing."""
    quoted = " ".join(f"'{p}'" for p in paths)
    out = sh(container, f"for p in {quoted}; do printf '%s ' \"$p\"; stat -c %.9Y \"$p\" 2>/dev/null || echo -; done",
             check=False)  # fmt: skip
    found: dict[str, float | None] = {}
    for line in out.splitlines():
        path, _, value = line.rpartition(" ")
        found[path] = float(value) if value not in ("", "-") else None
    return found


# -- isolated product state ---------------------------------------------------------------------------------------
@dataclass
class State:
    """A private VERL_ASYNC_DAPO_HOME (store, run dirs) and the environment for CLI calls and in-process services."""

    root: Path
    env: dict[str, str]

    def ctx(self) -> Any:
        from verl_async_dapo.context import AppContext

        return AppContext.from_environment(self.env)

    def cli(self, *args: str, timeout: float = 120.0, extra_env: dict[str, str] | None = None) -> str:
        proc = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout,
                              env={**self.env, **(extra_env or {})}, check=False)  # fmt: skip
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"verl-async-dapo {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc.stdout


@contextlib.contextmanager
def isolated_state(**extra: str) -> Iterator[State]:
    """State in a temp dir; the calling process's os.environ gets the same values (in-process services read it
    through AppContext/settings) and is restored afterwards."""
    root = Path(tempfile.mkdtemp(prefix="vad-bench-state-"))
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith(_SCRUB_PREFIXES) and k.upper() not in _SCRUB_NAMES}  # fmt: skip
    env.update(RUN_ENV)
    env.update({"VERL_ASYNC_DAPO_HOME": str(root / "state"), "VERL_ASYNC_DAPO_CONFIG_DIR": str(root / "config")})
    env.update(extra)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield State(root, env)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(root, ignore_errors=True)


def _store_rows(state: State, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Read the run store with plain SQLite, read-only and without migrating it: a 'before' run's CLI and
    supervisors (an older revision, older schema) own that store."""
    import sqlite3

    path = Path(state.env["VERL_ASYNC_DAPO_HOME"]) / "state.db"
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def run_status(state: State, run_id: str) -> str | None:
    rows = _store_rows(state, "SELECT status FROM runs WHERE id=?", (run_id,))
    return rows[0][0] if rows else None


def read_run(state: State, run_id: str) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any] | None]]]:
    """(spec, [(attempt n, error)]) of a run, straight from the store."""
    spec = _store_rows(state, "SELECT spec FROM runs WHERE id=?", (run_id,))
    attempts = _store_rows(state, "SELECT n, error FROM attempts WHERE run_id=? ORDER BY n", (run_id,))
    return json.loads(spec[0][0]), [(n, json.loads(e) if e else None) for n, e in attempts]


def start_run(state: State, container: Container) -> str:
    """``verl-async-dapo start --container C`` (the manual run that works, preflight skipped: VERL_VERSION is set);
    returns the run id."""
    out = state.cli("start", "--container", container.name, "--skip-preflight", "--json", timeout=180)
    return json.loads(out)["run_id"]


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def supervisor_pid(state: State, run_id: str) -> int | None:
    """The run's live supervisor pid (verified by its command line, so we never signal a reused pid)."""
    ctx = state.ctx()
    try:
        row = ctx.store.run(run_id)
        pid = row.supervisor_pid if row else None
    finally:
        ctx.close()
    if not pid:
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return pid if b"supervise" in cmdline and run_id.encode() in cmdline else None


def watchdog_pids(run_id: str) -> list[int]:
    """The run's supervisor watchdogs (``python -m …watchdog_process RUN_ID PID``), found by command line."""
    from verl_async_dapo.supervisor.watchdog import WATCHDOG_PROCESS

    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if WATCHDOG_PROCESS.encode() in cmdline and run_id.encode() in cmdline:
            found.append(int(proc.name))
    return found


def kill_supervisor(state: State, run_id: str) -> None:
    """End the run's detached supervisor (started by our `start`) by its pid and wait until its lock is free.

    Its watchdog goes first: it would start a new supervisor within a second of the old one's end, and the bench
    means to measure a run left without one until it heals the run itself."""
    from verl_async_dapo.supervisor.run_lock import supervisor_alive

    for watchdog in watchdog_pids(run_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(watchdog, signal.SIGTERM)
    pid = supervisor_pid(state, run_id)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    ctx = state.ctx()
    try:
        wait_for(lambda: not supervisor_alive(ctx, run_id), 15, "the supervisor to exit")
    finally:
        ctx.close()


def stop_run(state: State, run_id: str) -> None:
    with contextlib.suppress(Exception):
        state.cli("stop", run_id, "--json", timeout=60)


def job_pgid(container: Container, state: State, run_id: str) -> int:
    """The current attempt's process group (its pgid file inside the container)."""
    ctx = state.ctx()
    try:
        job = ctx.store.attempts(run_id)[-1].job
    finally:
        ctx.close()
    assert job is not None, "the attempt has no job yet"
    return int(sh_output(container, f"cat '{job['job_dir']}/pgid'").strip())


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of one process (its threads included), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def python_exe() -> str:
    return str(VENV_BIN / "python")


# The code before the performance changes recorded in RESULTS.md (the commit they were made on top of).
BEFORE_REV = "066a957"


@contextlib.contextmanager
def revision_tree(rev: str = BEFORE_REV) -> Iterator[str]:
    """The package as committed at ``rev`` (``git archive``, read-only), for before/after runs: yields a
    PYTHONPATH entry that shadows the editable install, so the CLI, the server and the supervisors it spawns run
    that code."""
    root = Path(tempfile.mkdtemp(prefix="vad-bench-rev-"))
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "skill"], capture_output=True,
                                 timeout=120, check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, timeout=120, check=True)
        yield str(root / "skill")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def head_commit() -> str:
    proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    return proc.stdout.strip() or "?"
