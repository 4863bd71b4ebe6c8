"""The configured Ray clusters as choices for the user: each one probed through its dashboard.

Kept apart from targets/ray/clusters.py (the configuration, no network) because probing needs
RayTarget, and targets/ray/__init__.py already imports clusters.

A cluster that wants a token we do not have (or refuses ours) is listed as "unauthorized", and a
token source that cannot be read (RAY_AUTH_TOKEN_PATH) as "misconfigured": both with the message
that says what to set, not as "unreachable" (retrying would not help).
"""

from __future__ import annotations

import anyio

from verl_async_dapo.exceptions import TargetError, TargetUnavailable
from verl_async_dapo.targets.base import ContainerInfo, TargetKind
from verl_async_dapo.targets.ray import RayTarget
from verl_async_dapo.targets.ray.api import RayAuthError
from verl_async_dapo.targets.ray.auth import RayTokenError
from verl_async_dapo.targets.ray.clusters import RAY_PREFIX, configured_clusters, resolve

LIST_TIMEOUT = 3.0


async def ray_cluster_info(name: str, address: str | None = None, *, timeout: float = LIST_TIMEOUT) -> ContainerInfo:
    """One configured cluster as a choice; ``state`` "unreachable" / "unauthorized" / "misconfigured" (with the
    reason) instead of raising."""
    target = RayTarget(name, address)
    try:
        with anyio.fail_after(timeout):
            resources = await target.resources()
    except (TargetError, TimeoutError) as exc:
        reason = str(exc) if isinstance(exc, TargetError) else f"no answer within {timeout:g} s"
        state = "unauthorized" if isinstance(exc, RayAuthError) else "unreachable"
        state = "misconfigured" if isinstance(exc, RayTokenError) else state
        return ContainerInfo(name=target.name, kind=TargetKind.RAY, state=state, note=reason)
    version = f"Ray {resources.ray_version}" if resources.ray_version else "Ray"
    return ContainerInfo(
        name=target.name, kind=TargetKind.RAY, state="available", gpus=resources.describe(),
        note=f"{version} cluster at {target.client.address}",
    )  # fmt: skip


async def list_ray_clusters() -> list[ContainerInfo]:
    """Every configured cluster, probed concurrently; a broken config file becomes one entry's note."""
    try:
        clusters = configured_clusters()
    except TargetError as exc:
        return [ContainerInfo(name=f"{RAY_PREFIX}?", kind=TargetKind.RAY, state="misconfigured", note=str(exc))]
    infos: dict[str, ContainerInfo] = {}

    async def probe(name: str, address: str) -> None:
        infos[name] = await ray_cluster_info(f"{RAY_PREFIX}{name}", address)

    async with anyio.create_task_group() as tg:
        for name, address in clusters.items():
            tg.start_soon(probe, name, address)
    return [infos[name] for name in sorted(infos)]


async def find_ray_cluster(name: str) -> ContainerInfo:
    """The entry for ``ray:<name>``; TargetError when unknown or its token is wrong or missing,
    TargetUnavailable when it does not answer."""
    address = resolve(name)
    info = await ray_cluster_info(name, address, timeout=10.0)
    if info.state == "unreachable":
        raise TargetUnavailable(f"{info.name}: {info.note}")
    if info.state != "available":
        raise TargetError(f"{info.name}: {info.note}")
    return info
