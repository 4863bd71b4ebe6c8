"""What a container created by this tool may do on the host, and the privileges only the user can add (pure).

The default container (issue 27, item 1) is Docker's default confinement, tightened: no added capability, three of
Docker's defaults dropped (``DROPPED_CAPS``), ``no-new-privileges``, Docker's default seccomp profile (and AppArmor
where the host has it: never ``unconfined``), its own IPC namespace with an explicit ``/dev/shm`` size, its own PID
namespace and a bridge network (or none). What verl needs for training is set explicitly: GPUs as device requests,
``shm_size`` (NCCL and the data loaders use ``/dev/shm``), unlimited ``memlock`` (NCCL/RDMA pin memory) and a 64 MiB
stack (NVIDIA's recommended ``--ulimit stack``), tini as PID 1.

Anything beyond that is a ``Privilege``: asked of the user in a form (or pre-approved by the user in the server's
environment, ``PRE_APPROVED_ENV``), never taken from the model's arguments alone, and named in the tool's answer.
``--privileged`` is not offered at all: whoever wants it creates the container with ``docker`` and selects it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

PRE_APPROVED_ENV = "VERL_ASYNC_DAPO_CONTAINER_PRIVILEGES"  # comma-separated Privilege values the user allows
DEFAULT_SHM_SIZE = "10g"  # verl's documented container (`--shm-size="10g"`)
STACK_BYTES = 64 << 20  # NVIDIA's NGC images ask for `--ulimit stack=67108864`
# Of Docker's default capability set: raw sockets (spoofing on the bridge), device nodes and the audit log; a
# training job needs none of them. CHOWN, DAC_OVERRIDE, FOWNER, SETUID… stay: pip and apt inside the container use them.
DROPPED_CAPS = ("NET_RAW", "MKNOD", "AUDIT_WRITE")
SECURITY_OPT = ("no-new-privileges",)


class Privilege(str, Enum):
    SYS_PTRACE = "sys_ptrace"
    SYS_ADMIN = "sys_admin"
    HOST_NETWORK = "host_network"
    HOST_IPC = "host_ipc"
    HOST_PID = "host_pid"


@dataclass(frozen=True)
class PrivilegeInfo:
    docker: str  # the docker flag it amounts to
    why: str  # when training may want it
    risk: str  # what it hands out, in the words the user reads in the form


CATALOGUE: Mapping[Privilege, PrivilegeInfo] = {
    Privilege.SYS_PTRACE: PrivilegeInfo(
        "--cap-add SYS_PTRACE",
        "CUDA IPC of expandable-segment tensors (pidfd_getfd) between the container's processes",
        "processes in the container may read and change each other's memory, and seccomp lets ptrace through",
    ),
    Privilege.SYS_ADMIN: PrivilegeInfo(
        "--cap-add SYS_ADMIN",
        "verl's documented `docker create` adds it; training itself does not need it",
        "the container may mount file systems: on a cgroup-v1 host without AppArmor that is root on the host "
        "(the release_agent escape)",
    ),
    Privilege.HOST_NETWORK: PrivilegeInfo(
        "--network host",
        "multi-node Ray/NCCL, or a proxy / SwanLab server reachable only on this host's 127.0.0.1",
        "the container reaches every service bound to this host's loopback (other users' Ray dashboards run code)",
    ),
    Privilege.HOST_IPC: PrivilegeInfo(
        "--ipc host",
        "the host's /dev/shm instead of a sized one",
        "other jobs' shared memory on this host becomes readable and writable",
    ),
    Privilege.HOST_PID: PrivilegeInfo(
        "--pid host",
        "profilers that attach to processes outside the container",
        "the container sees every process on this host and may signal those of its users",
    ),
}


def parse(names: Iterable[str]) -> tuple[Privilege, ...]:
    """Known privilege names, deduplicated, in catalogue order; raises ValueError naming an unknown one."""
    wanted: set[Privilege] = set()
    for name in names:
        try:
            wanted.add(Privilege(name.strip().lower()))
        except ValueError:
            known = ", ".join(p.value for p in Privilege)
            raise ValueError(f"unknown container privilege {name[:40]!r} (known: {known}; --privileged is never "
                             "offered: create such a container with docker yourself and select it)") from None  # fmt: skip
    return tuple(p for p in Privilege if p in wanted)


def pre_approved(env: Mapping[str, str]) -> frozenset[Privilege]:
    """The privileges the user allowed in the server's environment (unknown names are ignored, not granted)."""
    out: set[Privilege] = set()
    for name in (env.get(PRE_APPROVED_ENV) or "").split(","):
        try:
            out.add(Privilege(name.strip().lower()))
        except ValueError:
            continue
    return frozenset(out)


def describe(privileges: Iterable[Privilege]) -> str:
    """One line per privilege for the confirmation form and the answer: flag, risk."""
    return "; ".join(f"{p.value} ({CATALOGUE[p].docker}: {CATALOGUE[p].risk})" for p in privileges)
