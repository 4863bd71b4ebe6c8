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

from verl_async_dapo.exceptions import InvalidTargetInput
from verl_async_dapo.records import JobHandle

MANAGED_LABEL = "io.verl-async-dapo.managed"
HOST_TARGET_NAME = "host"  # the "no container" choice offered by list_containers

# Docker's own rule for container names; checked before any call that takes one.
CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")

# The detached launcher, run as: setsid bash -c LAUNCHER vad-launch JOB_DIR LOG_PATH -- ARGV...
# It records its own pid (= the process-group id, thanks to setsid) before starting the
# workload and the workload's exit code after it, in files beside the log, because exec
# records vanish when the Docker daemon restarts. rc is written via rename so a reader never
# sees a partial number. umask 077 whatever the caller's (issue 20): the raw log (unredacted), pgid, rc
# and what training writes (Hydra's outputs/, checkpoints) are the owner's only; the job dir is 0700.
LAUNCHER_SCRIPT = r"""
umask 077
job_dir=$1; log=$2; shift 3
mkdir -p -- "$job_dir" || exit 97
chmod 700 -- "$job_dir" || exit 97
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
    SLURM = "slurm"


# Exit code reported by Target.run when the program itself does not exist in the target.
COMMAND_NOT_FOUND = 127
_MAX_PATH = 4096


def check_target_path(path: str, what: str = "path") -> str:
    """Paths handed to commands inside a target: absolute (so never an option), no NUL/newline, no '..'."""
    if not isinstance(path, str) or not path.startswith("/") or len(path) > _MAX_PATH:
        raise InvalidTargetInput(f"{what} must be an absolute path (1..4096 chars), got {str(path)[:80]!r}")
    if "\x00" in path or "\n" in path or "\r" in path:
        raise InvalidTargetInput(f"{what} may not contain NUL or newline characters")
    if ".." in path.split("/"):
        raise InvalidTargetInput(f"{what} may not contain '..': {path[:80]!r}")
    return path


_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")


def check_argv(argv: Sequence[str]) -> list[str]:
    """A command as argv: non-empty strings without NUL (NUL would silently cut an argument)."""
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise InvalidTargetInput("command must be a non-empty list of strings")
    if any("\x00" in a for a in argv):
        raise InvalidTargetInput("command arguments may not contain NUL")
    return list(argv)


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Environment for a target process: POSIX names, values without NUL."""
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not _ENV_KEY_RE.fullmatch(key):
            raise InvalidTargetInput(f"{str(key)[:60]!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidTargetInput(f"environment value of {key} may not contain NUL")
    return dict(env or {})


def check_job_inputs(argv: Sequence[str], env: Mapping[str, str], cwd: str, job_dir: str,
                     log_path: str) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """A detached job's argv, environment and paths, checked as every target's start_detached needs them."""
    checked_argv, checked_env = check_argv(argv), check_env(env)
    for path, what in ((cwd, "cwd"), (job_dir, "job_dir"), (log_path, "log_path")):
        check_target_path(path, what)
    return checked_argv, checked_env


def launcher_argv(job_dir: str, log_path: str, argv: Sequence[str]) -> list[str]:
    """The detached launcher as an argv list: every variable part is a positional argument.

    ``setsid -w``: docker exec (and start_new_session) already make the caller a group leader, so
    setsid forks; -w keeps the launcher a child of that first process, which reaps it. Without -w
    the launcher would be orphaned to PID 1 (often ``sleep infinity``) and linger as a zombie,
    fooling ``tail --pid`` and liveness checks.
    """
    check_target_path(job_dir, "job_dir")
    check_target_path(log_path, "log_path")
    return ["setsid", "-w", "bash", "-c", LAUNCHER_SCRIPT, "vad-launch", job_dir, log_path, "--", *check_argv(argv)]


FOLLOW_DEFAULT_BYTES = 1 << 20  # reattach shows the last MiB, not a whole multi-GB log


def follow_tail_argv(pgid: int, log_path: str, from_offset: int | None, *, finished: bool = False) -> list[str]:
    """GNU tail that exits (after the last bytes) once the launcher pid is gone.

    ``finished``: the rc file exists, so the log is complete; read it once instead of following,
    which also avoids waiting on a pid that may since have been reused.
    """
    check_target_path(log_path, "log_path")
    if from_offset is not None and from_offset < 0:
        raise InvalidTargetInput("from_offset must be >= 0")
    start = f"+{from_offset + 1}" if from_offset is not None else str(FOLLOW_DEFAULT_BYTES)
    if finished:
        return ["tail", "-c", start, "--", log_path]
    return ["tail", f"--pid={pgid}", "-s", "0.1", "-c", start, "-F", "--", log_path]


def parse_pid(text: str | bytes | None) -> int | None:
    """A pid/pgid/rc file's content; None when absent or garbled. Pids <= 1 are refused (kill -1 = all)."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and int(text) > 1 else None


def parse_rc(text: str | bytes | None) -> int | None:
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


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
    note: str | None = None  # e.g. on the host entry: "Docker is not reachable: ..."


@dataclass(frozen=True)
class CreateSpec:
    """How to create a new training container: what verl needs, confined (privileges.py says what that means)."""

    name: str
    image: str
    gpus: str = "all"  # "all", "none", or comma-separated device ids "0,1,2"
    shm_size: str | None = None  # None → privileges.DEFAULT_SHM_SIZE (moot with the host_ipc privilege)
    mounts: Mapping[str, str] = field(default_factory=dict)  # host dir → container dir
    writable: tuple[str, ...] = ()  # container dirs training writes (checkpoints); every other mount is read-only
    env: Mapping[str, str] = field(default_factory=dict)  # non-secret env (proxy without passwords)
    network_mode: str = "bridge"  # "bridge" or "none"; the host's network is the host_network privilege
    # privileges.Privilege values the *user* approved (asked in a form or pre-approved in the server's environment)
    privileges: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobStatus:
    running: bool
    exit_code: int | None  # None while running or when the job never recorded one
    pgid: int | None
    # Batch schedulers (the SLURM target): waiting in the queue (not a hang), and the scheduler's own state name
    # (e.g. TIMEOUT, PREEMPTED: the scheduler ended it, targets/slurm/states.py). Other targets leave the defaults.
    queued: bool = False
    scheduler_state: str | None = None


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
