"""This machine as a training target, with the same job semantics as a container.

Detached jobs use the very same launcher argv (``setsid -w bash -c LAUNCHER …``) so the pgid
and rc files, ``tail --pid`` following and group kills behave identically on both targets.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import anyio

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError
from verl_async_dapo.records import JobHandle
from verl_async_dapo.targets.base import (
    COMMAND_NOT_FOUND,
    HOST_TARGET_NAME,
    CommandResult,
    JobStatus,
    Target,
    TargetKind,
    check_argv,
    check_env,
    check_target_path,
    follow_tail_argv,
    launcher_argv,
    parse_pid,
    parse_rc,
)

START_TIMEOUT = 10.0
MAX_READ = 64 << 20
_CHUNK = 64 << 10


def _proc_state(pid: int) -> tuple[str, int] | None:
    """(state letter, pgid) from /proc/<pid>/stat, or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()  # comm may contain spaces and ')'
    return fields[0].decode(), int(fields[2])


def _pid_alive(pid: int) -> bool:
    if not Path("/proc/self/stat").exists():  # pragma: no cover - non-Linux fallback
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = _proc_state(pid)
    # A live launcher leads its own group (pid == pgid); a reused pid almost never does.
    return state is not None and state[0] not in ("Z", "X") and state[1] == pid


def _group_alive(pgid: int) -> bool:
    """Any non-zombie member left? (kill -0 on the group counts zombies, which hold nothing.)"""
    if not Path("/proc/self/stat").exists():  # pragma: no cover - non-Linux fallback
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            state = _proc_state(int(entry.name))
            if state is not None and state[1] == pgid and state[0] not in ("Z", "X"):
                return True
    return False


