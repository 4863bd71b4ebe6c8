"""An existing Ray cluster as a training target, driven only through the dashboard's Jobs REST API.

Named ``ray:<name>``; the address comes from ``ray_clusters.json`` or VERL_ASYNC_DAPO_RAY_ADDRESS
(see targets/ray/clusters.py). verl must already be installed on the cluster, at VERL_HOME on the
node that runs job entrypoints (the head node, unless the cluster says otherwise); nothing is
uploaded (no runtime_env ``working_dir``).

How the Target contract maps onto Ray:

* ``start_detached``: one Ray job per attempt. Its submission_id is derived from the job_dir, so a
  restarted supervisor that submits again gets "already exists" and reattaches: never two copies.
  The plan's env and the secret env go into runtime_env ``env_vars`` only, never the entrypoint
  (Ray prints the entrypoint into the job log and the dashboard). The handle keeps the submission
  id in ``exec_id``; job_dir/log_path stay as identifiers (the log is also mirrored to log_path on
  the driver node).
* ``job_status``: SUCCEEDED → 0, FAILED → the driver's exit code (1 when Ray has none), STOPPED →
  143, PENDING/RUNNING → running, unknown job → ended without an exit code.
* ``follow``: polls ``GET /api/jobs/{id}/logs`` and yields only the bytes past what was yielded
  (the REST API has no byte ranges), complete lines only until the job ends; the poll interval
  grows with the log's size so a huge log does not turn into a download loop.
* ``stop_job``: ``POST /api/jobs/{id}/stop`` (Ray sends SIGTERM to the entrypoint's process tree,
  then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S, which we set per job). The cluster itself is never
  stopped: other users' jobs live there.
* Files: a job's own log and its ``<job_dir>/pgid`` marker are answered from the Jobs API.
  Any other path (checkpoints, verl's tree, data) is read by a short probe job (PROBE_SCRIPT, ~2 s
  each), i.e. on the node that runs entrypoints; multi-node setups need those paths on shared
  storage anyway (verl.md §7).
* ``run``: the same probe job runs the argv with separate stdout/stderr and its exit code.
"""

from __future__ import annotations

import base64
import contextlib
import posixpath
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError, TargetUnavailable
from verl_async_dapo.records import JobHandle
from verl_async_dapo.targets.base import (
    COMMAND_NOT_FOUND,
    FOLLOW_DEFAULT_BYTES,
    CommandResult,
    JobStatus,
    Target,
    TargetKind,
    check_argv,
    check_env,
    check_job_inputs,
    check_target_path,
)
from verl_async_dapo.targets.ray.api import ACTIVE_STATUSES, JobInfo, RayJobsClient
from verl_async_dapo.targets.ray.clusters import (
    RAY_PREFIX,
    cluster_name_of,
    normalise_address,
    resolve,
)
from verl_async_dapo.targets.ray.jobs import (
    _SID_RE,
    _check_no_secret_in,
    _complete_lines,
    _JobFile,
    exit_code_of,
    submission_id_for,
)
from verl_async_dapo.targets.ray.resources import ClusterResources, read_resources
from verl_async_dapo.targets.ray.scripts import (
    WRITE_DATA_ENV,
    decode_b64,
    launch_entrypoint,
    parse_result,
    probe_entrypoint,
)
from verl_async_dapo.untrusted import quoted

T = TypeVar("T")

STOP_WAIT_SECONDS = 10  # RAY_JOB_STOP_WAIT_TIME_S: TERM → KILL grace inside Ray, like the host's
PROBE_POLL_SECONDS = 0.2
PROBE_OVERHEAD_SECONDS = 60.0  # a probe job's own start (supervisor actor) on a busy cluster
FOLLOW_POLL_SECONDS = 0.5
FOLLOW_POLL_PER_MIB = 0.15  # a 64 MiB log is polled every ~10 s
FOLLOW_POLL_MAX = 15.0
MAX_READ = 16 << 20  # file reads travel base64 inside a job log: keep them modest
MAX_WRITE = 64 << 10  # write_file data travels in one env var (Linux caps one at 128 KiB)
MAX_EXISTS_PATHS = 256
METADATA_KEY = "verl-async-dapo"
PGID_MARKER = "pgid"  # supervisor's "did the attempt start?" file, answered from the Jobs API

