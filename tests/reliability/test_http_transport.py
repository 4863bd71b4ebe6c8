"""Streamable HTTP, beyond tests/mcp/test_mcp_http.py (which checks initialize against the token and the Host check):
here every kind of request after a legitimate session exists, against real server processes and sockets.

* off loopback (bound to 127.0.0.2 with ``VERL_ASYNC_DAPO_HTTP_TOKEN``): no request gets through without the exact
  bearer token — a ``tools/call`` on an established session, GET (the SSE stream), DELETE (session end), a 2026-era
  stateless call, other paths — whatever the spelling (no or another scheme, Basic, query string, other header,
  cookie, a prefix or an extension of the token); a cross-origin page with the token is refused too; nothing changes state.
* on loopback (no token set: the server generates one, tests/mcp/test_mcp_http.py): DNS rebinding is blocked for real calls, not just initialize: a ``tools/call`` with a
  foreign Host (421) or a foreign Origin (403, including ``null`` and look-alike hosts) changes nothing, while the
  loopback names and origins work;
* a token set on loopback is enforced there as well.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rel_helpers import record

from harness.http_server import generated_token
from harness.http_server import http_server as harness_http_server

TOKEN = "reliability-token-0123456789-abcdefghijkl"
LEGACY = "2025-11-25"


@dataclass
class Server:
    host: str
    port: int
    home: Path
    auth: dict[str, str]  # sent with every request: the generated loopback token, else nothing

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"

    def request(self, method: str, body: dict[str, Any] | None = None, *, path: str = "/mcp",
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:  # fmt: skip
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        base = {
            "Host": self.netloc,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **self.auth,
        }
        conn.request(
            method, path, body=json.dumps(body) if body is not None else None, headers={**base, **(headers or {})}
        )
        response = conn.getresponse()
        status, head = response.status, {k.lower(): v for k, v in response.getheaders()}
        raw = response.read(65536) if method != "GET" or status != 200 else b""
        conn.close()
        return status, head, _decode(raw)

    def sessions(self) -> int:
        db = self.home / "state.db"
        if not db.exists():
            return 0
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0])


def _decode(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace")
    for line in text.splitlines():  # an SSE response: the JSON is on the data: line
        if line.startswith("data:"):
            return json.loads(line[5:])
    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return text


@contextmanager
def http_server(tmp_path: Path, host: str, token: str | None) -> Iterator[Server]:
    home = tmp_path / f"state-{host}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_ASYNC_DAPO_")}
    env.update(VERL_ASYNC_DAPO_HOME=str(home), VERL_ASYNC_DAPO_CONFIG_DIR=str(tmp_path / "config"))
    if token:
        env["VERL_ASYNC_DAPO_HTTP_TOKEN"] = token
    with harness_http_server(host, env, tmp_path) as port:
        auth = {} if token else {"Authorization": f"Bearer {generated_token(env)}"}
        yield Server(host, port, home, auth)


def _initialize(server: Server, headers: dict[str, str]) -> dict[str, str]:
    """A legacy-era session: initialize + initialized; returns the headers every later call needs."""
    status, head, body = server.request("POST", {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "rel", "version": "0"}},
    }, headers=headers)  # fmt: skip
    assert status == 200, (status, body)
    session = {**headers, "Mcp-Session-Id": head["mcp-session-id"], "MCP-Protocol-Version": LEGACY}
    status, _, _ = server.request("POST", {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    assert status in (200, 202), status
    return session


def _tool(name: str, args: dict[str, Any], rid: int = 2) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": args}}


def test_off_loopback_no_request_passes_without_the_exact_token(tmp_path: Path) -> None:
    with http_server(tmp_path, "127.0.0.2", TOKEN) as server:
        good = {"Authorization": f"Bearer {TOKEN}"}
        session = _initialize(server, good)
        status, _, body = server.request("POST", _tool("select_container", {"name": "host"}), headers=session)
        assert status == 200 and not body["result"].get("isError"), body
        assert server.sessions() == 1  # the container answer

        without = {k: v for k, v in session.items() if k != "Authorization"}
        b64 = base64.b64encode(f"user:{TOKEN}".encode()).decode()
        spellings = {
            "none": {}, "no scheme": {"Authorization": TOKEN}, "other scheme": {"Authorization": f"Token {TOKEN}"},
            "basic": {"Authorization": f"Basic {b64}"}, "token with a suffix": {"Authorization": f"Bearer {TOKEN}x"},
            "prefix of the token": {"Authorization": f"Bearer {TOKEN[:-1]}"}, "empty": {"Authorization": "Bearer "},
            "other header": {"X-Api-Key": TOKEN}, "cookie": {"Cookie": f"token={TOKEN}"},
            "proxy header": {"Proxy-Authorization": f"Bearer {TOKEN}"},
        }  # fmt: skip
        refused = 0
        for name, extra in spellings.items():
            status, _, _ = server.request("POST", _tool("set_proxy", {}), headers={**without, **extra})
            assert status == 401, f"{name}: tools/call answered {status}"
            refused += 1
        for method, path, body in (("GET", "/mcp", None), ("DELETE", "/mcp", None),
                                   ("POST", f"/mcp?token={TOKEN}", _tool("set_proxy", {})),
                                   ("POST", "/", _tool("set_proxy", {})), ("GET", "/.well-known/oauth", None)):  # fmt: skip
            status, _, _ = server.request(method, body, path=path, headers=without)
            assert status == 401, f"{method} {path}: {status}"
            refused += 1
        # A stateless 2026-era call (no session) without the token.
        status, _, _ = server.request("POST", _tool("set_proxy", {}), headers={
            "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "set_proxy"})  # fmt: skip
        assert status == 401
        refused += 1
        # The token from a page of another origin (DNS rebinding with a stolen token) is refused too.
        status, _, _ = server.request(
            "POST", _tool("set_proxy", {}), headers={**session, "Origin": "http://evil.example"}
        )
        assert status == 403
        refused += 1
        assert server.sessions() == 1, "a refused request changed the state"
        # The session still works with the token: the refusals were about the requests, not a broken server.
        status, _, body = server.request("POST", _tool("set_proxy", {}, rid=3), headers=session)
        assert status == 200 and not body["result"].get("isError"), body
        assert server.sessions() == 2
    record("http_token", refused_requests=refused, accepted_with_token=3)


def test_loopback_blocks_dns_rebinding_for_real_calls(tmp_path: Path) -> None:
    with http_server(tmp_path, "127.0.0.1", None) as server:
        port = server.port
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            assert server.request("POST", {"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers={"Host": host})[0] in (
                200, 202, 400,
            ), host  # fmt: skip
        session = _initialize(server, {})
        refused = 0
        for host in (f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", f"localhost.evil.example:{port}",
                     "evil.example", f"127.0.0.2:{port}", f"0.0.0.0:{port}"):  # fmt: skip
            status, _, _ = server.request("POST", _tool("select_container", {"name": "host"}),
                                          headers={**session, "Host": host})  # fmt: skip
            assert status == 421, f"Host {host}: {status}"
            refused += 1
        for origin in ("http://evil.example", "null", f"http://127.0.0.1.evil.example:{port}",
                       f"http://evil.example:{port}", "file://", f"http://localhost.evil.example:{port}"):  # fmt: skip
            status, _, _ = server.request("POST", _tool("select_container", {"name": "host"}),
                                          headers={**session, "Origin": origin})  # fmt: skip
            assert status == 403, f"Origin {origin}: {status}"
            refused += 1
        assert server.sessions() == 0, "a cross-site request changed the state"
        for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            status, _, body = server.request("POST", _tool("get_session", {}), headers={**session, "Origin": origin})
            assert status == 200 and not body["result"].get("isError"), (origin, body)
        status, _, body = server.request("POST", _tool("select_container", {"name": "host"}), headers=session)
        assert status == 200 and not body["result"].get("isError"), body
        assert server.sessions() == 1
    record("http_loopback", refused_requests=refused)


def test_a_token_set_on_loopback_is_enforced_there_too(tmp_path: Path) -> None:
    with http_server(tmp_path, "127.0.0.1", TOKEN) as server:
        status, _, _ = server.request("POST", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "rel", "version": "0"}}})  # fmt: skip
        assert status == 401
        session = _initialize(server, {"Authorization": f"Bearer {TOKEN}"})
        without = {k: v for k, v in session.items() if k != "Authorization"}
        assert server.request("POST", _tool("select_container", {"name": "host"}), headers=without)[0] == 401
        assert server.sessions() == 0
