"""docker exec plumbing: attached output streams that can be closed from any thread.

``exec_start(socket=True)`` hands us the hijacked connection. docker-py reads frames with
``poll()`` + ``recv()``, which no timeout interrupts (docker-py #272); shutting the socket down
wakes the reader, so both command timeouts and closing a ``follow`` iterator end cleanly.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from docker.api import APIClient
from docker.utils.socket import STDERR, STDOUT, frames_iter

from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.targets.base import COMMAND_NOT_FOUND, check_argv, check_env

# docker exec reports a missing program as exit 126 plus this text on the output stream.
_OCI_FAILED = b"OCI runtime exec failed"


def exec_env(env: Mapping[str, str] | None) -> list[str] | None:
    """Validated ``K=V`` list for exec_create (None when empty)."""
    checked = check_env(env)
    return [f"{k}={v}" for k, v in checked.items()] or None


class ExecStream:
    """One exec with its attached stdout/stderr; ``close`` is idempotent and thread-safe."""

    def __init__(self, api: APIClient, exec_id: str, sock: Any) -> None:
        self.api = api
        self.exec_id = exec_id
        self._sock = sock
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls,
        api: APIClient,
        container: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stderr: bool = True,
    ) -> ExecStream:
        exec_id = api.exec_create(
            container, check_argv(argv), stdout=True, stderr=stderr, environment=exec_env(env), workdir=cwd
        )["Id"]
        return cls(api, exec_id, api.exec_start(exec_id, socket=True))

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """(stream id, bytes) until the exec's output ends or the stream is closed."""
        try:
            for stream_id, data in frames_iter(self._sock, tty=False):
                if data:
                    yield stream_id, data
        except (OSError, ValueError):
            # A concurrent close() turns a blocked read into one of these; that is a normal end.
            if not self._closed:
                raise

    def stdout_chunks(self) -> Iterator[bytes]:
        for stream_id, data in self.frames():
            if stream_id == STDOUT:
                yield data

    def read_all(self, limit: int) -> tuple[bytes, bytes]:
        out, err = bytearray(), bytearray()
        for stream_id, data in self.frames():
            buf = err if stream_id == STDERR else out
            if len(buf) < limit:
                buf += data[: limit - len(buf)]
        return bytes(out), bytes(err)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        raw = getattr(self._sock, "_sock", self._sock)
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in poll()/recv()
        for closer in (self._sock, getattr(self._sock, "_response", None)):
            # Best-effort cleanup of an already shut socket.
            with contextlib.suppress(Exception):
                if closer is not None:
                    closer.close()

    def exit_code(self, wait: float = 5.0) -> int | None:
        """The exec's exit code; the output can end a moment before the daemon records it."""
        deadline = time.monotonic() + wait
        while True:
            info = self.api.exec_inspect(self.exec_id)
            if not info.get("Running") or time.monotonic() > deadline:
                return info.get("ExitCode")
            time.sleep(0.05)


def normalize_result(argv: Sequence[str], code: int | None, out: bytes, err: bytes) -> tuple[int, bytes, bytes]:
    """Map docker's 'exec failed' (126 + OCI text) to the shell convention: 127 = command not found."""
    if out.startswith(_OCI_FAILED):
        text = out.decode("utf-8", "replace").strip()
        if "chdir to cwd" in text:
            raise TargetError(f"cannot start {argv[0]!r}: the working directory does not exist ({text})")
        if "executable file not found" in text or "no such file or directory" in text:
            return COMMAND_NOT_FOUND, b"", f"{argv[0]}: command not found ({text})".encode()
        return code if code is not None else 126, b"", out
    return (code if code is not None else -1), out, err


def start_detached_exec(
    api: APIClient, container: str, argv: Sequence[str], *, env: Mapping[str, str], cwd: str
) -> str:
    """Create and start a detached exec; returns its id (valid until the daemon forgets it)."""
    exec_id = api.exec_create(
        container, check_argv(argv), stdout=False, stderr=False, environment=exec_env(env), workdir=cwd
    )["Id"]
    api.exec_start(exec_id, detach=True)
    return exec_id


def parse_ps(text: str) -> list[tuple[int, int, str]]:
    """Rows of ``ps -e -o pid=,pgid=,stat=`` as (pid, pgid, stat)."""
    rows: list[tuple[int, int, str]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            rows.append((int(parts[0]), int(parts[1]), parts[2]))
    return rows
