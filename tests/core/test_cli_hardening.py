"""The CLI's share of issue 20, finding 6: a proxy password never on the command line (``ps`` shows it to every
user), and ``status | head`` without a "Broken pipe" traceback. The real CLI as a subprocess, a real pipe, a pty."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.records import run_spec
from verl_async_dapo.store import Store

CLI = [sys.executable, "-m", "verl_async_dapo"]
PASSWORD = "s3cret-Proxy-pw-0123"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_ASYNC_DAPO_") and "proxy" not in k.lower()}
    env.update(VERL_ASYNC_DAPO_HOME=str(tmp_path / "state"), VERL_ASYNC_DAPO_CONFIG_DIR=str(tmp_path / "config"),
               SWANLAB_MODE="disabled")  # fmt: skip
    return env


@pytest.mark.parametrize("flag", ["--http-proxy", "--https-proxy"])
def test_a_proxy_password_on_the_command_line_is_refused(tmp_path: Path, flag: str) -> None:
    proc = subprocess.run([*CLI, "start", "--container", "host", flag, f"http://bob:{PASSWORD}@proxy.lan:3128"],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "ps" in proc.stderr and "HTTP_PROXY" in proc.stderr and "prompt" in proc.stderr, proc.stderr
    assert PASSWORD not in proc.stderr + proc.stdout
    assert not (tmp_path / "state" / "state.db").exists(), "a refused command line changed the state"


def test_help_says_where_a_proxy_password_goes(tmp_path: Path) -> None:
    out = subprocess.run([*CLI, "start", "--help"], env=_env(tmp_path), capture_output=True, text=True,
                         timeout=60, check=True).stdout  # fmt: skip
    text = " ".join(out.split())
    assert "visible to every user in ps" in text and "HTTP_PROXY" in text and "prompt" in text, out


def test_a_user_without_password_is_prompted_at_the_terminal_without_echo(tmp_path: Path) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on a terminal; a container that does not exist ends it after the prompt
        env = _env(tmp_path)
        os.execve(sys.executable, [*CLI, "start", "--container", "vad-no-such-container-h20", "--http-proxy",  # noqa: S606
                                   "http://bob@proxy.lan:3128"], env)  # fmt: skip
    seen = b""
    deadline = time.monotonic() + 60
    while b"password for proxy user bob" not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 1)[0]:
            seen += os.read(fd, 4096)
    assert b"password for proxy user bob at proxy.lan:3128" in seen, seen
    os.write(fd, PASSWORD.encode() + b"\n")
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child exited: the pty is closed
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    assert PASSWORD.encode() not in seen, "the password was echoed or printed"
    assert os.waitstatus_to_exitcode(status) != 0  # the container does not exist


def _closed_pipe() -> int:
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head` does once it has its lines
    return write_end


@pytest.mark.parametrize("command", [["plan", "--json"], ["status"], ["runs", "--json"]])
def test_a_closed_pipe_is_not_a_traceback(tmp_path: Path, command: list[str]) -> None:
    store = Store(tmp_path / "state" / "state.db")
    run_id = store.create_run(store.create_session(), "host", run_spec("host"))
    store.update_run(run_id, status="succeeded", progress={"step": 6, "total_steps": 6}, ended_at=time.time())
    store.close()
    write_end = _closed_pipe()
    try:
        proc = subprocess.run([*CLI, *command], env=_env(tmp_path), stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False)  # fmt: skip
    finally:
        os.close(write_end)
    assert "Broken pipe" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == 141, (proc.returncode, proc.stderr)
