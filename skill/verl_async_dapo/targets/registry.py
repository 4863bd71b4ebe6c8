"""Names → targets, and the list of choices offered to the user (the host first)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verl_async_dapo.exceptions import TargetUnavailable
from verl_async_dapo.slurm_options import options_from_settings
from verl_async_dapo.targets.base import HOST_TARGET_NAME, ContainerInfo, Target, TargetKind
from verl_async_dapo.targets.host import HostTarget
from verl_async_dapo.targets.ray import RayTarget
from verl_async_dapo.targets.ray.clusters import is_ray_target
from verl_async_dapo.targets.ray.discovery import find_ray_cluster, list_ray_clusters
from verl_async_dapo.targets.slurm import SlurmTarget, is_slurm_target
from verl_async_dapo.targets.slurm.discovery import find_slurm, list_slurm

if TYPE_CHECKING:
    from verl_async_dapo.settings import TrainingSettings

__all__ = ["create_container", "find_target_info", "get_target", "host_info", "list_targets"]

# The Docker SDK (docker, requests, urllib3: ~0.1 s) is imported on first use, not when the MCP server or the CLI
# starts: a server answers initialize/tools/list, and `status` reads the store, without ever touching Docker.


async def create_container(*args: Any, **kwargs: Any) -> ContainerInfo:
    from verl_async_dapo.targets.docker.containers import create_container as create

    return await create(*args, **kwargs)


async def list_containers() -> list[ContainerInfo]:
    from verl_async_dapo.targets.docker.containers import list_containers as list_all

    return await list_all()


async def find_container(name: str) -> ContainerInfo:
    from verl_async_dapo.targets.docker.containers import find_container as find

    return await find(name)


def get_target(name: str, settings: TrainingSettings | None = None) -> Target:
    """ "host" → this machine; "ray:<name>" → a configured Ray cluster; "slurm" → batch jobs from this login node
    (``settings``: the run's, whose slurm_* parameters its jobs are submitted with; without them the target still
    follows, reads and stops jobs); anything else → the container of that (validated) name. No I/O (a Ray
    cluster's address is looked up on first use)."""
    if name == HOST_TARGET_NAME:
        return HostTarget()
    if is_slurm_target(name):
        return SlurmTarget(options_from_settings(settings) if settings is not None else None)
    if is_ray_target(name):
        return RayTarget(name)
    from verl_async_dapo.targets.docker import DockerTarget

    return DockerTarget(name)


def host_info(note: str | None = None) -> ContainerInfo:
    return ContainerInfo(name=HOST_TARGET_NAME, kind=TargetKind.HOST, state="available", note=note)


async def list_targets() -> list[ContainerInfo]:
    """The host choice, then every container, then every configured Ray cluster (``ray:<name>``), then SLURM
    (``slurm``, where sinfo and sbatch are installed).
    Without Docker, the host entry carries the reason.

    Never raises for a missing Docker Engine or an unreachable cluster: the MCP server must still
    answer on machines that train on the host only.
    """
    clusters = [*await list_ray_clusters(), *await list_slurm()]
    try:
        containers = await list_containers()
    except TargetUnavailable as exc:
        return [host_info(note=str(exc)), *clusters]
    return [host_info(), *containers, *clusters]


async def find_target_info(name: str) -> ContainerInfo:
    """The entry for one choice; TargetError (or TargetUnavailable) when it does not exist."""
    if name == HOST_TARGET_NAME:
        return host_info()
    if is_ray_target(name):
        return await find_ray_cluster(name)
    if is_slurm_target(name):
        return await find_slurm()
    return await find_container(name)
