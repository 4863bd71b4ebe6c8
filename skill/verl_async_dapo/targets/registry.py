"""Names → targets, and the list of choices offered to the user (the host first)."""

from __future__ import annotations

from verl_async_dapo.targets.base import (
    HOST_TARGET_NAME,
    ContainerInfo,
    Target,
    TargetKind,
    TargetUnavailable,
)
from verl_async_dapo.targets.docker import DockerTarget
from verl_async_dapo.targets.docker_containers import create_container, find_container, list_containers
from verl_async_dapo.targets.host import HostTarget

__all__ = ["create_container", "find_target_info", "get_target", "host_info", "list_targets"]


def get_target(name: str) -> Target:
    """ "host" → this machine; anything else → the container of that (validated) name. No I/O."""
    if name == HOST_TARGET_NAME:
        return HostTarget()
    return DockerTarget(name)


def host_info(note: str | None = None) -> ContainerInfo:
    return ContainerInfo(name=HOST_TARGET_NAME, kind=TargetKind.HOST, state="available", note=note)


async def list_targets() -> list[ContainerInfo]:
    """The host choice, then every container. Without Docker, the host entry carries the reason.

    Never raises for a missing Docker Engine: the MCP server must still answer on machines
    that train on the host only.
    """
    try:
        containers = await list_containers()
    except TargetUnavailable as exc:
        return [host_info(note=str(exc))]
    return [host_info(), *containers]


async def find_target_info(name: str) -> ContainerInfo:
    """The entry for one choice; TargetError (or TargetUnavailable) when it does not exist."""
    if name == HOST_TARGET_NAME:
        return host_info()
    return await find_container(name)
