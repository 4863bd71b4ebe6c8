"""Container creation cannot hand out the host (issue 20, finding 2), through the real tool over MCP.

Seen before the fix: one ``select_container create`` call mounted ``/`` and ``/run`` (with ``docker.sock``)
read-write without asking. Now: system and home directories, their ancestors, anything holding a Docker socket and
symlinks resolving there are refused before Docker is touched; directories outside the allow-list need the user's
yes (a form, else ``confirm_mounts=true``); nothing changes on a refusal. Real files, a real unix socket.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import ok, refused, result_text
from test_mcp_elicitation import Form

MISSING_IMAGE = "vad-test:does-not-exist"


@pytest.fixture
def docker_socket_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory holding a real listening unix socket named like Docker's (as /run does)."""
    root = tmp_path / "looks-like-run"
    (root / "docker").mkdir(parents=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(root / "docker" / "docker.sock"))
    try:
        yield root
    finally:
        sock.close()


def _create(mounts: dict[str, str], **extra: Any) -> dict[str, Any]:
    # gpus "none" (this machine has none) needs allow_no_gpus; what these tests look at is the mount review.
    return {"create": {"name": "vad-mount-test", "image": MISSING_IMAGE, "gpus": "none", "mounts": mounts, **extra},
            "allow_no_gpus": True}  # fmt: skip


@pytest.mark.parametrize("host", ["/", "/etc", "/etc/ssl", "/run", "/var/run", "/proc", "/sys", "/boot", "/root",
                                  "/home", "/var", "/usr/bin", "/dev"])  # fmt: skip
async def test_system_directories_are_refused(connect: Callable[..., Any], host: str) -> None:
    if not Path(host).is_dir():
        pytest.skip(f"{host} does not exist here")
    async with connect() as c:
        message = await refused(c, "select_container", _create({host: "/host"}))
        assert "refusing to mount" in message and "hand out the host" in message, message
        assert (await ok(c, "get_session"))["session_id"] is None  # nothing was recorded


async def test_symlinks_are_judged_by_where_they_lead(connect: Callable[..., Any], tmp_path: Path) -> None:
    (tmp_path / "innocent").symlink_to("/")
    (tmp_path / "models").symlink_to("/etc")
    async with connect() as c:
        for link, target in (("innocent", "/"), ("models", "/etc")):
            message = await refused(c, "select_container", _create({str(tmp_path / link): "/data"}))
            assert f"resolves to {target}" in message, message
        assert (await ok(c, "get_session"))["session_id"] is None


async def test_a_directory_holding_a_docker_socket_is_refused(
    connect: Callable[..., Any], docker_socket_dir: Path
) -> None:
    async with connect() as c:
        message = await refused(c, "select_container", _create({str(docker_socket_dir): "/data"}))
        assert "docker.sock" in message, message
        assert (await ok(c, "get_session"))["session_id"] is None


async def test_outside_the_allow_list_without_a_form_needs_confirm(
    connect: Callable[..., Any], tmp_path: Path, docker_engine: None
) -> None:
    data = tmp_path / "my-data"
    data.mkdir()
    async with connect() as c:
        message = await refused(c, "select_container", _create({str(data): "/data"}))
        assert "confirm_mounts=true" in message and str(data) in message, message
        assert (await ok(c, "get_session"))["session_id"] is None
        # With the user's yes passed along, the mounts pass and the call goes on to Docker (the image is missing).
        message = await refused(c, "select_container", _create({str(data): "/data"}, writable=["/data"]) | {
            "confirm_mounts": True})  # fmt: skip
        assert MISSING_IMAGE in message and "mount" not in message.lower(), message


async def test_outside_the_allow_list_the_user_is_asked(
    connect: Callable[..., Any], tmp_path: Path, docker_engine: None
) -> None:
    data = tmp_path / "my-data"
    data.mkdir()
    declined = Form(content={"mount": False})
    async with connect(elicitation_callback=declined) as c:
        message = await refused(c, "select_container", _create({str(data): "/data"}))
        assert "declined" in message
        assert (await ok(c, "get_session"))["session_id"] is None
    assert len(declined.asked) == 1
    assert str(data) in declined.asked[0].message and "read-only" in declined.asked[0].message
    accepted = Form(content={"mount": True})
    async with connect(elicitation_callback=accepted) as c:
        result = await c.call_tool("select_container", _create({str(data): "/data"}))
        assert result.is_error and MISSING_IMAGE in result_text(result), result_text(result)
    assert len(accepted.asked) == 1


async def test_inside_the_allow_list_nobody_is_asked(
    connect: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_engine: None
) -> None:
    allowed = tmp_path / "datasets"
    (allowed / "gsm8k").mkdir(parents=True)
    monkeypatch.setenv("VERL_ASYNC_DAPO_MOUNT_ALLOW", f"/nonexistent:{allowed}")
    form = Form(content={"mount": True})
    async with connect(elicitation_callback=form) as c:
        result = await c.call_tool("select_container", _create({str(allowed / "gsm8k"): "/data"}))
        assert result.is_error and MISSING_IMAGE in result_text(result), result_text(result)
    assert form.asked == []
    # The allow-list never overrides a refusal.
    monkeypatch.setenv("VERL_ASYNC_DAPO_MOUNT_ALLOW", "/")
    async with connect() as c:
        assert "refusing to mount" in await refused(c, "select_container", _create({"/etc": "/x"}))
    assert os.environ["VERL_ASYNC_DAPO_MOUNT_ALLOW"] == "/"
