"""Docker Engine access: the client, listing, creating and starting containers.

Every docker-py call here is blocking (requests); the async functions push them to worker
threads. Docker errors are mapped to TargetError / TargetUnavailable with a message that says
what to do, and nothing from a container's environment is ever returned (it holds secrets).
The arguments of a new container and the checks of its mounts are in create_args.py.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio
import docker
import docker.errors
import docker.types
import requests.exceptions
from docker.models.containers import Container

from verl_async_dapo.exceptions import TargetError, TargetGone, TargetUnavailable
from verl_async_dapo.targets.base import MANAGED_LABEL, ContainerInfo, CreateSpec, TargetKind
from verl_async_dapo.targets.docker.create_args import (
    GPU_IDS_RE,
    create_kwargs,
    recheck_mounts,
    validate_container_name,
)
from verl_async_dapo.untrusted import quoted

T = TypeVar("T")

UNREACHABLE_FIX = (
    "Start the Docker daemon (e.g. `sudo systemctl start docker`), make sure this user may use it "
    "(`sudo usermod -aG docker $USER`, then log in again), or set DOCKER_HOST to the daemon's address."
)

_client: docker.DockerClient | None = None
_client_lock = threading.Lock()


def get_client() -> docker.DockerClient:
    """The shared client (blocking; call from a worker thread). Pinged once, then cached."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                client = docker.from_env(timeout=30)
                client.ping()
            except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
                raise TargetUnavailable(f"Docker is not reachable ({_short(exc)}). {UNREACHABLE_FIX}") from exc
            _client = client
        return _client


def reset_client() -> None:
    """Forget the cached client (after DOCKER_HOST changed, or in tests)."""
    global _client
    with _client_lock:
        if _client is not None:
            _client.close()
        _client = None


def _short(exc: BaseException) -> str:
    """The daemon's first line, quoted: its words are data (an image's or a registry's text can be anyone's)."""
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    lines = str(text).strip().splitlines()
    return quoted(lines[0] if lines else type(exc).__name__, 300)


def map_docker_error(exc: BaseException, container: str | None = None) -> TargetError:
    """One translation from docker-py / requests errors to our two error kinds."""
    if isinstance(exc, TargetError):
        return exc
    where = f"container {container!r}" if container else "Docker"
    if isinstance(exc, docker.errors.ImageNotFound):
        return TargetError(f"image not found: {_short(exc)}")
    if isinstance(exc, docker.errors.NotFound):
        return TargetGone(f"{where} not found; list the containers or create one ({_short(exc)})")
    if isinstance(exc, docker.errors.APIError):
        text = _short(exc)
        if exc.status_code == 409 and "not running" in text:
            return TargetGone(f"{where} is not running; start it first ({text})")
        return TargetError(f"Docker refused the request for {where}: {text}")
    if isinstance(exc, (requests.exceptions.RequestException, docker.errors.DockerException, ConnectionError)):
        return TargetUnavailable(f"Docker is not reachable ({_short(exc)}). {UNREACHABLE_FIX}")
    return TargetError(f"{where}: {_short(exc)}")