def _read_small(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(64)
    except OSError:
        return None


def _merged_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """Like docker exec's environment: the given variables on top of ours."""
    check_env(env)  # same validation as the docker target
    return {**os.environ, **env} if env else None


class HostTarget(Target):
    """The machine this server runs on (the "no container" choice)."""

    kind = TargetKind.HOST

    def __init__(self) -> None:
        self.name = HOST_TARGET_NAME

    def __repr__(self) -> str:
        return "HostTarget()"

    async def ensure_running(self) -> None:
        return None

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
    ) -> CommandResult:
        argv = check_argv(argv)
        if cwd is not None:
            check_target_path(cwd, "cwd")
            if not os.path.isdir(cwd):
                raise TargetError(f"cannot start {argv[0]!r}: the working directory {cwd} does not exist")
        full_env = _merged_env(env)
        try:
            with anyio.fail_after(timeout):  # cancellation kills the process (anyio run_process)
                done = await anyio.run_process(argv, check=False, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL)
        except TimeoutError:
            raise TargetError(f"{argv[0]!r} did not finish within {timeout:g} s on the host") from None
        except FileNotFoundError:
            return CommandResult(COMMAND_NOT_FOUND, "", f"{argv[0]}: command not found")
        except PermissionError as exc:
            return CommandResult(126, "", f"{argv[0]}: {exc}")
        return CommandResult(
            done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
        )

    async def start_detached(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        job_dir: str,
        log_path: str,
    ) -> JobHandle:
        launcher = launcher_argv(job_dir, log_path, argv)
        check_target_path(cwd, "cwd")
        full_env = _merged_env(env)
        if not os.path.isdir(cwd):
            raise TargetError(f"the working directory {cwd} does not exist on the host")
        pgid_path = posixpath.join(job_dir, "pgid")
        if os.path.exists(pgid_path):
            raise InvalidTargetInput(f"{job_dir} already holds a job (pgid file exists); use a fresh job_dir")
        # The job dir before the launcher: a supervisor killed from here on leaves evidence that a launch began,
        # and the next one waits for the pgid instead of launching a second job beside it (issue 27, item 7).
        try:
            os.makedirs(job_dir, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise TargetError(f"cannot create {job_dir} on the host: {exc.strerror or type(exc).__name__}") from None
        # Popen rather than anyio.open_process: the job must outlive this event loop (and this
        # process). start_new_session detaches it from our terminal and signals; a daemon thread
        # reaps the `setsid -w` parent so it never lingers as our zombie.
        proc = subprocess.Popen(
            launcher,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        threading.Thread(target=proc.wait, name=f"vad-reap-{proc.pid}", daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while parse_pid(_read_small(pgid_path)) is None:
            code = proc.poll()
            if code is not None and parse_pid(_read_small(pgid_path)) is None:
                raise TargetError(f"the launcher exited with code {code} before the job started on the host")
            if time.monotonic() > deadline:
                raise TargetError(f"the job did not record its pgid within {START_TIMEOUT:g} s")
            await anyio.sleep(0.05)
        return JobHandle(target=self.name, job_dir=job_dir, log_path=log_path, exec_id=None)

    async def job_status(self, handle: JobHandle) -> JobStatus:
        rc_path = posixpath.join(handle.job_dir, "rc")
        pgid = parse_pid(_read_small(posixpath.join(handle.job_dir, "pgid")))
        rc = parse_rc(_read_small(rc_path))
        if rc is not None:
            return JobStatus(running=False, exit_code=rc, pgid=pgid)
        if pgid is not None and await anyio.to_thread.run_sync(_pid_alive, pgid):
            return JobStatus(running=True, exit_code=None, pgid=pgid)
        return JobStatus(running=False, exit_code=parse_rc(_read_small(rc_path)), pgid=pgid)

    async def stop_job(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        check_target_path(handle.job_dir, "job_dir")
        pgid = parse_pid(_read_small(posixpath.join(handle.job_dir, "pgid")))
        if pgid is not None and pgid == os.getpgrp():
            raise TargetError(f"refusing to signal process group {pgid}: it is this server's own group")
        if pgid is not None and await anyio.to_thread.run_sync(_group_alive, pgid):
            for sig, wait in ((signal.SIGTERM, max(grace_seconds, 0.0)), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                except PermissionError as exc:
                    raise TargetError(f"not allowed to signal process group {pgid}: {exc}") from exc
                deadline = time.monotonic() + wait
                while await anyio.to_thread.run_sync(_group_alive, pgid) and time.monotonic() < deadline:
                    await anyio.sleep(0.1)
                if not await anyio.to_thread.run_sync(_group_alive, pgid):
                    break
        ray = shutil.which("ray")
        # verl's private Ray daemons leave the job's group and would keep GPU memory for the next attempt,
        # so they are stopped too. `ray stop` stops every Ray on this machine: users who run other Ray
        # clusters here turn it off with VERL_ASYNC_DAPO_HOST_RAY_STOP=0.
        if ray and os.environ.get("VERL_ASYNC_DAPO_HOST_RAY_STOP", "1") != "0":
            await self.run([ray, "stop", "--force"], timeout=60.0)

    def follow(self, handle: JobHandle, *, from_offset: int | None = None) -> AsyncIterator[bytes]:
        check_target_path(handle.log_path, "log_path")
        return self._follow(handle, from_offset)

    async def _follow(self, handle: JobHandle, from_offset: int | None) -> AsyncIterator[bytes]:
        pgid = parse_pid(_read_small(posixpath.join(handle.job_dir, "pgid")))
        if pgid is None:
            raise TargetError(f"job in {handle.job_dir} has no pgid file: it never started")
        finished = os.path.exists(posixpath.join(handle.job_dir, "rc"))
        argv = follow_tail_argv(pgid, handle.log_path, from_offset, finished=finished)
        process = await anyio.open_process(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        try:
            assert process.stdout is not None
            while True:
                try:
                    chunk = await process.stdout.receive(_CHUNK)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
                yield chunk
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                await process.aclose()

    async def read_tail(self, path: str, max_bytes: int) -> bytes:
        check_target_path(path)
        if not isinstance(max_bytes, int) or not 0 <= max_bytes <= MAX_READ:
            raise InvalidTargetInput(f"max_bytes must be between 0 and {MAX_READ}")

        def _tail() -> bytes:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - max_bytes))
                return f.read(max_bytes)

        return await self._file_op(path, _tail)

    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        check_target_path(path)
        if not isinstance(offset, int) or offset < 0:
            raise InvalidTargetInput(f"offset must be >= 0, got {offset!r}")
        if not isinstance(length, int) or not 0 <= length <= MAX_READ:
            raise InvalidTargetInput(f"length must be between 0 and {MAX_READ}")

        def _range() -> bytes:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(length)

        return await self._file_op(path, _range)

    @staticmethod
    async def _file_op(path: str, fn: Callable[[], bytes]) -> bytes:
        try:
            return await anyio.to_thread.run_sync(fn)
        except OSError as exc:
            raise TargetError(f"cannot read {path} on the host: {exc.strerror or exc}") from exc

    async def file_size(self, path: str) -> int | None:
        check_target_path(path)
        try:
            return (await anyio.to_thread.run_sync(os.stat, path)).st_size
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise TargetError(f"cannot stat {path} on the host: {exc}") from exc

    async def paths_exist(self, paths: Sequence[str]) -> dict[str, bool]:
        checked = [check_target_path(p) for p in paths]
        return {p: os.path.exists(p) for p in checked}

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        check_target_path(path)

        def _write() -> None:
            parent = os.path.dirname(path) or "/"
            os.makedirs(parent, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=".vad-")
            try:
                os.fchmod(fd, mode)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)  # readers never see a half-written file
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

        try:
            await anyio.to_thread.run_sync(_write)
        except OSError as exc:
            raise TargetError(f"cannot write {path} on the host: {exc}") from exc
