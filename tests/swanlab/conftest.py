"""Fixtures for the SwanLab tests: no network but 127.0.0.1, a clean SwanLab environment, and a
real HTTP server that answers like SwanLab's login endpoint.

(No ``__init__.py`` in this directory on purpose: a regular package named ``swanlab`` on
``sys.path`` would shadow the SDK.)
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

GOOD_KEY = "good-key-0123456789abcdef"
USERNAME = "alice"

_ALLOWED_HOSTS = {"127.0.0.1"}


class BlockedNetworkError(OSError):
    pass


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Refuse any connection or name lookup that isn't 127.0.0.1.

    A blocked name lookup raises ``gaierror`` exactly like a failed DNS query, which the
    unreachable-host test relies on; a blocked connect is recorded and fails the test.
    """
    blocked: list[Any] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def _allowed(address: Any) -> bool:
        return not isinstance(address, tuple) or address[0] in _ALLOWED_HOSTS  # AF_UNIX paths are local

    def connect(self: socket.socket, address: Any) -> None:
        if not _allowed(address):
            blocked.append(address)
            raise BlockedNetworkError(f"test guard: connection to {address!r} blocked")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if not _allowed(address):
            blocked.append(address)
            raise BlockedNetworkError(f"test guard: connection to {address!r} blocked")
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and name not in _ALLOWED_HOSTS:
            raise socket.gaierror(socket.EAI_NONAME, f"test guard: lookup of {name!r} blocked")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield blocked
    assert not blocked, f"a test tried to reach the network: {blocked}"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No SwanLab settings or proxies from the developer's shell leak into a test."""
    import os

    for name in list(os.environ):
        if name.startswith("SWANLAB_") or name.lower() in {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VERL_ASYNC_DAPO_CONFIG_DIR", str(tmp_path / "config"))
    # The SDK's credential dir (~/.swanlab) and its cwd-relative files (.swanlab/, swanlog/).
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-root"))
    monkeypatch.chdir(tmp_path)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeSwanlab:
    """A real HTTP server on 127.0.0.1 answering like ``POST /api/login/api_key``."""

    server: ThreadingHTTPServer
    requests: list[Recorded] = field(default_factory=list)
    behaviour: str = "normal"  # normal | redirect | html | error_body | echo | server_error | slow | hostile_error
    redirect_to: str = ""
    good_key: str = GOOD_KEY
    username: str = USERNAME
    hostile: str = ""  # the error message of behaviour "hostile_error" (text a hostile server sends back)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def _handler(fake_ref: list[FakeSwanlab]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def _send(self, code: int, body: bytes, content_type: str = "application/json", **headers: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(404, b'{"message": "not found"}')

        def do_POST(self) -> None:
            fake = fake_ref[0]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fake.requests.append(Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            if self.path != "/api/login/api_key":
                self._send(404, b'{"message": "not found"}')
                return
            if fake.behaviour == "redirect":
                self._send(307, b"", Location=fake.redirect_to)
                return
            if fake.behaviour == "html":
                self._send(200, b"<html>hello</html>", "text/html")
                return
            if fake.behaviour == "server_error":
                self._send(500, b'{"message": "boom"}')
                return
            if fake.behaviour == "slow":
                time.sleep(3)
            key = self.headers.get("authorization")
            if fake.behaviour == "echo":  # a careless server quoting the key back
                self._send(401, json.dumps({"message": f"bad key {key}"}).encode())
            elif fake.behaviour == "hostile_error":
                self._send(401, json.dumps({"code": "UNAUTHORIZED", "message": fake.hostile}).encode())
            elif fake.behaviour == "error_body":
                self._send(200, json.dumps({"code": "E401", "message": "api key invalid"}).encode())
            elif key == fake.good_key:
                reply = {
                    "sid": "sid-123",
                    "expiredAt": "2099-01-01T00:00:00.000Z",
                    "userInfo": {"username": fake.username, "name": "Alice"},
                }
                self._send(200, json.dumps(reply).encode())
            else:
                self._send(401, json.dumps({"code": "UNAUTHORIZED", "message": "api key is invalid"}).encode())

    return Handler


@pytest.fixture
def make_fake_swanlab() -> Iterator[Callable[[], FakeSwanlab]]:
    """Factory: each call starts another fake server; all are stopped at teardown."""
    started: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def start() -> FakeSwanlab:
        holder: list[FakeSwanlab] = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(holder))
        server.daemon_threads = True
        fake = FakeSwanlab(server)
        holder.append(fake)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((server, thread))
        return fake

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def fake_swanlab(make_fake_swanlab: Callable[[], FakeSwanlab]) -> FakeSwanlab:
    return make_fake_swanlab()


@pytest.fixture
def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
