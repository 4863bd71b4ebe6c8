"""Where training runs: the one small interface every target kind implements.

Only ``targets/`` talks to Docker, the host's processes or Ray. Every method is async (anyio);
blocking SDK calls run in worker threads. Commands are argv lists, never shell strings built
from user input: the only shell text is the fixed launcher script below, which receives every
variable part as a positional argument.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

MANAGED_LABEL = "io.verl-async-dapo.managed"
HOST_TARGET_NAME = "host"  # the "no container" choice offered by list_containers

# Docker's own rule for container names; checked before any call that takes one.
CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")

# The detached launcher, run as: setsid bash -c LAUNCHER vad-launch JOB_DIR LOG_PATH -- ARGV...
# It records its own pid (= the process-group id, thanks to setsid) before starting the
# workload and the workload's exit code after it, in files beside the log, because exec
# records vanish when the Docker daemon restarts. rc is written via rename so a reader never
# sees a partial number.
LAUNCHER_SCRIPT = r"""
job_dir=$1; log=$2; shift 3
mkdir -p -- "$job_dir" || exit 97
echo $$ > "$job_dir/pgid.tmp" && mv -f -- "$job_dir/pgid.tmp" "$job_dir/pgid"
date +%s > "$job_dir/started"
"$@" >> "$log" 2>&1 < /dev/null
rc=$?
echo $rc > "$job_dir/rc.tmp" && mv -f -- "$job_dir/rc.tmp" "$job_dir/rc"
exit $rc
"""


class TargetKind(str, Enum):
    DOCKER = "docker"
    HOST = "host"
    RAY = "ray"


class TargetError(RuntimeError):
    """A target operation failed; the message says what is missing and how to fix it."""


class TargetUnavailable(TargetError):
    """The target cannot be reached at all (no Docker Engine, container gone, cluster down)."""


@dataclass(frozen=True)
class ContainerInfo:
    """An allow-listed projection of a container: never its environment (it holds secrets)."""

    name: str
    kind: TargetKind
    state: str  # running / exited / created / paused / ... ; "available" for the host
    image: str | None = None
    gpus: str | None = None  # "all", "0,1", "nvidia runtime", or None when it has none
    created: str | None = None
    started: str | None = None
    managed: bool = False  # carries our label


@dataclass(frozen=True)
class CreateSpec:
    """How to create a new training container, the way verl documents it."""

    name: str
    image: str
    gpus: str = "all"  # "all", "none", or comma-separated device ids "0,1,2"
    shm_size: str | None = None  # None → ipc=host (the two are exclusive)
    mounts: Mapping[str, str] = field(default_factory=dict)  # host dir → container dir
    env: Mapping[str, str] = field(default_factory=dict)  # non-secret env (proxy without passwords)
    network_mode: str = "host"


@dataclass(frozen=True)
class JobHandle:
    """A detached job inside a target; everything needed to find it again after a restart."""

    target: str  # container name, or "host"
    job_dir: str  # holds pgid, rc, started
    log_path: str
    exec_id: str | None = None  # docker exec id while the daemon remembers it


@dataclass(frozen=True)
class JobStatus:
    running: bool
    exit_code: int | None  # None while running or when the job never recorded one
    pgid: int | None


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str


class Target(ABC):
    """One place where training runs: a container, this host, or (later) a Ray cluster."""

    name: str
    kind: TargetKind

    @abstractmethod
    async def ensure_running(self) -> None:
        """Start the container when stopped; raise TargetUnavailable when it cannot be."""

    @abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
    ) -> CommandResult:
        """Run a short command to completion and capture its output."""

    @abstractmethod
    async def start_detached(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        job_dir: str,
        log_path: str,
    ) -> JobHandle:
        """Start a long job in its own process group; returns once its pgid file exists."""

    @abstractmethod
    async def job_status(self, handle: JobHandle) -> JobStatus:
        """Alive or finished (with the exit code from the rc file), even after a daemon restart."""

    @abstractmethod
    async def stop_job(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        """TERM then KILL the job's whole process group, then ``ray stop --force`` if ray exists there."""

    @abstractmethod
    def follow(self, handle: JobHandle, *, from_offset: int | None = None) -> AsyncIterator[bytes]:
        """Yield the log's bytes as they are written, until the job's launcher exits.

        ``from_offset`` None = start from the last 1 MiB (reattach without reading a huge log).
        """

    @abstractmethod
    async def read_tail(self, path: str, max_bytes: int) -> bytes:
        """The last ``max_bytes`` of a file, without reading the whole file."""

    @abstractmethod
    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at end of file)."""

    @abstractmethod
    async def file_size(self, path: str) -> int | None:
        """Size in bytes, or None when the file does not exist."""

    @abstractmethod
    async def paths_exist(self, paths: Sequence[str]) -> dict[str, bool]:
        """Which of these paths exist inside the target."""

    @abstractmethod
    async def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write a small file inside the target (parents created)."""
