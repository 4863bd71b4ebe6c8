"""A Docker container as a training target: short commands, detached jobs, log access.

Jobs run through the fixed launcher (``base.LAUNCHER_SCRIPT``) under ``setsid -w``: the pgid and
rc files it writes beside the log are the source of truth, because the daemon forgets exec
records (garbage collection, restarts). Everything variable travels as an argv element.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

import anyio
from anyio.lowlevel import RunVar
from docker.api import APIClient

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError, TargetUnavailable
from verl_async_dapo.records import JobHandle
from verl_async_dapo.targets.base import (
    COMMAND_NOT_FOUND,
    CommandResult,
    JobStatus,
    Target,
    TargetKind,
    check_target_path,
    follow_tail_argv,
    launcher_argv,
    parse_pid,
    parse_rc,
)
from verl_async_dapo.targets.docker.containers import (
    create_container,
    docker_call,
    ensure_container_running,
    find_container,
    get_client,
    list_containers,
    reset_client,
)
from verl_async_dapo.targets.docker.create_args import validate_container_name
from verl_async_dapo.targets.docker.jobs import (
    ExecStream,
    exec_env,
    normalize_result,
    parse_ps,
    start_detached_exec,
)

__all__ = [
    "DockerTarget",
    "create_container",
    "ensure_container_running",
    "find_container",
    "list_containers",
    "reset_client",
]

MAX_READ = 64 << 20  # one read_tail / read_range / command output at most
START_TIMEOUT = 10.0  # how long start_detached waits for the pgid file
ANSWER_TRIES = 3  # an exec answer that cannot be right (lost output: see _exec_answered) is asked again
_POLL = 0.1

# A follow pins one worker thread per idle log; its own limiter keeps them off anyio's default
# pool (40 threads shared with every other to_thread call). One limiter per event loop.
_FOLLOW_LIMITER: RunVar[anyio.CapacityLimiter] = RunVar("vad_docker_follow_limiter")
FOLLOW_THREADS = 64


def _follow_limiter() -> anyio.CapacityLimiter:
    try:
        return _FOLLOW_LIMITER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(FOLLOW_THREADS)
        _FOLLOW_LIMITER.set(limiter)
        return limiter


def _check_size(value: int, what: str, *, allow_zero: bool = True) -> int:
    if not isinstance(value, int) or value < (0 if allow_zero else 1) or value > MAX_READ:
        raise InvalidTargetInput(f"{what} must be between {0 if allow_zero else 1} and {MAX_READ}, got {value!r}")
    return value


class DockerTarget(Target):
    """One named container. Constructing it validates the name but does not contact Docker."""

    kind = TargetKind.DOCKER

    def __init__(self, name: str) -> None:
        self.name = validate_container_name(name)
        # job_dir → pgid: the launcher writes a job's pgid file once and a job_dir is never reused, so one read is
        # enough (saves an exec per status check, stop and follow; the supervisor's OOM relaunch makes several).
        self._pgids: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"DockerTarget({self.name!r})"

    async def _api(self) -> APIClient:
        return (await docker_call(get_client)).api

    async def _exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
    ) -> tuple[int, bytes, bytes]:
        """Run to completion; (exit code, stdout, stderr). A timeout closes the stream and raises."""
        if cwd is not None:
            check_target_path(cwd, "cwd")
        api = await self._api()
        stream = await docker_call(ExecStream.open, api, self.name, argv, env=env, cwd=cwd, container=self.name)
        try:
            with anyio.fail_after(timeout):
                out, err = await anyio.to_thread.run_sync(stream.read_all, MAX_READ, abandon_on_cancel=True)
        except TimeoutError:
            raise TargetError(f"{argv[0]!r} did not finish within {timeout:g} s in container {self.name!r}") from None
        except OSError as exc:  # the daemon dropped the attached connection
            raise TargetUnavailable(f"lost the connection to container {self.name!r}: {exc}") from exc
        finally:
            stream.close()
        code = await docker_call(stream.exit_code, container=self.name)
        return normalize_result(argv, code, out, err)

    async def _exec_answered(
        self, argv: Sequence[str], answered: Callable[[int, bytes, bytes], object], *, timeout: float = 60.0
    ) -> tuple[bool, tuple[int, bytes, bytes]]:
        """``_exec`` until ``answered(code, out, err)`` holds, at most ANSWER_TRIES times: (whether it did, the last
        reply).

        Docker can lose a short exec's output (moby#27289, docker-py#2042), or fail to start an exec under load: a
        reply that cannot be right (ps listing no process, stat printing neither a size nor why) is no answer, and
        taken for one it turned into verdicts ("VERL_HOME /verl does not exist" with /verl in place, a live job's
        group taken for gone, "cannot stat …:" with nothing after). Only the caller knows what an answer looks like.
        """
        for _ in range(ANSWER_TRIES):
            result = await self._exec(argv, timeout=timeout)
            if answered(*result):
                return True, result
        return False, result

    async def ensure_running(self) -> None:
        await ensure_container_running(self.name)

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
    ) -> CommandResult:
        code, out, err = await self._exec(argv, env=env, cwd=cwd, timeout=timeout)
        return CommandResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    async def _read_small(self, path: str) -> bytes | None:
        code, out, _ = await self._exec(["cat", "--", path], timeout=15.0)
        return out if code == 0 else None

    async def _pgid(self, job_dir: str) -> int | None:
        if job_dir not in self._pgids:
            pgid = parse_pid(await self._read_small(posixpath.join(job_dir, "pgid")))
            if pgid is None:
                return None
            self._pgids[job_dir] = pgid
        return self._pgids[job_dir]

    async def start_detached(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        job_dir: str,
        log_path: str,
    ) -> JobHandle:
        launcher = launcher_argv(job_dir, log_path, argv)  # validates job_dir, log_path, argv
        check_target_path(cwd, "cwd")
        exec_env(env)  # validate before anything runs
        pgid_path = posixpath.join(job_dir, "pgid")
        exists = await self.paths_exist([pgid_path, cwd])
        if exists[pgid_path]:
            raise InvalidTargetInput(f"{job_dir} already holds a job (pgid file exists); use a fresh job_dir")
        if not exists[cwd]:
            # Checked here because the daemon's own refusal is an OCI runtime message that names no fix.
            raise TargetError(f"the working directory {cwd} does not exist in {self.name!r}")
        # The job dir before the launcher: evidence that a launch began, for a supervisor started after this one
        # was killed (it waits for the pgid rather than launching a second job; issue 27, item 7).
        code, _, err = await self._exec(["mkdir", "-p", "-m", "700", "--", job_dir])
        if code != 0:
            raise TargetError(f"cannot create {job_dir} in {self.name!r}: {err.decode('utf-8', 'replace').strip()}")
        api = await self._api()
        exec_id = await docker_call(
            start_detached_exec, api, self.name, launcher, env=env, cwd=cwd, container=self.name
        )
        handle = JobHandle(target=self.name, job_dir=job_dir, log_path=log_path, exec_id=exec_id)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if await self._pgid(job_dir) is not None:
                return handle
            info = await docker_call(api.exec_inspect, exec_id, container=self.name)
            if not info.get("Running") and parse_pid(await self._read_small(pgid_path)) is None:
                raise TargetError(
                    f"the launcher exited with code {info.get('ExitCode')} before the job started in "
                    f"{self.name!r}: check that bash and setsid exist there and that {cwd} is a directory"
                )
            if time.monotonic() > deadline:
                raise TargetError(f"the job in {self.name!r} did not record its pgid within {START_TIMEOUT:g} s")
            await anyio.sleep(_POLL)

    async def _processes(self) -> list[tuple[int, int, str]] | None:
        """(pid, pgid, stat) of every process in the container; None when ps is not installed or gives no answer
        (then ``kill -0``, whose exit code needs no output, decides)."""
        # ps lists at least itself: no row is no answer, not an empty container.
        ok, (code, out, _) = await self._exec_answered(
            ["ps", "-e", "-o", "pid=,pgid=,stat="],
            lambda code, out, _: code != 0 or parse_ps(out.decode("ascii", "replace")), timeout=15.0,
        )  # fmt: skip
        return parse_ps(out.decode("ascii", "replace")) if ok and code == 0 else None

    async def _kill(self, signal: str, target: str) -> int:
        """``kill -SIG -- TARGET`` (TARGET = pid or -pgid); falls back to the shell builtin without /bin/kill."""
        code, _, _ = await self._exec(["kill", f"-{signal}", "--", target], timeout=15.0)
        if code == COMMAND_NOT_FOUND:
            # Fixed script text; the signal is one of our constants and the target an integer string.
            code, _, _ = await self._exec(["sh", "-c", 'kill -"$1" -- "$2"', "vad-kill", signal, target], timeout=15.0)
        return code

    async def _alive(self, *, pid: int | None = None, pgid: int | None = None) -> bool:
        """Is the pid / any member of the group alive? Zombies do not count (they hold no resources)."""
        rows = await self._processes()
        if rows is None:
            return await self._kill("0", str(pid) if pid is not None else f"-{pgid}") == 0
        # A live launcher leads its own group (pid == pgid); a reused pid almost never does.
        return any(
            (r[0] == pid and r[1] == pid if pid is not None else r[1] == pgid) and not r[2].startswith("Z")
            for r in rows
        )

    async def job_status(self, handle: JobHandle) -> JobStatus:
        rc_path = posixpath.join(handle.job_dir, "rc")
        pgid = await self._pgid(handle.job_dir)
        rc = parse_rc(await self._read_small(rc_path))
        if rc is not None:
            return JobStatus(running=False, exit_code=rc, pgid=pgid)
        if handle.exec_id:
            try:
                api = await self._api()
                info = await docker_call(api.exec_inspect, handle.exec_id, container=self.name)
                if info.get("Running"):
                    return JobStatus(running=True, exit_code=None, pgid=pgid)
            except TargetError:
                pass  # the daemon forgot the exec (restart / GC): the files decide below
        if pgid is not None and await self._alive(pid=pgid):
            return JobStatus(running=True, exit_code=None, pgid=pgid)
        # Re-read: the launcher may have written rc between our first read and its exit.
        return JobStatus(running=False, exit_code=parse_rc(await self._read_small(rc_path)), pgid=pgid)

    async def stop_job(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        check_target_path(handle.job_dir, "job_dir")
        pgid = await self._pgid(handle.job_dir)
        if pgid is not None and await self._alive(pgid=pgid):
            await self._kill("TERM", f"-{pgid}")
            deadline = time.monotonic() + max(grace_seconds, 0.0)
            while await self._alive(pgid=pgid) and time.monotonic() < deadline:
                await anyio.sleep(0.25)
            if await self._alive(pgid=pgid):
                await self._kill("KILL", f"-{pgid}")
                deadline = time.monotonic() + 5.0
                while await self._alive(pgid=pgid) and time.monotonic() < deadline:
                    await anyio.sleep(0.1)
        # Ray's daemons (raylet, GCS) leave the job's process group; stop them only where ray exists (probe and
        # stop in one exec: fixed text, no variable part).
        await self._exec(["sh", "-c", "command -v ray >/dev/null 2>&1 || exit 0; exec ray stop --force"], timeout=60.0)

    def follow(self, handle: JobHandle, *, from_offset: int | None = None) -> AsyncIterator[bytes]:
        check_target_path(handle.log_path, "log_path")
        return self._follow(handle, from_offset)

    async def _follow(self, handle: JobHandle, from_offset: int | None) -> AsyncIterator[bytes]:
        pgid = await self._pgid(handle.job_dir)
        if pgid is None:
            raise TargetError(f"job in {handle.job_dir} has no pgid file: it never started")
        rc_path = posixpath.join(handle.job_dir, "rc")
        finished = (await self.paths_exist([rc_path]))[rc_path]
        argv = follow_tail_argv(pgid, handle.log_path, from_offset, finished=finished)
        api = await self._api()
        stream = await docker_call(ExecStream.open, api, self.name, argv, stderr=False, container=self.name)
        chunks = stream.stdout_chunks()
        limiter = _follow_limiter()
        try:
            while True:
                chunk = await anyio.to_thread.run_sync(next, chunks, None, limiter=limiter, abandon_on_cancel=True)
                if chunk is None:
                    return
                yield chunk
        finally:
            stream.close()  # also unblocks a worker abandoned by cancellation

    async def read_tail(self, path: str, max_bytes: int) -> bytes:
        check_target_path(path)
        _check_size(max_bytes, "max_bytes")
        if max_bytes == 0:
            return b""
        for _ in range(ANSWER_TRIES):
            code, out, err = await self._exec(["tail", "-c", str(max_bytes), "--", path])
            if code != 0:
                raise TargetError(f"cannot read {path} in {self.name!r}: {err.decode('utf-8', 'replace').strip()}")
            # Nothing read from a file that has bytes is no answer (see _exec_answered; the check is async, so this
            # loop is its own): a log's tail read
            # empty would classify an OOM as nothing and cost the run its relaunch.
            if out or not await self.file_size(path):
                return out
        raise TargetError(f"cannot read {path} in {self.name!r}: no answer in {ANSWER_TRIES} tries")

    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        check_target_path(path)
        if not isinstance(offset, int) or offset < 0:
            raise InvalidTargetInput(f"offset must be >= 0, got {offset!r}")
        _check_size(length, "length")
        if length == 0:
            return b""
        # dd seeks instead of reading up to the offset; byte-exact via skip_bytes/count_bytes.
        argv = [
            "dd",
            f"if={path}",
            f"bs={min(length, 1 << 20)}",
            f"skip={offset}",
            f"count={length}",
            "iflag=skip_bytes,count_bytes",
            "status=none",
        ]
        code, out, err = await self._exec(argv)
        if code != 0:
            raise TargetError(f"cannot read {path} in {self.name!r}: {err.decode('utf-8', 'replace').strip()}")
        return out

    async def file_size(self, path: str) -> int | None:
        check_target_path(path)
        # An answer is the size, or stat's reason for not giving one.
        ok, (code, out, err) = await self._exec_answered(
            ["stat", "-L", "-c", "%s", "--", path],
            lambda code, out, err: (code == 0 and out.strip().isdigit()) or err.strip(),
        )  # fmt: skip
        if not ok:
            raise TargetError(f"cannot stat {path} in {self.name!r}: no answer in {ANSWER_TRIES} tries")
        if code == 0 and out.strip().isdigit():
            return int(out.strip())
        text = err.decode("utf-8", "replace").strip()
        if "No such file" in text or "Not a directory" in text:
            return None
        raise TargetError(f"cannot stat {path} in {self.name!r}: {text}")

    async def paths_exist(self, paths: Sequence[str]) -> dict[str, bool]:
        paths = [check_target_path(p) for p in paths]
        if not paths:
            return {}
        # One exec for all: stat prints only the names that exist, NUL-terminated (exit 1: some path is missing).
        # "/" goes first as a witness: a reply without it says nothing about the paths, never "missing".
        def names(out: bytes) -> set[str]:
            return set(out.decode("utf-8", "surrogateescape").split("\0"))

        ok, (code, out, err) = await self._exec_answered(["stat", "-L", "--printf=%n\\0", "--", "/", *paths],
                                                         lambda code, out, _: code in (0, 1) and "/" in names(out))
        if not ok:
            detail = f"stat exited {code}: {err.decode('utf-8', 'replace').strip()[-300:] or 'no output'}"
            raise TargetError(f"could not check paths in container {self.name!r} ({detail})")
        found = names(out)
        return {p: p in found for p in paths}

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        check_target_path(path)
        parent, base = posixpath.split(path.rstrip("/"))
        if not base:
            raise InvalidTargetInput(f"{path!r} names no file")
        code, _, err = await self._exec(["mkdir", "-p", "--", parent or "/"])
        if code != 0:
            raise TargetError(f"cannot create {parent} in {self.name!r}: {err.decode('utf-8', 'replace').strip()}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(base)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        api = await self._api()
        ok = await docker_call(api.put_archive, self.name, parent or "/", buf.getvalue(), container=self.name)
        if not ok:
            raise TargetError(f"Docker refused to write {path} in {self.name!r}")