class RayTarget(Target):
    """A Ray cluster reached through its dashboard (``ray:<name>``)."""

    kind = TargetKind.RAY

    def __init__(self, name: str, address: str | None = None) -> None:
        self.cluster = cluster_name_of(name)  # validates the name now; the address is looked up on use
        self.name = f"{RAY_PREFIX}{self.cluster}"
        self._address = normalise_address(address) if address is not None else None
        self._client: RayJobsClient | None = None

    def __repr__(self) -> str:
        return f"RayTarget({self.name!r})"

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def client(self) -> RayJobsClient:
        if self._client is None:
            self._client = RayJobsClient(self._address or resolve(self.name))
        return self._client

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """A blocking client call in a worker thread; cancelling the caller abandons the request."""
        return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

    def _sid(self, handle: JobHandle) -> str:
        if handle.exec_id and _SID_RE.fullmatch(handle.exec_id):
            return handle.exec_id
        return submission_id_for(handle.job_dir)

    async def resources(self) -> ClusterResources:
        """GPUs and CPUs per alive node, as Ray counts them (for preflight)."""
        return await self._call(read_resources, self.client)

    # -- Target ----------------------------------------------------------------------------------

    async def ensure_running(self) -> None:
        await self._call(self.client.version)

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
    ) -> CommandResult:
        argv = check_argv(argv)
        env_vars = check_env(env)
        if cwd is not None:
            check_target_path(cwd, "cwd")
        result = await self._probe("run", [cwd or "", f"{timeout:g}", "--", *argv], env_vars, timeout)
        if result is None:
            return CommandResult(COMMAND_NOT_FOUND, "", "python3: command not found on the Ray cluster "
                                 "(needed there to run commands)")  # fmt: skip
        if result.get("error") == "timeout":
            raise TargetError(f"{argv[0]!r} did not finish within {timeout:g} s on {self.name}")
        if "error" in result:
            raise TargetError(f"cannot start {argv[0]!r} on {self.name}: {result['error']}")
        return CommandResult(
            int(result.get("rc", 1)),
            decode_b64(result.get("out")).decode("utf-8", "replace"),
            decode_b64(result.get("err")).decode("utf-8", "replace"),
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
        argv, env_vars = check_job_inputs(argv, env, cwd, job_dir, log_path)
        sid = submission_id_for(job_dir)
        entrypoint = launch_entrypoint(job_dir, log_path, cwd, argv)
        _check_no_secret_in(entrypoint, env_vars)
        env_vars.setdefault("RAY_JOB_STOP_WAIT_TIME_S", str(STOP_WAIT_SECONDS))
        metadata = {METADATA_KEY: "attempt", "job_dir": job_dir, "log_path": log_path}
        try:
            created = await self._call(
                lambda: self.client.submit(entrypoint, submission_id=sid, env_vars=env_vars, metadata=metadata)
            )
        except TargetUnavailable:
            # The answer may be what got lost (a timeout after Ray accepted the job): the id is
            # deterministic, so ask for it before reporting a launch failure for a job that runs.
            if await self._call(self.client.job, sid) is None:
                raise
            created = False
        if not created:  # submitted before (a restarted supervisor): reattach, never submit twice
            info = await self._call(self.client.job, sid)
            if info is None:
                raise TargetError(f"{self.name} refused job {sid} as a duplicate but does not list it")
            if info.metadata.get("job_dir") != job_dir:
                raise TargetError(f"{self.name} already has a job {sid} for another directory; not reusing it")
        return JobHandle(target=self.name, job_dir=job_dir, log_path=log_path, exec_id=sid)

    async def job_status(self, handle: JobHandle) -> JobStatus:
        info = await self._call(self.client.job, self._sid(handle))
        if info is None:
            return JobStatus(running=False, exit_code=None, pgid=None)
        if info.status in ACTIVE_STATUSES:
            return JobStatus(running=True, exit_code=None, pgid=None)
        return JobStatus(running=False, exit_code=exit_code_of(info), pgid=None)

    async def stop_job(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        sid = self._sid(handle)
        await self._call(self.client.stop, sid)
        # Ray escalates to SIGKILL after RAY_JOB_STOP_WAIT_TIME_S; wait a little longer than that.
        deadline = time.monotonic() + max(grace_seconds, STOP_WAIT_SECONDS) + 20.0
        while True:
            info = await self._call(self.client.job, sid)
            if info is None or info.terminal:
                return
            if time.monotonic() > deadline:
                raise TargetError(f"job {sid} on {self.name} is still {info.status} after the stop request")
            await anyio.sleep(PROBE_POLL_SECONDS)

    def follow(self, handle: JobHandle, *, from_offset: int | None = None) -> AsyncIterator[bytes]:
        if from_offset is not None and (not isinstance(from_offset, int) or from_offset < 0):
            raise InvalidTargetInput("from_offset must be >= 0")
        return self._follow(self._sid(handle), from_offset)

    async def _follow(self, sid: str, from_offset: int | None) -> AsyncIterator[bytes]:
        sent = from_offset
        while True:
            # Status first, then logs: a log read after seeing a final status is the complete log.
            info = await self._call(self.client.job, sid)
            if info is None:
                raise TargetError(f"{self.name} has no job {sid}")
            data = await self._call(self.client.logs, sid, info.driver_node_id)
            if sent is None:
                sent = max(0, len(data) - FOLLOW_DEFAULT_BYTES)
            # Partial lines wait for their end while the job runs (a half-written UTF-8 character
            # would otherwise be yielded garbled); at the end everything goes out.
            end = len(data) if info.terminal else _complete_lines(data, sent)
            if end > sent:
                yield data[sent:end]
                sent = end
            if info.terminal:
                return
            await anyio.sleep(min(FOLLOW_POLL_MAX, FOLLOW_POLL_SECONDS + FOLLOW_POLL_PER_MIB * len(data) / (1 << 20)))

    # -- files -----------------------------------------------------------------------------------

    async def _job_file(self, path: str) -> _JobFile | None:
        """The job whose log or pgid marker ``path`` is, else None.

        Only ``*.log`` and ``pgid`` names are looked up, so ordinary paths cost no extra request.
        """
        parent, base = posixpath.split(path)
        if (base != PGID_MARKER and not base.endswith(".log")) or parent in ("", "/"):
            return None
        info = await self._call(self.client.job, submission_id_for(parent))
        if info is None or info.metadata.get("job_dir") != parent:
            return None
        if base == PGID_MARKER:
            return _JobFile(is_log=False, info=info)
        return _JobFile(is_log=True, info=info) if info.metadata.get("log_path") == path else None

    async def _job_file_bytes(self, job: _JobFile) -> bytes:
        if not job.is_log:
            return f"{job.info.submission_id}\n".encode()
        return await self._call(self.client.logs, job.info.submission_id, job.info.driver_node_id)

    async def read_tail(self, path: str, max_bytes: int) -> bytes:
        check_target_path(path)
        if not isinstance(max_bytes, int) or not 0 <= max_bytes <= MAX_READ:
            raise InvalidTargetInput(f"max_bytes must be between 0 and {MAX_READ}")
        job = await self._job_file(path)
        if job is not None:
            data = await self._job_file_bytes(job)
            return data[len(data) - max_bytes :] if max_bytes else b""
        return await self._read(path, "tail", [path, str(max_bytes)])

    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        check_target_path(path)
        if not isinstance(offset, int) or offset < 0:
            raise InvalidTargetInput(f"offset must be >= 0, got {offset!r}")
        if not isinstance(length, int) or not 0 <= length <= MAX_READ:
            raise InvalidTargetInput(f"length must be between 0 and {MAX_READ}")
        job = await self._job_file(path)
        if job is not None:
            return (await self._job_file_bytes(job))[offset : offset + length]
        return await self._read(path, "range", [path, str(offset), str(length)])

    async def _read(self, path: str, op: str, args: list[str]) -> bytes:
        result = await self._probe_checked(op, args)
        if result.get("missing"):
            raise TargetError(f"cannot read {path} on {self.name}: No such file or directory")
        if "error" in result:
            raise TargetError(f"cannot read {path} on {self.name}: {result['error']}")
        return decode_b64(result.get("data"))

    async def file_size(self, path: str) -> int | None:
        check_target_path(path)
        job = await self._job_file(path)
        if job is not None:
            return len(await self._job_file_bytes(job))
        result = await self._probe_checked("size", [path])
        if result.get("missing"):
            return None
        if "error" in result:
            raise TargetError(f"cannot stat {path} on {self.name}: {result['error']}")
        return int(result["size"])

    async def paths_exist(self, paths: Sequence[str]) -> dict[str, bool]:
        checked = [check_target_path(p) for p in paths]
        if len(checked) > MAX_EXISTS_PATHS:
            raise InvalidTargetInput(f"at most {MAX_EXISTS_PATHS} paths per call")
        found: dict[str, bool] = {}
        for path in checked:
            if await self._job_file(path) is not None:
                found[path] = True
        rest = [p for p in dict.fromkeys(checked) if p not in found]
        if rest:  # one probe job for all of them
            result = await self._probe_checked("exists", rest)
            flags = result.get("exists")
            if not isinstance(flags, list) or len(flags) != len(rest):
                raise TargetError(f"{self.name}: unexpected answer checking paths: {result.get('error', result)}")
            found.update(zip(rest, (bool(f) for f in flags), strict=True))
        return {p: found[p] for p in checked}

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        check_target_path(path)
        if len(data) > MAX_WRITE:
            raise InvalidTargetInput(f"write_file on a Ray cluster takes at most {MAX_WRITE} bytes")
        env = {WRITE_DATA_ENV: base64.b64encode(data).decode()}
        result = await self._probe_checked("write", [path, f"{mode & 0o7777:o}"], env)
        if not result.get("ok"):
            raise TargetError(f"cannot write {path} on {self.name}: {result.get('error', 'no such directory')}")

    # -- probe jobs ------------------------------------------------------------------------------

    async def _probe_checked(self, op: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
        result = await self._probe(op, args, env or {}, 60.0)
        if result is None:
            raise TargetError(f"python3 is not available on {self.name}'s head node: cannot check files there")
        return result

    async def _probe(self, op: str, args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any] | None:
        """Run PROBE_SCRIPT as a short job and return its result; None when python3 is missing there.

        The job is deleted afterwards (hundreds of preflight probes would bury real jobs in
        ``ray job list``), and stopped if we give up or are cancelled first.
        """
        nonce = "vad" + secrets.token_hex(16)
        sid = f"vad-probe-{nonce[3:19]}"
        entrypoint = probe_entrypoint(nonce, op, args)
        metadata = {METADATA_KEY: "probe", "op": op}
        await self._call(lambda: self.client.submit(entrypoint, submission_id=sid, env_vars=env, metadata=metadata))
        info: JobInfo | None = None
        try:
            deadline = time.monotonic() + timeout + PROBE_OVERHEAD_SECONDS
            while info is None or not info.terminal:
                if time.monotonic() > deadline:
                    raise TargetError(f"a short job ({op}) on {self.name} did not finish in time; is the cluster busy?")
                await anyio.sleep(PROBE_POLL_SECONDS)
                info = await self._call(self.client.job, sid)
            log = await self._call(self.client.logs, sid, info.driver_node_id)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(TargetError):
                if info is None or not info.terminal:
                    await anyio.to_thread.run_sync(self.client.stop, sid)
                await anyio.to_thread.run_sync(self.client.delete, sid)
        result = parse_result(log, nonce)
        if result is not None:
            return result
        if info.driver_exit_code == COMMAND_NOT_FOUND:
            return None
        reason = quoted(info.message.strip().splitlines()[0], 300) if info.message.strip() else info.status
        raise TargetError(f"a short job ({op}) on {self.name} ended without a result: {reason}")
