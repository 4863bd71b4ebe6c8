"""Streamable HTTP: loopback by default with DNS-rebinding protection, a bearer token required on
every bind (generated 0600 on loopback when none is set), and a refusal to start off loopback
without one. Real server processes, real sockets."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from harness.http_server import free_port, generated_token, serve_argv
from harness.http_server import http_server as harness_http_server
from mcp import Client
from verl_async_dapo.exceptions import ServeConfigError
from verl_async_dapo.server.http import http_settings

TOKEN = "test-token-0123456789-abcdefghij"
WILDCARD = "0.0.0.0"  # noqa: S104 - the address under test (the server must refuse it)
INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
})  # fmt: skip


@contextmanager
def http_server(host: str, env: dict[str, str], tmp_path: Path) -> Iterator[int]:
    with harness_http_server(host, {**os.environ, **env, "VERL_ASYNC_DAPO_HOME": str(tmp_path / "state")},
                             tmp_path) as port:  # fmt: skip
        yield port


def post(host: str, port: int, *, host_header: str, headers: dict[str, str] | None = None) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("POST", "/mcp", body=INITIALIZE, headers={
        "Host": host_header, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        **(headers or {}),
    })  # fmt: skip
    status = conn.getresponse().status
    conn.close()
    return status


def test_off_loopback_without_a_token_the_server_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VERL_ASYNC_DAPO_HTTP_TOKEN"}
    env["VERL_ASYNC_DAPO_HOME"] = str(tmp_path / "state")
    proc = subprocess.run(serve_argv(WILDCARD, free_port("127.0.0.1")), env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode != 0
    assert "VERL_ASYNC_DAPO_HTTP_TOKEN" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("host", "env", "complaint"),
    [
        ("10.1.2.3", {}, "VERL_ASYNC_DAPO_HTTP_TOKEN"),
        (WILDCARD, {"VERL_ASYNC_DAPO_HTTP_TOKEN": TOKEN}, "VERL_ASYNC_DAPO_ALLOWED_HOSTS"),
        ("127.0.0.1", {"VERL_ASYNC_DAPO_HTTP_TOKEN": "short"}, "too short"),
    ],
)
def test_unsafe_http_settings_are_refused(host: str, env: dict[str, str], complaint: str) -> None:
    with pytest.raises(ServeConfigError, match=complaint):
        http_settings(host, 8765, env)


def test_off_loopback_hosts_are_explicit() -> None:
    security, token = http_settings("10.1.2.3", 8765, {"VERL_ASYNC_DAPO_HTTP_TOKEN": TOKEN})
    assert token == TOKEN
    assert security is not None and security.enable_dns_rebinding_protection
    assert security.allowed_hosts == ["10.1.2.3:8765", "10.1.2.3"]
    security, _ = http_settings("::", 9000, {"VERL_ASYNC_DAPO_HTTP_TOKEN": TOKEN,
                                             "VERL_ASYNC_DAPO_ALLOWED_HOSTS": "gpu.lan:9000"})  # fmt: skip
    assert security is not None and security.allowed_hosts == ["gpu.lan:9000"]


def test_loopback_default_blocks_dns_rebinding(tmp_path: Path) -> None:
    with http_server("127.0.0.1", {}, tmp_path) as port:
        auth = {"Authorization": f"Bearer {generated_token(os.environ)}"}
        assert post("127.0.0.1", port, host_header=f"127.0.0.1:{port}", headers=auth) == 200
        assert post("127.0.0.1", port, host_header=f"evil.example:{port}", headers=auth) == 421
        assert post("127.0.0.1", port, host_header=f"127.0.0.1:{port}",
                    headers={**auth, "Origin": "http://evil.example"}) == 403  # fmt: skip


def test_loopback_without_a_token_set_generates_one_and_requires_it(tmp_path: Path) -> None:
    """Issue 20: a loopback port is open to every local user; no token in the env is no longer no token."""
    with http_server("127.0.0.1", {}, tmp_path) as port:
        token_file = Path(os.environ["VERL_ASYNC_DAPO_CONFIG_DIR"]) / "http_token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert token_file.parent.stat().st_mode & 0o777 == 0o700
        token = generated_token(os.environ)
        assert len(token) >= 32
        assert post("127.0.0.1", port, host_header=f"127.0.0.1:{port}") == 401
        assert post("127.0.0.1", port, host_header=f"127.0.0.1:{port}", headers={"Authorization": "Bearer x"}) == 401
        for scheme in ("Bearer", "bearer", "BEARER"):  # RFC 9110: the scheme is case-insensitive
            assert post("127.0.0.1", port, host_header=f"127.0.0.1:{port}",
                        headers={"Authorization": f"{scheme} {token}"}) == 200  # fmt: skip
    log = next(tmp_path.glob("server-127.0.0.1-*.log")).read_text()
    assert str(token_file) in log, "the server must say where the token is"
    assert token not in log, "the server must never print the token"
    # A restart keeps the same token (clients keep working).
    with http_server("127.0.0.1", {}, tmp_path) as port:
        assert generated_token(os.environ) == token


@pytest.mark.parametrize("blank", [" ", "\t\n", "   "])
def test_a_whitespace_only_token_is_refused_at_start(blank: str) -> None:
    with pytest.raises(ServeConfigError, match="blank"):
        http_settings("127.0.0.1", 8765, {"VERL_ASYNC_DAPO_HTTP_TOKEN": blank})


def test_off_loopback_requires_the_bearer_token(tmp_path: Path) -> None:
    host = "127.0.0.2"  # a non-default bind address: the SDK's automatic protection does not apply here
    with http_server(host, {"VERL_ASYNC_DAPO_HTTP_TOKEN": TOKEN}, tmp_path) as port:
        good = f"{host}:{port}"
        assert post(host, port, host_header=good) == 401
        assert post(host, port, host_header=good, headers={"Authorization": "Bearer wrong-token"}) == 401
        assert post(host, port, host_header=good, headers={"Authorization": f"Bearer {TOKEN}"}) == 200
        assert post(host, port, host_header=f"evil.example:{port}", headers={"Authorization": f"Bearer {TOKEN}"}) == 421


async def test_mcp_client_over_http_on_loopback(tmp_path: Path) -> None:
    with http_server("127.0.0.1", {}, tmp_path) as port:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {generated_token(os.environ)}"})
        async with http, Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            assert "list_containers" in names
            session = await c.call_tool("get_session", {})
            assert not session.is_error
            assert session.structured_content is not None
            assert session.structured_content["next_question"] == "container"
