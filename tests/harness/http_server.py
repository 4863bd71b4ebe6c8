"""The MCP server over streamable HTTP as a real process, for the transport tests (tests/mcp, tests/reliability)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def generated_token(env: Mapping[str, str]) -> str:
    """The token a loopback server generated into its config dir (``VERL_ASYNC_DAPO_CONFIG_DIR`` of ``env``)."""
    return (Path(env["VERL_ASYNC_DAPO_CONFIG_DIR"]) / "http_token").read_text().strip()


def serve_argv(host: str, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "verl_async_dapo",
        "serve",
        "--transport",
        "http",
        "--host",
        host,
        "--port",
        str(port),
    ]


@contextmanager
def http_server(host: str, env: Mapping[str, str], log_dir: Path, start_timeout: float = 60.0) -> Iterator[int]:
    """``verl-async-dapo serve --transport http`` on ``host`` and a free port, with exactly ``env``; yields the port
    once it accepts connections (fails the test with the server's log if it exits or does not listen in time)."""
    port = free_port(host)
    log_path = log_dir / f"server-{host}-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(serve_argv(host, port), env=dict(env), stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + start_timeout
            while True:
                try:
                    socket.create_connection((host, port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"server did not start: {log_path.read_text()}")
                    time.sleep(0.1)
            yield port
        finally:
            proc.terminate()
            proc.wait(timeout=15)
