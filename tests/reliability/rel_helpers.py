"""Helpers for the reliability tests: the product's processes (a stdio server driven by the SDK's client, the CLI),
the processes it leaves running (supervisors, launchers) as /proc shows them, and the figures the tests report.

Nothing here stands in for product code: servers, supervisors and the CLI are the real ``python -m
verl_async_dapo`` processes; the verl stand-in (tests/standin) is the only double. Every wait is bounded.
(No ``__init__.py`` in this directory: pytest puts it on sys.path, so this module's name is unique in tests/.)
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from harness.standin_files import parquet_bytes, write_model
from mcp import Client

TESTS_DIR = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
FINAL = frozenset({"succeeded", "failed", "stopped"})
LARGE = os.environ.get("VAD_RELIABILITY_LARGE", "") == "1"
SEED = int(os.environ.get("VAD_RELIABILITY_SEED", "20261129"))
REPORT_ENV = "VAD_RELIABILITY_REPORT"  # a JSON-lines file the tests append their figures to

# Variables of the developer's shell a product process may inherit (never proxies, SwanLab or training settings).
_PASSTHROUGH = ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME", "TERM", "VERL_ASYNC_DAPO_ALLOW_NO_GPUS",
                "VERL_ASYNC_DAPO_WATCHDOG")  # fmt: skip


def record(test: str, **figures: Any) -> None:
    """Print the figures of a test (visible with -s / in -rA) and append them to $VAD_RELIABILITY_REPORT."""
    line = json.dumps({"test": test, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **figures}, sort_keys=True)
    print(f"\nRELIABILITY {line}")
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def result_text(result: CallToolResult) -> str:
    """Everything a tool result shows the model: every text block plus the structured content."""
    texts = [getattr(block, "text", "") for block in result.content]
    return "\n".join(texts) + "\n" + json.dumps(result.structured_content, ensure_ascii=False)


def is_bare_crash(tool: str, result: CallToolResult) -> bool:
    """The SDK's sanitized text for an unexpected exception in a tool: ``Error executing tool X`` and nothing else."""
    if not result.is_error:
        return False
    text = "\n".join(getattr(block, "text", "") for block in result.content).strip()
    return text in (f"Error executing tool {tool}", f"Error executing tool {tool}:") or not text


def swanlab_fixtures() -> Any:
    """tests/swanlab/conftest.py as a module (its fake SwanLab login server and GOOD_KEY), loaded once."""
    name = "vad_tests_swanlab_fixtures"
    if name in sys.modules:
        return sys.modules[name]
    path = TESTS_DIR / "swanlab" / "conftest.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


# -- the verl stand-in on the host target ----------------------------------------------------------------------
def prepare_host_tree(tree: Path) -> None:
    """The model and data paths preflight checks for (empty files are enough for the stand-in)."""
    write_model(tree / "models" / "Qwen3-8B")
    (tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (tree / "data" / name).write_bytes(parquet_bytes())


def write_control(tree: Path, **control: Any) -> None:
    """The stand-in's failure injection (schema: tests/standin/entry/standin_control.py)."""
    path = tree / "standin_control.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(control), "utf-8")
    tmp.replace(path)  # the stand-in never reads half a file


def product_env(home: Path, tree: Path | None = None, **extra: str) -> dict[str, str]:
    """A clean environment for a product process: own state/config dirs, the venv's python first on PATH (the
    host target runs the stand-in with ``python3``, which needs hydra), a short fast training on the host."""
    env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
        VERL_ASYNC_DAPO_HOME=str(home),
        VERL_ASYNC_DAPO_CONFIG_DIR=str(home / "config"),
        SWANLAB_ROOT=str(home / "swanlab-root"),
        PYTHONUNBUFFERED="1",
    )
    if tree is not None:
        env.update(VERL_HOME=str(tree), FRAMEWORK="fsdp", TRAIN_STEPS="6", SAVE_FREQ="1", TRAINER_GPUS="1",
                   ROLLOUT_GPUS="1", ROLLOUT_TP="1", STANDIN_STEP_SECONDS="0.02", SWANLAB_MODE="disabled")  # fmt: skip
    if os.environ.get("DOCKER_HOST") and "DOCKER_HOST" not in extra:
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    env.update(extra)
    return env


