"""A locked state.db never freezes the server (issue 20, finding 3).

Seen before the fix: another process holding a write transaction on ``state.db`` for 40 s made even read-only
tools wait 26-28 s, because the store's calls ran synchronously on the event loop with a 30 s busy timeout. Here a
real second process takes the lock (``BEGIN IMMEDIATE`` plus a write, as any SQLite client would) and keeps it; the
read-only tools must answer while it is still held, and a write must come back with "busy, retry" in bounded time
having changed nothing. A second case holds an exclusive lock (``locking_mode=EXCLUSIVE``), which blocks even WAL
readers: then reads too answer "busy, retry" in bounded time instead of hanging.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
from rel_helpers import record, result_text

from harness.records import run_spec
from mcp import Client
from verl_async_dapo.server import mcp
from verl_async_dapo.store import Store

LOCK_SECONDS = 25.0  # longer than every bound below: a tool that waits for the release shows up as a failure
BUSY_BOUND_SECONDS = 8.0  # the store waits 5 s for a lock, then says "busy, retry"
# The other process: any SQLite client holding a transaction with a write in it.
HOLDER = """
import sqlite3, sys, time
db, exclusive, seconds = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3])
c = sqlite3.connect(db, isolation_level=None)
if exclusive:
    c.execute("PRAGMA locking_mode=EXCLUSIVE")
c.execute("BEGIN EXCLUSIVE" if exclusive else "BEGIN IMMEDIATE")
c.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('ses_lock_holder', 0, 0)")
print("locked", flush=True)
time.sleep(seconds)
c.execute("ROLLBACK")
"""
READ_ONLY = (("get_session", {}), ("get_progress", {}), ("check_errors", {}), ("list_containers", {}))


@contextmanager
def locked(db: Path, *, exclusive: bool) -> Iterator[subprocess.Popen[str]]:
    """Another process holding a write transaction on ``db`` for LOCK_SECONDS (or until the block ends)."""
    argv = [sys.executable, "-c", HOLDER, str(db), "1" if exclusive else "0", str(LOCK_SECONDS)]
    holder = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def _seed(home: Path) -> str:
    """A session with its first answer and a finished run, written before anybody locks the file."""
    store = Store(home / "state.db")
    sid = store.create_session()
    store.set_answer(sid, "container", {"name": "host", "kind": "host", "created": False, "allow_shared_gpus": False})
    other = store.create_session()
    run_id = store.create_run(other, "host", run_spec("host"))
    store.update_run(run_id, status="succeeded", progress={"step": 3, "total_steps": 10}, ended_at=time.time())
    store.close()
    return sid


def _answers(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0])


async def test_read_only_tools_answer_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    home = Path(os.environ["VERL_ASYNC_DAPO_HOME"])
    _seed(home)
    db = home / "state.db"
    latencies: dict[str, float] = {}
    async with Client(mcp) as c:
        with locked(db, exclusive=False) as holder:
            for tool, args in READ_ONLY:
                start = time.monotonic()
                result = await c.call_tool(tool, args)
                latencies[tool] = time.monotonic() - start
                assert not result.is_error, (tool, result_text(result))
            start = time.monotonic()
            await c.read_resource("verl-async-dapo://session/current")
            latencies["session resource"] = time.monotonic() - start
            assert holder.poll() is None, "the lock was released before the read-only tools answered"
            assert max(latencies.values()) < 2.0, latencies  # reads under WAL do not wait for the writer
            # A write waits a bounded time, then says so and changes nothing.
            start = time.monotonic()
            result = await c.call_tool("set_proxy", {"http_proxy": "http://proxy.example:3128"})
            write_wait = time.monotonic() - start
            assert result.is_error and "busy" in result_text(result) and "Retry" in result_text(result)
            assert write_wait < BUSY_BOUND_SECONDS, write_wait
            assert holder.poll() is None, "the write waited for the release instead of answering"
            # While a write waits for the lock, the server is not frozen: a read answers meanwhile.
            waits: dict[str, float] = {}

            async def write() -> None:
                begun = time.monotonic()
                await c.call_tool("set_proxy", {"http_proxy": "http://proxy.example:3128"})
                waits["write"] = time.monotonic() - begun

            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await anyio.sleep(0.5)
                begun = time.monotonic()
                assert not (await c.call_tool("get_session", {})).is_error
                waits["read during the write"] = time.monotonic() - begun
                assert "write" not in waits, "the write did not wait: nothing was shown"
            assert waits["read during the write"] < 2.0, waits
        assert _answers(db) == 1, "the refused write changed the state"
        result = await c.call_tool("set_proxy", {"http_proxy": "http://proxy.example:3128"})
        assert not result.is_error, result_text(result)  # after the release the same call works
    record("store_lock_reads", lock_s=LOCK_SECONDS, max_read_s=round(max(latencies.values()), 3),
           write_busy_answer_s=round(write_wait, 2), read_during_blocked_write_s=round(waits["read during the write"], 3))  # fmt: skip


async def test_an_exclusive_lock_gets_busy_answers_not_a_frozen_server(tmp_path: Path) -> None:
    home = Path(os.environ["VERL_ASYNC_DAPO_HOME"])
    _seed(home)
    async with Client(mcp) as c:
        with locked(home / "state.db", exclusive=True) as holder:
            start = time.monotonic()
            result = await c.call_tool("get_session", {})
            waited = time.monotonic() - start
            assert result.is_error and "busy" in result_text(result), result_text(result)
            assert waited < BUSY_BOUND_SECONDS, waited
            # Tools that need no state answer at once meanwhile: the event loop is free.
            start = time.monotonic()
            tools = await c.list_tools()
            assert "get_session" in {t.name for t in tools.tools}
            assert time.monotonic() - start < 2.0
            assert holder.poll() is None
        result = await c.call_tool("get_session", {})
        assert not result.is_error, result_text(result)
    record("store_lock_exclusive", busy_answer_s=round(waited, 2))
