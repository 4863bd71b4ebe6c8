"""Container creation cannot hand out the host (issue 20, finding 2), through the real tool over MCP.

Seen before the fix: one ``select_container create`` call mounted ``/`` and ``/run`` (with ``docker.sock``)
read-write without asking. Now: system and home directories, their ancestors, anything holding a Docker socket and
symlinks resolving there are refused before Docker is touched; directories outside the allow-list need the user's
yes in a form (issue 27: without one the call is refused, the model cannot confirm); nothing changes on a refusal.
Real files, a real unix socket.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import ok, refused, result_text
from test_mcp_elicitation import Form

pytestmark = pytest.mark.both_eras  # forms or the listed schema: what differs between eras

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


async def test_outside_the_allow_list_without_a_form_the_model_cannot_confirm(
    connect: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_engine: None
) -> None:
    """Issue 27 (item 6): before, ``confirm_mounts=true`` from the model passed for a client without forms."""
    data = tmp_path / "my-data"
    data.mkdir()
    async with connect() as c:
        message = await refused(c, "select_container", _create({str(data): "/data"}))
        assert "cannot confirm it for them" in message and str(data) in message, message
        assert "VERL_ASYNC_DAPO_MOUNT_ALLOW" in message and "confirm_mounts" not in message, message
        assert (await ok(c, "get_session"))["session_id"] is None
        # The old argument is gone: passed anyway, it changes nothing.
        result = await c.call_tool("select_container", _create({str(data): "/data"}) | {"confirm_mounts": True})
        assert result.is_error and MISSING_IMAGE not in result_text(result), result_text(result)
        assert (await ok(c, "get_session"))["session_id"] is None
    # What the user can do: put the directory on the allow-list in the server's environment.
    monkeypatch.setenv("VERL_ASYNC_DAPO_MOUNT_ALLOW", str(data))
    async with connect() as c:
        message = await refused(c, "select_container", _create({str(data): "/data"}, writable=["/data"]))
        assert MISSING_IMAGE in message and "mount" not in message.lower(), message


async def test_outside_the_allow_list_the_user_is_asked(
    connect: Callable[..., Any], tmp_path: Path, docker_engine: None
) -> None:
    data = tmp_path / "my-data"
    data.mkdir()
    (tmp_path / "link-to-data").symlink_to(data)
    declined = Form(content={"create": False})
    async with connect(elicitation_callback=declined) as c:
        message = await refused(c, "select_container", _create({str(tmp_path / "link-to-data"): "/data"}))
        assert "declined" in message
        assert (await ok(c, "get_session"))["session_id"] is None
    assert len(declined.asked) == 1
    # The form shows the resolved directory (what Docker will get), not the link.
    asked = declined.asked[0].message
    assert f"{data} → /data (read-only)" in asked and "link-to-data" not in asked, asked
    accepted = Form(content={"create": True})
    async with connect(elicitation_callback=accepted) as c:
        result = await c.call_tool("select_container", _create({str(data): "/data"}))
        assert result.is_error and MISSING_IMAGE in result_text(result), result_text(result)
    assert len(accepted.asked) == 1


async def test_extra_privileges_are_asked_of_the_user_and_named(
    connect: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, docker_client: Any, test_image: str
) -> None:
    """Issue 27 (item 1): a privilege beyond the confined default needs the user's yes, whatever the model says."""
    args = _create({}, privileges=["sys_admin", "host_network"])
    async with connect() as c:  # no form: refused, and the refusal says what the user can do
        message = await refused(c, "select_container", args)
        assert "sys_admin" in message and "VERL_ASYNC_DAPO_CONTAINER_PRIVILEGES" in message, message
        assert (await ok(c, "get_session"))["session_id"] is None
    declined = Form(content={"create": False})
    async with connect(elicitation_callback=declined) as c:
        assert "declined" in await refused(c, "select_container", args)
        assert (await ok(c, "get_session"))["session_id"] is None
    (asked,) = declined.asked
    assert "sys_admin (--cap-add SYS_ADMIN" in asked.message and "release_agent" in asked.message, asked.message
    assert "host_network (--network host" in asked.message
    # --privileged is not offered at all, whatever the form would say.
    async with connect(elicitation_callback=Form(content={"create": True})) as c:
        await refused(c, "select_container", _create({}, privileges=["privileged"]))
        assert (await ok(c, "get_session"))["session_id"] is None
    # Pre-approved by the user in the server's environment: created with it, no question, named in the answer.
    monkeypatch.setenv("VERL_ASYNC_DAPO_CONTAINER_PRIVILEGES", "sys_ptrace")
    name = f"vad-priv-{os.getpid()}"
    form = Form(content={"create": False})
    try:
        async with connect(elicitation_callback=form) as c:
            out = await ok(c, "select_container", {"create": {"name": name, "image": test_image, "gpus": "none",
                                                              "network": "none", "privileges": ["sys_ptrace"]},
                                                   "allow_no_gpus": True})  # fmt: skip
        assert form.asked == []
        assert out["answers"]["container"]["privileges"] == ["sys_ptrace"]
        hc = docker_client.api.inspect_container(name)["HostConfig"]
        assert hc["CapAdd"] in (["SYS_PTRACE"], ["CAP_SYS_PTRACE"]) and hc["SecurityOpt"] == ["no-new-privileges"]
    finally:
        with contextlib.suppress(Exception):
            docker_client.containers.get(name).remove(force=True)


async def test_inside_the_allow_list_nobody_is_asked(
    connect: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_engine: None
) -> None:
    allowed = tmp_path / "datasets"
    (allowed / "gsm8k").mkdir(parents=True)
    monkeypatch.setenv("VERL_ASYNC_DAPO_MOUNT_ALLOW", f"/nonexistent:{allowed}")
    form = Form(content={"create": True})
    async with connect(elicitation_callback=form) as c:
        result = await c.call_tool("select_container", _create({str(allowed / "gsm8k"): "/data"}))
        assert result.is_error and MISSING_IMAGE in result_text(result), result_text(result)
    assert form.asked == []
    # The allow-list never overrides a refusal.
    monkeypatch.setenv("VERL_ASYNC_DAPO_MOUNT_ALLOW", "/")
    async with connect() as c:
        assert "refusing to mount" in await refused(c, "select_container", _create({"/etc": "/x"}))
    assert os.environ["VERL_ASYNC_DAPO_MOUNT_ALLOW"] == "/"