# -- processes, as /proc shows them -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    state: str
    argv: tuple[str, ...]


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def processes() -> list[Proc]:
    """Every live (non-zombie) process on this machine with its argv."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _read(f"/proc/{entry.name}/stat")
        cmdline = _read(f"/proc/{entry.name}/cmdline")
        if not stat or not cmdline:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        state = fields[0].decode()
        if state in ("Z", "X"):
            continue
        argv = tuple(a.decode("utf-8", "replace") for a in cmdline.rstrip(b"\0").split(b"\0"))
        found.append(Proc(int(entry.name), int(fields[1]), int(fields[2]), state, argv))
    return found


def all_cmdlines() -> dict[int, bytes]:
    """Raw /proc/*/cmdline of every process (for secret scans)."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            data = _read(f"/proc/{entry.name}/cmdline")
            if data:
                out[int(entry.name)] = data
    return out


def environ_has(pid: int, needle: str) -> bool:
    data = _read(f"/proc/{pid}/environ")
    return data is not None and needle.encode() in data.split(b"\0")


def supervisors(run_id: str, procs: list[Proc] | None = None) -> list[Proc]:
    """Live ``verl_async_dapo supervise <run_id>`` processes.

    A supervisor is spawned as the leader of its own session (``start_new_session``), so pid == pgid. Its fork
    children (the launcher, ``nvidia-smi``, ``docker``… between fork and exec) show the same argv for a moment:
    under load a CI run counted one of them as a second supervisor (state R, ppid the supervisor, same pgid).
    """
    return [p for p in (procs if procs is not None else processes())
            if "verl_async_dapo" in p.argv and "supervise" in p.argv and run_id in p.argv
            and p.pid == p.pgid]  # fmt: skip


def launcher_job_dir(proc: Proc) -> str | None:
    """The job dir of a detached launcher (``bash -c LAUNCHER vad-launch JOB_DIR LOG -- argv``), else None.

    The launcher leads its own process group (``setsid``); its short-lived fork children (``mkdir``, ``date``, the
    workload before exec) show the same argv for a moment but are not launchers.
    """
    if not proc.argv or os.path.basename(proc.argv[0]) != "bash" or "vad-launch" not in proc.argv:
        return None
    if proc.pid != proc.pgid:
        return None
    i = proc.argv.index("vad-launch")
    return proc.argv[i + 1] if i + 1 < len(proc.argv) else None


def run_of_job_dir(job_dir: str) -> str | None:
    """run_… from ``<VERL_HOME>/.verl-async-dapo/runs/<run_id>/attempt-N``."""
    parts = job_dir.rstrip("/").split("/")
    return parts[-2] if len(parts) >= 2 and parts[-2].startswith("run_") else None


def launchers(procs: list[Proc] | None = None, under: str = "") -> dict[str, list[int]]:
    """run_id → pids of its live launcher shells (job dirs under ``under``)."""
    by_run: dict[str, list[int]] = {}
    for p in procs if procs is not None else processes():
        job_dir = launcher_job_dir(p)
        run_id = run_of_job_dir(job_dir) if job_dir and job_dir.startswith(under) else None
        if run_id:
            by_run.setdefault(run_id, []).append(p.pid)
    return by_run


def kill(pid: int, sig: int = signal.SIGKILL) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@dataclass
class LauncherWatch:
    """Samples /proc in a thread: the most launchers ever seen alive at once for one run, and the supervisors."""

    under: str  # only launchers whose job dir is below this path (our VERL_HOMEs)
    interval: float = 0.1
    max_per_run: dict[str, int] = field(default_factory=dict)
    seen_together: dict[str, list[list[str]]] = field(default_factory=dict)  # run → job dirs alive at once
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> LauncherWatch:
        self._thread = threading.Thread(target=self._loop, name="launcher-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            procs = processes()
            for run_id, pids in launchers(procs, under=self.under).items():
                self.max_per_run[run_id] = max(self.max_per_run.get(run_id, 0), len(pids))
                if len(pids) > 1:
                    dirs = [launcher_job_dir(p) or "?" for p in procs if p.pid in pids]
                    self.seen_together.setdefault(run_id, []).append(dirs)
            self.samples += 1

    @property
    def violations(self) -> dict[str, int]:
        return {run: n for run, n in self.max_per_run.items() if n > 1}


# -- a stdio server that can be killed ----------------------------------------------------------------------------
class ServerGone(Exception):
    """The stdio server died (we killed it) before answering."""


class StdioServer:
    """``python -m verl_async_dapo serve`` driven by the SDK's stdio client; ``kill()`` sends it SIGKILL.

    ``call`` returns the tool result, or raises ServerGone when the connection died before the answer; the next
    ``call`` starts a new server process (as a host respawns a crashed stdio server). Each connection lives in a
    task of its own (``async with StdioServer(...)``), so a dying connection cancels nothing of the caller's.
    """

    def __init__(self, env: dict[str, str], *, mode: str = "legacy") -> None:
        self.env = env
        self.mode = mode
        self.starts = 0
        self.kills = 0
        self.pid: int | None = None
        self._client: Client | None = None
        self._done: anyio.Event | None = None
        self._ended: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack = AsyncExitStack()
        self._marker = ""
        self.last_error: Exception | None = None

    async def __aenter__(self) -> StdioServer:
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
        await self._stack.aclose()

    async def _connection(self, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
        self._marker = uuid.uuid4().hex
        env = {**self.env, "VAD_RELIABILITY_SERVER": self._marker}
        params = StdioServerParameters(command=sys.executable, args=["-m", "verl_async_dapo", "serve"], env=env)
        done, ended = anyio.Event(), anyio.Event()
        self._done, self._ended = done, ended
        try:
            async with Client(params, mode=self.mode) as client:
                task_status.started(client)
                await done.wait()
        except Exception as exc:  # the server died under the client (we killed it): the caller sees ServerGone
            self.last_error = exc
        finally:
            ended.set()

    async def _connect(self) -> Client:
        if self._client is None:
            assert self._tg is not None, "use `async with StdioServer(...)`"
            self._client = await self._tg.start(self._connection)
            self.starts += 1
            self.pid = self._find_pid()
        return self._client

    def _find_pid(self) -> int | None:
        needle = f"VAD_RELIABILITY_SERVER={self._marker}"
        for p in processes():
            if "serve" in p.argv and "verl_async_dapo" in p.argv and environ_has(p.pid, needle):
                return p.pid
        return None

    async def close(self) -> None:
        """End the connection (the SDK closes stdin, then terminates the server) and wait for it."""
        self._client = None
        if self._done is not None and self._ended is not None:
            self._done.set()
            with anyio.move_on_after(20, shield=True):
                await self._ended.wait()
        self._done = self._ended = None

    def kill(self) -> bool:
        pid = self.pid
        if pid is None:
            return False
        self.kills += 1
        return kill(pid)

    async def call(self, tool: str, args: dict[str, Any] | None = None, *, kill_after: float | None = None,
                   timeout: float = 120.0) -> CallToolResult:  # fmt: skip
        client = await self._connect()
        killed = False

        async def killer() -> None:
            nonlocal killed
            assert kill_after is not None
            await anyio.sleep(kill_after)
            killed = self.kill()

        try:
            async with anyio.create_task_group() as tg:
                if kill_after is not None:
                    tg.start_soon(killer)
                with anyio.fail_after(timeout):
                    result = await client.call_tool(tool, args or {})
                # A kill due after the answer still happens (a kill between calls): the group waits for it.
        except Exception as exc:
            await self.close()
            if killed or self.pid is None or not _alive(self.pid):
                raise ServerGone(f"{tool}: {type(exc).__name__}: {exc}") from exc
            raise
        if killed:
            await self.close()
        return result

    async def ok(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self.call(tool, args)
        assert not result.is_error, f"{tool}({args}) failed: {result_text(result)}"
        assert result.structured_content is not None
        return result.structured_content


def _alive(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    return bool(stat) and stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")  # type: ignore[index]


def end_runs(run_ids: Iterator[str] | list[str]) -> int:
    """Test cleanup: SIGKILL what is still alive of these runs on this machine (their supervisors, and the process
    groups of their launchers on the host target). Returns how many were killed."""
    ids = set(run_ids)
    procs = processes()
    n = 0
    for run_id in ids:
        for p in supervisors(run_id, procs):
            n += kill(p.pid)
    for p in procs:
        job_dir = launcher_job_dir(p)
        if job_dir and run_of_job_dir(job_dir) in ids:
            kill_group(p.pgid)
            n += 1
    return n
