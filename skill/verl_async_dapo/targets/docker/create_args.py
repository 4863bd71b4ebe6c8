"""docker-py's arguments for a new training container, and the checks of its bind sources (pure but for ``stat``).

Split from containers.py: what a created container may do (privileges.py decides; issue 27, item 1) and what it
may mount, resolved and re-checked before every start (targets/mounts.py decides; issue 27, item 2).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker.types
from docker.models.containers import Container

from verl_async_dapo import privileges
from verl_async_dapo.exceptions import InvalidTargetInput, TargetUnavailable
from verl_async_dapo.privileges import Privilege
from verl_async_dapo.targets.base import CONTAINER_NAME_RE, MANAGED_LABEL, CreateSpec
from verl_async_dapo.targets.mounts import refusal as mount_refusal

# distribution/reference grammar, slightly stricter: [host[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?/)"
)
IMAGE_REF_RE = re.compile(
    rf"^{_DOMAIN}?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
_LABEL_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
_GPU_ID = r"(?:[0-9]{1,3}|GPU-[0-9a-fA-F-]{8,64}|MIG-[0-9a-zA-Z/-]{8,64})"
GPU_IDS_RE = re.compile(rf"^{_GPU_ID}(?:,{_GPU_ID})*$")
_SHM_RE = re.compile(r"^[1-9][0-9]{0,12}[bkmgBKMG]?$")
NETWORK_MODES = frozenset({"none", "bridge"})


def validate_container_name(name: str) -> str:
    if not isinstance(name, str) or not CONTAINER_NAME_RE.fullmatch(name):
        raise InvalidTargetInput(
            f"{str(name)[:80]!r} is not a valid container name: letters, digits, '_', '.', '-' (max 128), "
            "starting with a letter or digit"
        )
    return name


def validate_image_ref(image: str) -> str:
    if not isinstance(image, str) or len(image) > 255 or not IMAGE_REF_RE.fullmatch(image):
        raise InvalidTargetInput(
            f"{str(image)[:80]!r} is not a valid image reference (expected e.g. verlai/verl:vllm017.latest)"
        )
    return image


def _device_requests(gpus: str) -> list[docker.types.DeviceRequest]:
    if gpus == "none":
        return []
    if gpus == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if GPU_IDS_RE.fullmatch(gpus):
        return [docker.types.DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]])]
    raise InvalidTargetInput(f"gpus must be 'all', 'none' or device ids like '0,1', got {gpus[:60]!r}")


def _binds(mounts: Mapping[str, str], writable: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """Host dir → container dir, validated: ':' would split docker's bind syntax, NUL truncates it; a mount that
    would hand out the host is refused here too, whoever calls (targets/mounts.py). Read-only unless the
    container dir is one of ``writable``: training only reads models and data."""
    binds: dict[str, dict[str, str]] = {}
    unknown = [w for w in writable if w not in mounts.values()]
    if unknown:
        raise InvalidTargetInput(f"writable {unknown[0][:80]!r} is not the container side of any mount")
    for host, inside in mounts.items():
        for path, what in ((host, "host path"), (inside, "container path")):
            if not isinstance(path, str) or not path.startswith("/"):
                raise InvalidTargetInput(f"mount {what} must be absolute, got {str(path)[:80]!r}")
            if any(ch in path for ch in ":\x00\n\r,") or ".." in path.split("/"):
                raise InvalidTargetInput(f"mount {what} may not contain ':', ',', NUL, newlines or '..'")
        why = _mount_source_problem(host)
        if why is not None:
            raise InvalidTargetInput(why)
        binds[host] = {"bind": inside, "mode": "rw" if inside in writable else "ro"}
    return binds


def _mount_source_problem(host: str) -> str | None:
    """Why ``host`` may not be a bind source now, or None. Docker gets real paths only (issue 27, item 2): a path
    with a symlink on the way could be re-pointed between the check and the mount, so the caller resolves it when it
    checks (targets/mounts.py ``review``) and passes the result; here, and again before every start, it must still
    be its own real path, an existing directory, and not one that hands out the host."""
    if not Path(host).is_dir():
        return f"mount source {host!r} is not an existing directory on this machine"
    real = os.path.realpath(host)
    if real != host.rstrip("/"):
        return (f"mount source {host!r} is not its real path (it now resolves to {real!r}): a symlink on the way "
                "could be re-pointed after the check; give the resolved directory")  # fmt: skip
    why = mount_refusal(host, os.environ, Path.home())
    if why is not None:
        return f"refusing to mount {why}: a container runs as root, so this would hand out the host"
    return None


def recheck_mounts(container: Container) -> None:
    """Before a container of ours starts: its bind sources must still be what was checked when it was created (a
    directory replaced by a symlink since then would otherwise be mounted where the link points). Containers the
    user made themselves are theirs: their binds are not judged."""
    attrs = container.attrs
    if ((attrs.get("Config") or {}).get("Labels") or {}).get(MANAGED_LABEL) != "true":
        return
    for mount in attrs.get("Mounts") or []:
        if mount.get("Type") != "bind":
            continue
        why = _mount_source_problem(str(mount.get("Source") or ""))
        if why is not None:
            raise TargetUnavailable(f"not starting container {container.name!r}: {why}. Its mounts changed since "
                                    "it was created; check the directory, or create a new container")  # fmt: skip


def _environment(env: Mapping[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if not _ENV_KEY_RE.fullmatch(key):
            raise InvalidTargetInput(f"{key[:60]!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidTargetInput(f"environment value of {key} may not contain NUL")
    return dict(env)


def _labels(extra: Mapping[str, str] | None) -> dict[str, str]:
    labels = {MANAGED_LABEL: "true"}
    for key, value in (extra or {}).items():
        if not _LABEL_KEY_RE.fullmatch(key) or not isinstance(value, str) or "\x00" in value or len(value) > 256:
            raise InvalidTargetInput(f"invalid label {key[:60]!r}")
        labels.setdefault(key, value)
    return labels


def create_kwargs(spec: CreateSpec, labels: Mapping[str, str] | None) -> dict[str, Any]:
    """docker-py's create arguments: Docker's default confinement tightened, what verl needs set explicitly, and only
    the privileges in ``spec.privileges`` (which the caller had the user approve) on top (privileges.py)."""
    validate_container_name(spec.name)
    validate_image_ref(spec.image)
    if spec.network_mode not in NETWORK_MODES:
        raise InvalidTargetInput(
            f"network_mode must be one of {sorted(NETWORK_MODES)} (the host's network is the host_network privilege)"
        )
    try:
        granted = privileges.parse(spec.privileges)
    except ValueError as exc:
        raise InvalidTargetInput(str(exc)) from None
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": ["sleep", "infinity"],
        "name": spec.name,
        "labels": _labels(labels),
        "network_mode": "host" if Privilege.HOST_NETWORK in granted else spec.network_mode,
        # Never seccomp/apparmor=unconfined: Docker's default profiles stay on.
        "security_opt": list(privileges.SECURITY_OPT),
        "cap_drop": list(privileges.DROPPED_CAPS),
        "ulimits": [
            docker.types.Ulimit(name="memlock", soft=-1, hard=-1),
            docker.types.Ulimit(name="stack", soft=privileges.STACK_BYTES, hard=privileges.STACK_BYTES),
        ],
        "environment": _environment(spec.env),
        "volumes": _binds(spec.mounts, tuple(spec.writable)),
        # tini as PID 1 reaps the orphans a killed training job leaves; `sleep` would keep zombies.
        "init": True,
    }
    caps = [name for p, name in ((Privilege.SYS_PTRACE, "SYS_PTRACE"), (Privilege.SYS_ADMIN, "SYS_ADMIN"))
            if p in granted]  # fmt: skip
    if caps:
        kwargs["cap_add"] = caps
    if Privilege.HOST_PID in granted:
        kwargs["pid_mode"] = "host"
    # ipc=host makes shm_size moot (and some runtimes reject the pair), so exactly one of them.
    if Privilege.HOST_IPC in granted:
        kwargs["ipc_mode"] = "host"
    else:
        shm = spec.shm_size or privileges.DEFAULT_SHM_SIZE
        if not _SHM_RE.fullmatch(shm):
            raise InvalidTargetInput(f"shm_size must look like '16g' or '10240m', got {shm[:40]!r}")
        kwargs["shm_size"], kwargs["ipc_mode"] = shm, "private"
    requests_ = _device_requests(spec.gpus)
    if requests_:
        kwargs["device_requests"] = requests_
    return kwargs


