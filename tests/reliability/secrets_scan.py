"""The canary scanner of test_secrets.py: the session's canary secrets, the scanner and its samplers, a driver that
scans every tool result and resource a client is shown, and the scans of the CLI, the state and config dirs and the
live store. The scenario itself (which canary goes in where, what must hold afterwards) is in test_secrets.py.
(No ``__init__.py`` in this directory: pytest puts it on sys.path, so this module's name is unique in tests/.)
"""

from __future__ import annotations

import re
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.types import ElicitResult
from rel_helpers import FINAL, processes, result_text

from mcp import Client, MCPError
from verl_async_dapo.store import Store

HEX = uuid.uuid4().hex[:12]
K_ENV, K_FILE, K_ARG, K_FORM, K_WRONG, K_CLI = (f"vadcanary-{w}-{HEX}" for w in ("env", "file", "arg", "form",
                                                                              "wrong", "cli"))  # fmt: skip
P_ONE, P_TWO, P_CLI = (f"vadcanary-proxy{n}-{HEX}" for n in ("one", "two", "cli"))
U_GENERIC = f"vadcanary-unknown-{HEX}"  # printed by "the training", never given to the product
CANARY = re.compile(rb"vadcanary-[a-z]+-" + HEX.encode())
RUN_TIMEOUT_S = 120.0
STEADY = {"FRAMEWORK": "fsdp", "TRAIN_STEPS": "4", "SAVE_FREQ": "1", "TRAINER_GPUS": "1", "ROLLOUT_GPUS": "1",
          "ROLLOUT_TP": "1", "MAX_OOM_RETRIES": "0"}  # fmt: skip


def proxy(password: str) -> str:
    return f"http://user:{password}@127.0.0.1:3128"


class Leaks:
    """Where a canary was seen, with a little context."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.places = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def scan(self, where: str, data: bytes | str) -> None:
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        with self._lock:
            self.places += 1
            self.bytes += len(raw)
            for match in CANARY.finditer(raw):
                context = raw[max(0, match.start() - 80) : match.end() + 40].decode("utf-8", "replace")
                self.found.append(f"{where}: …{context}…")


@contextmanager
def sampling(name: str, fn: Callable[[], None], interval: float) -> Iterator[list[int]]:
    """Call ``fn`` every ``interval`` s in a thread while the block runs; yields [samples taken]."""
    stop, count = threading.Event(), [0]

    def loop() -> None:
        while not stop.is_set():
            try:
                fn()
                count[0] += 1
            except Exception as exc:  # a container that just went away, a vanished pid
                print(f"{name} sampler: {exc}", file=sys.stderr)
            stop.wait(interval)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield count
    finally:
        stop.set()
        thread.join(timeout=30)


class Form:
    def __init__(self, key: str) -> None:
        self.key, self.asked = key, 0

    async def __call__(self, _ctx: Any, _params: Any) -> ElicitResult:
        self.asked += 1
        return ElicitResult(action="accept", content={"api_key": self.key})


class Shown:
    """Every tool result and resource text the model could see, for the scan."""

    def __init__(self, client: Client, leaks: Leaks, era: str) -> None:
        self.c, self.leaks, self.era = client, leaks, era
        self.tools: set[str] = set()
        self.on_final: Callable[[], None] | None = None

    async def call(self, tool: str, args: dict[str, Any] | None = None, *, ok: bool = True) -> dict[str, Any]:
        result = await self.c.call_tool(tool, args or {})
        self.tools.add(tool)
        self.leaks.scan(f"{self.era} tool {tool}", result_text(result))
        assert result.is_error != ok, f"{tool}({args}): {result_text(result)}"
        return result.structured_content or {}

    async def resources(self, run_id: str | None) -> str:
        texts = []
        uris = ["verl-async-dapo://session/current"] + ([f"verl-async-dapo://runs/{run_id}/log"] if run_id else [])
        for uri in uris:
            try:
                read = await self.c.read_resource(uri)
                texts += [getattr(x, "text", "") for x in read.contents]
            except MCPError as exc:
                texts.append(str(exc))
        prompt = await self.c.get_prompt("start_dapo_training")
        texts += [getattr(m.content, "text", "") for m in prompt.messages]
        self.leaks.scan(f"{self.era} resources", "\n".join(texts))
        return "\n".join(texts)

    async def set_up(self, target: str, proxy_url: str | None) -> None:
        await self.call("list_containers")
        await self.call("select_container", {"name": target})
        await self.call("set_proxy", {"http_proxy": proxy_url, "https_proxy": proxy_url,
                                      "no_proxy": "127.0.0.1,localhost"} if proxy_url else {})  # fmt: skip
        await self.call("choose_features", {"names": ["default"]})
        await self.call("get_session")

    async def start(self) -> str:
        started = await self.call("start_training")
        return str(started["run_id"])

    async def until_final(self, run_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while (progress := await self.call("get_progress", {"run_id": run_id}))["status"] not in FINAL:
            assert time.monotonic() < deadline, progress
            await anyio.sleep(0.3)
        if self.on_final is not None:
            self.on_final()
        await self.call("check_errors", {"run_id": run_id})
        await self.call("stop_training", {"run_id": run_id, "confirm": True})  # already ended: says so
        await self.resources(run_id)
        return progress


def trainer_children(launcher_pid: int) -> list[int]:
    return [p.pid for p in processes() if p.ppid == launcher_pid]


def attempt_log(home: Path, run_id: str) -> Path:
    store = Store(home / "state.db")
    try:
        attempt = store.attempts(run_id)[-1]
        assert attempt.job, attempt
        return Path(attempt.job["log_path"])
    finally:
        store.close()


def cli(env: dict[str, str], leaks: Leaks, *args: str, codes: tuple[int, ...] = (0,)) -> str:
    proc = subprocess.run([sys.executable, "-m", "verl_async_dapo", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    leaks.scan(f"CLI {args[0]} stdout", proc.stdout)
    leaks.scan(f"CLI {args[0]} stderr", proc.stderr)
    assert proc.returncode in codes, f"{args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def wait_final(home: Path, run_id: str) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        store = Store(home / "state.db")
        try:
            row = store.run(run_id)
        finally:
            store.close()
        if row is not None and row.status in FINAL:
            return
        assert time.monotonic() < deadline, f"{run_id} not final"
        time.sleep(0.3)


def scan_files(leaks: Leaks, home: Path, config: Path) -> int:
    count = 0
    for root in (home, config):
        for path in sorted(root.rglob("*")):
            if not path.is_file():
                continue
            if path.parent == home / "secrets":  # the secret store: owner-only files, by design
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
                continue
            if path == config / "swanlab.json":  # the user's saved SwanLab setting: 0600, by design
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
                continue
            leaks.scan(str(path.relative_to(root.parent)), path.read_bytes())
            count += 1
    return count


def scan_db_live(leaks: Leaks, home: Path, seen: list[str]) -> None:
    """state.db with its WAL and SHM while a server holds the store open (closing the last connection checkpoints
    the WAL into the DB and deletes it)."""
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        path = home / name
        if path.is_file():
            leaks.scan(f"{name} (live)", path.read_bytes())
            seen.append(name)