async def docker_call(fn: Callable[..., T], *args: Any, container: str | None = None, **kwargs: Any) -> T:
    """Run a blocking docker-py call in a worker thread, mapping its errors."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), abandon_on_cancel=True)
    except (docker.errors.DockerException, requests.exceptions.RequestException, ConnectionError) as exc:
        raise map_docker_error(exc, container) from exc


def _gpus_of(attrs: Mapping[str, Any]) -> str | None:
    """GPU access from DeviceRequests (--gpus) or the legacy nvidia runtime; a projection, never raw env."""
    host_config = attrs.get("HostConfig") or {}
    for req in host_config.get("DeviceRequests") or []:
        caps = req.get("Capabilities") or []
        if req.get("Driver") != "nvidia" and not any("gpu" in group for group in caps):
            continue
        ids = req.get("DeviceIDs") or []
        if ids:
            joined = ",".join(str(i) for i in ids)
            return joined if GPU_IDS_RE.fullmatch(joined) else f"{len(ids)} device(s)"
        count = req.get("Count") or 0
        return "all" if count == -1 else f"count={count}"
    if host_config.get("Runtime") == "nvidia":
        env = (attrs.get("Config") or {}).get("Env") or []
        value = next((e.split("=", 1)[1] for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES=")), None)
        if value in (None, "", "void", "none"):
            return "nvidia runtime" if value is None else None
        return value if value == "all" or GPU_IDS_RE.fullmatch(value) else "nvidia runtime"
    return None


def container_info(container: Container) -> ContainerInfo:
    attrs = container.attrs
    state = attrs.get("State") or {}
    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    started = state.get("StartedAt")
    return ContainerInfo(
        name=str(attrs.get("Name") or container.name or "").lstrip("/"),
        kind=TargetKind.DOCKER,
        state=str(state.get("Status") or container.status or "unknown"),
        image=config.get("Image"),
        gpus=_gpus_of(attrs),
        created=attrs.get("Created"),
        started=None if not started or started.startswith("0001-") else started,
        managed=labels.get(MANAGED_LABEL) == "true",
    )


def _list_sync() -> list[ContainerInfo]:
    containers = get_client().containers.list(all=True, ignore_removed=True)
    return [container_info(c) for c in containers]


async def list_containers() -> list[ContainerInfo]:
    """All containers (running or not), as allow-listed projections."""
    return await docker_call(_list_sync)


def _find_sync(name: str) -> ContainerInfo:
    return container_info(get_client().containers.get(name))


async def find_container(name: str) -> ContainerInfo:
    validate_container_name(name)
    return await docker_call(_find_sync, name, container=name)


def _start_sync(container: Container, timeout: float) -> None:
    """Bring a container to 'running': start a created/exited one once, unpause a paused one."""
    name = container.name
    deadline = time.monotonic() + timeout
    started = False
    while True:
        container.reload()
        status = container.status
        if status == "running":
            return
        if status in ("dead", "removing"):
            raise TargetUnavailable(f"container {name!r} is {status}; create a new one")
        if status in ("created", "exited"):
            if started:
                code = (container.attrs.get("State") or {}).get("ExitCode")
                raise TargetUnavailable(
                    f"container {name!r} exited right after starting (exit code {code}); see `docker logs {name}`"
                )
            recheck_mounts(container)
            try:
                container.start()
            except docker.errors.APIError as exc:
                text = _short(exc)
                hint = (
                    " This Docker Engine cannot give containers GPUs: install the NVIDIA Container Toolkit "
                    "(and restart dockerd). (Only to run without GPUs: gpus='none' with allow_no_gpus.)"
                    if "device driver" in text or "gpu" in text.lower() or "nvidia" in text.lower()
                    else ""
                )
                raise TargetUnavailable(f"cannot start container {name!r}: {text}.{hint}") from exc
            started = True
        elif status == "paused":
            container.unpause()
        if time.monotonic() > deadline:
            raise TargetUnavailable(f"container {name!r} did not reach 'running' (state {status!r})")
        time.sleep(0.2)


def _ensure_running_sync(name: str, timeout: float) -> None:
    _start_sync(get_client().containers.get(name), timeout)


async def ensure_container_running(name: str, timeout: float = 30.0) -> None:
    validate_container_name(name)
    await docker_call(_ensure_running_sync, name, timeout, container=name)


MEMLOCK_NOTE = (
    "created without the unlimited memlock ulimit: this Docker daemon may not raise it (rootless Docker or a "
    "daemon without CAP_SYS_RESOURCE); NCCL over InfiniBand/RDMA may need it"
)


def _create_started(client: docker.DockerClient, kwargs: dict[str, Any], start: bool) -> ContainerInfo:
    try:
        container = client.containers.create(**kwargs)
    except docker.errors.APIError as exc:
        if exc.status_code == 409:
            raise TargetError(
                f"a container named {kwargs['name']!r} already exists; select it or choose another name"
            ) from exc
        if exc.status_code == 404 and "network" in _short(exc):
            raise TargetError(
                f"this Docker Engine has no {kwargs['network_mode']!r} network ({_short(exc)}): create the container "
                "with network 'none', or with the host_network privilege if the user wants the host's network"
            ) from exc
        raise
    if start:
        try:
            _start_sync(container, 30.0)
        except TargetError:
            # A container that cannot start (no GPU runtime, refused ulimit) would only block the name.
            container.remove(force=True)
            raise
    container.reload()
    return container_info(container)


def _create_sync(spec: CreateSpec, labels: Mapping[str, str] | None, start: bool) -> ContainerInfo:
    kwargs = create_kwargs(spec, labels)
    client = get_client()
    try:
        client.images.get(spec.image)
    except docker.errors.ImageNotFound as exc:
        raise TargetError(f"image {spec.image} not found locally; pull it first: docker pull {spec.image}") from exc
    try:
        return _create_started(client, kwargs, start)
    except TargetUnavailable as exc:
        if "rlimit" not in str(exc):
            raise
    # verl's recipe wants memlock unlimited, but some daemons may not grant it; the container
    # still trains without RDMA, so create it without and say so rather than fail.
    kwargs["ulimits"] = [u for u in kwargs["ulimits"] if u.name != "memlock"]
    return dataclasses.replace(_create_started(client, kwargs, start), note=MEMLOCK_NOTE)


async def create_container(
    spec: CreateSpec, *, start: bool = True, extra_labels: Mapping[str, str] | None = None
) -> ContainerInfo:
    """Create (and by default start) a training container the way verl documents it.

    Validation happens before Docker is contacted; ``extra_labels`` never override ours.
    """
    create_kwargs(spec, extra_labels)  # validate early: no thread, no daemon round trip
    return await docker_call(_create_sync, spec, extra_labels, start, container=spec.name)
