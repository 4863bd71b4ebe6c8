"""Key check outcomes against a real HTTP server on 127.0.0.1 that speaks SwanLab's login protocol."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from verl_async_dapo.swanlab import KeyCheck, SwanlabConfig, check_key

# The fake server's accepted key and user (see conftest.py); async tests run via asyncio_mode=auto.
GOOD_KEY = "good-key-0123456789abcdef"
USERNAME = "alice"
FakeSwanlab = Any  # conftest.FakeSwanlab; not imported, conftest modules aren't importable by name


def _cloud(host: str, key: str = GOOD_KEY) -> SwanlabConfig:
    return SwanlabConfig(mode="cloud", host=host, api_key=key)  # type: ignore[arg-type]


async def test_good_key_is_ok_with_username(fake_swanlab: FakeSwanlab) -> None:
    result = await check_key(_cloud(fake_swanlab.host))
    assert result == KeyCheck(status="ok", message=result.message, username=USERNAME)
    # The account name is the server's text: in its own field, not in our sentence (issue 20).
    assert USERNAME not in result.message and fake_swanlab.host in result.message
    [request] = fake_swanlab.requests
    assert (request.method, request.path, request.body) == ("POST", "/api/login/api_key", b"")
    assert request.headers["authorization"] == GOOD_KEY


async def test_wrong_key(fake_swanlab: FakeSwanlab) -> None:
    result = await check_key(_cloud(fake_swanlab.host, "wrong-key-xyz"))
    assert result.status == "wrong_key" and result.username is None
    assert "HTTP 401" in result.message and "api key is invalid" in result.message
    assert f"{fake_swanlab.host}/space/~/settings" in result.message  # where to get a new key
    assert "wrong-key-xyz" not in result.message


async def test_error_body_with_200_is_wrong_key(fake_swanlab: FakeSwanlab) -> None:
    fake_swanlab.behaviour = "error_body"
    result = await check_key(_cloud(fake_swanlab.host))
    assert result.status == "wrong_key" and "api key invalid" in result.message


async def test_closed_port_is_unreachable(closed_port: int) -> None:
    host = f"http://127.0.0.1:{closed_port}"
    result = await check_key(_cloud(host))
    assert result.status == "unreachable"
    assert host in result.message
    assert "SWANLAB_HOST" in result.message and "proxy" in result.message and "local" in result.message


async def test_dns_failure_is_unreachable() -> None:
    # The loopback-only guard makes this lookup fail exactly as a missing DNS name would.
    result = await check_key(_cloud("http://swanlab.invalid:8000"))
    assert result.status == "unreachable" and "http://swanlab.invalid:8000" in result.message


async def test_silent_server_times_out_as_unreachable(fake_swanlab: FakeSwanlab) -> None:
    fake_swanlab.behaviour = "slow"
    started = time.monotonic()
    result = await check_key(_cloud(fake_swanlab.host), timeout=0.5)
    assert result.status == "unreachable"
    assert time.monotonic() - started < 2.5


async def test_redirect_is_not_followed_so_the_key_stays_home(
    fake_swanlab: FakeSwanlab, make_fake_swanlab: Callable[[], FakeSwanlab]
) -> None:
    second_server = make_fake_swanlab()
    fake_swanlab.behaviour = "redirect"
    fake_swanlab.redirect_to = f"{second_server.host}/api/login/api_key"
    result = await check_key(_cloud(fake_swanlab.host))
    assert result.status == "error"
    assert "redirect" in result.message and f"SWANLAB_HOST={second_server.host}" in result.message
    assert second_server.requests == []  # the other host never saw the key
    assert len(fake_swanlab.requests) == 1


async def test_not_a_swanlab_server(fake_swanlab: FakeSwanlab) -> None:
    fake_swanlab.behaviour = "html"
    result = await check_key(_cloud(fake_swanlab.host))
    assert result.status == "error" and "not like the SwanLab API" in result.message


async def test_server_error(fake_swanlab: FakeSwanlab) -> None:
    fake_swanlab.behaviour = "server_error"
    result = await check_key(_cloud(fake_swanlab.host))
    assert result.status == "error" and "HTTP 500" in result.message


@pytest.mark.parametrize("mode", ["local", "disabled"])
async def test_local_and_disabled_are_skipped_without_network(mode: str, fake_swanlab: FakeSwanlab) -> None:
    result = await check_key(SwanlabConfig(mode=mode, host=fake_swanlab.host, api_key=GOOD_KEY))  # type: ignore[arg-type]
    assert result.status == "skipped" and mode in result.message
    assert fake_swanlab.requests == []


async def test_fake_server_speaks_the_sdk_protocol(fake_swanlab: FakeSwanlab) -> None:
    """The SDK's own login call gets the same answers, so the fake is a faithful stand-in."""
    from swanlab.sdk.internal.pkg.client.bootstrap import login_by_api_key

    good = login_by_api_key(base_url=f"{fake_swanlab.host}/api", api_key=GOOD_KEY, timeout=5)
    assert good["userInfo"]["username"] == USERNAME
    assert login_by_api_key(base_url=f"{fake_swanlab.host}/api", api_key="nope", timeout=5) is None
    sdk_request = fake_swanlab.requests[0]
    ours = await check_key(_cloud(fake_swanlab.host))
    assert ours.status == "ok"
    our_request = fake_swanlab.requests[-1]
    assert (our_request.method, our_request.path) == (sdk_request.method, sdk_request.path)
    assert our_request.headers["authorization"] == sdk_request.headers["authorization"] == GOOD_KEY
