"""The CLI as a person meets it: --help, `runs`, `stop`'s confirmation, `serve` in a terminal, a closed pipe.

Runs are real rows in a real state DB (created through the store, the way start freezes a session); the terminal is
a real pseudo-terminal (pty), the pipe a real pipe closed early by its reader.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.records import run_spec
from verl_async_dapo.context import AppContext
from verl_async_dapo.formats import from_whole_line, iso_time

CLI = [sys.executable, "-m", "verl_async_dapo"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "PATH": os.environ["PATH"], "VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"),
            "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "config"), "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}  # fmt: skip


def _ctx(env: dict[str, str]) -> AppContext:
    return AppContext(home=Path(env["VERL_ASYNC_DAPO_HOME"]), config_home=Path(env["VERL_ASYNC_DAPO_CONFIG_DIR"]),
                      env=env)  # fmt: skip


def _run(ctx: AppContext, target: str, status: str, *, took: float | None = None) -> str:
    sid = ctx.store.create_session()
    run_id = ctx.store.create_run(sid, target, run_spec(target))
    fields: dict[str, object] = {"status": status}
    if took is not None:
        fields["ended_at"] = ctx.store.run(run_id).created_at + took  # type: ignore[union-attr]
    ctx.store.update_run(run_id, **fields)
    return run_id


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def _in_terminal(env: dict[str, str], args: list[str], answer: bytes | None, wait_for: bytes) -> tuple[bytes, int | None]:
    """Run the CLI with a pty as stdin and stdout; type ``answer`` once ``wait_for`` shows. (screen, exit code)."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([*CLI, *args], env=env, stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    screen, deadline, answered = b"", time.monotonic() + 30, False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    screen += os.read(primary, 4096)
                except OSError:  # the child closed the terminal
                    break
            if wait_for in screen and not answered:
                answered = True
                if answer is None:
                    break
                os.write(primary, answer)
            if proc.poll() is not None and not ready:
                break
    finally:
        if proc.poll() is None:
            proc.terminate()
        code = proc.wait(timeout=30)
        os.close(primary)
    return screen, code


def test_help_lists_the_commands_without_the_internal_one(env: dict[str, str]) -> None:
    helped = _cli(env, "--help")
    assert helped.returncode == 0
    assert "==SUPPRESS==" not in helped.stdout and "\n    supervise" not in helped.stdout, helped.stdout
    for command in ("serve", "start", "status", "stop", "runs", "containers", "preflight"):
        assert f"\n    {command}" in helped.stdout, command


def test_runs_no_runs_yet_then_a_table_and_json(env: dict[str, str]) -> None:
    empty = _cli(env, "runs")
    assert empty.returncode == 0 and empty.stdout.startswith("no runs yet: start one with `verl-async-dapo start"), empty
    assert json.loads(_cli(env, "runs", "--json").stdout) == []
    ctx = _ctx(env)
    try:
        done = _run(ctx, "host", "succeeded", took=3725)
        started = ctx.store.run(done).created_at  # type: ignore[union-attr]
    finally:
        ctx.close()
    table = _cli(env, "runs").stdout.splitlines()
    assert table[0].split() == ["RUN", "STATUS", "TARGET", "STARTED", "(UTC)", "DURATION", "ATTEMPTS"], table
    assert table[1].split() == [done, "succeeded", "host", *iso_time(started).removesuffix("Z").split("T"),  # type: ignore[union-attr]
                                "1:02:05", "0"], table  # fmt: skip
    (row,) = json.loads(_cli(env, "runs", "--json").stdout)
    assert row["started_at"] == iso_time(started) and row["started_at"].endswith("Z")
    assert row["duration_seconds"] == pytest.approx(3725, abs=0.1) and row["ended_at"] is not None


def test_stop_needs_the_run_id_when_several_are_active(env: dict[str, str]) -> None:
    ctx = _ctx(env)
    try:
        first, second = _run(ctx, "host", "running"), _run(ctx, "c2", "running")
    finally:
        ctx.close()
    refused = _cli(env, "stop")
    assert refused.returncode == 1 and "2 runs are active" in refused.stderr and first in refused.stderr, refused
    assert "`verl-async-dapo stop RUN_ID`" in refused.stderr and "stop_training" not in refused.stderr
    stopped = _cli(env, "stop", second, "--json")  # the id names the run: a script needs no prompt
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["status"] == "stopped", stopped
    quiet = _cli(env, "stop")  # one active run left, but no terminal to ask in and no --yes
    assert quiet.returncode == 2 and f"verl-async-dapo stop {first}" in quiet.stderr and "--yes" in quiet.stderr
    ctx = _ctx(env)
    try:
        assert ctx.store.run(first).status == "running"  # type: ignore[union-attr]
    finally:
        ctx.close()


def test_stop_asks_in_a_terminal(env: dict[str, str]) -> None:
    ctx = _ctx(env)
    try:
        run_id = _run(ctx, "host", "running")
    finally:
        ctx.close()
    screen, code = _in_terminal(env, ["stop"], b"n\n", b"[y/N]")
    assert f"Stop training run {run_id} on host (running)?".encode() in screen, screen
    assert code == 1 and b"not stopped" in screen, screen
    screen, code = _in_terminal(env, ["stop"], b"y\n", b"[y/N]")
    assert code == 0 and f"{run_id}: stopped".encode() in screen, screen


def test_serve_in_a_terminal_says_it_waits_for_a_client(env: dict[str, str]) -> None:
    screen, _ = _in_terminal(env, ["serve"], None, b"waiting for an MCP client on stdin")
    assert b"waiting for an MCP client on stdin" in screen, screen
    assert b"claude mcp add" in screen


def test_no_broken_pipe_when_the_reader_stops_early(env: dict[str, str]) -> None:
    ctx = _ctx(env)
    try:
        for _ in range(300):  # more than a pipe buffer of output
            _run(ctx, "host", "succeeded", took=5)
    finally:
        ctx.close()
    shell = subprocess.run(["bash", "-c", '"$@" | head -n 1', "_", *CLI, "runs", "--limit", "300"], env=env,
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert shell.stdout.startswith("RUN "), shell
    assert "Broken pipe" not in shell.stderr and "Traceback" not in shell.stderr, shell.stderr


def test_the_log_tail_starts_at_a_whole_line() -> None:
    log = b"".join(b"line %04d ........................\n" % i for i in range(100))
    for size in (50, 64, 333, 1000):
        tail = from_whole_line(log[-(size + 1) :], size)
        assert len(tail) <= size and log.endswith(tail)
        assert tail.startswith(b"line "), tail[:40]
    assert from_whole_line(b"short\nfile\n", 64) == b"short\nfile\n"  # the whole file: nothing dropped
    assert from_whole_line(b"x" * 200, 64) == b"x" * 64  # one line longer than the window: shown cut
    assert from_whole_line(b"ab\ncdef\n", 5) == b"cdef\n"  # the window starts right after a newline: kept whole
