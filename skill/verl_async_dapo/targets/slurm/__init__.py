"""A SLURM cluster as a training target: each attempt is one batch job, submitted from this (login) node.

Named ``slurm``. This machine must have the SLURM client commands (sbatch, squeue, scancel, sinfo) and see the
same files as the compute nodes (VERL_HOME, the model, the data, the checkpoints, this tool's run directory):
the shared filesystem every SLURM cluster has. Short commands (preflight's probes, verl's Hydra compose before a
launch, the checkpoint check before a relaunch) run here, on the login node, like the host target: the same
Python environment on the shared filesystem is what the job runs too.

How the Target contract maps onto SLURM:

* ``start_detached``: writes the argv and the environment into the job dir (0600, targets/slurm/script.py), the
  fixed batch script beside them, a "queued" line into the log, then ``sbatch --parsable`` with the run's options
  as argv (``--output`` = the attempt's log). The job id goes into the handle's ``exec_id`` and
  ``<job_dir>/slurm_job_id``; a restarted supervisor finds its job again by that file or by the job's name
  (derived from the job dir), so it never submits twice.
* ``job_status``: ``squeue -t all`` while slurmctld remembers the job (MinJobAge), else ``sacct``; the exit code
  is the trainer's (the script's ``rc`` file), else sacct's or scontrol's. ``queued`` while PENDING (the stall
  detector waits), ``scheduler_state`` the final state (TIMEOUT, PREEMPTED, NODE_FAIL → categories.SCHEDULER_KILL).
* ``follow``: reads the log file from where it was and polls the job's state; ends once the job has ended.
* ``stop_job``: ``scancel`` (SLURM sends SIGTERM, then SIGKILL after its KillWait), then waits for the job to end.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import anyio

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError, TargetUnavailable
from verl_async_dapo.records import JobHandle
from verl_async_dapo.slurm_options import SlurmOptions, job_name_for
from verl_async_dapo.targets.base import (
    FOLLOW_DEFAULT_BYTES,
    CommandResult,
    JobStatus,
    TargetKind,
    check_argv,
    check_job_inputs,
    check_target_path,
    parse_rc,
)
from verl_async_dapo.targets.host import HostTarget
from verl_async_dapo.targets.slurm.script import (
    BATCH_SCRIPT,
    START_RAY_ENV,
    env_records,
    nul_records,
    queued_line,
)
from verl_async_dapo.targets.slurm.states import (
    JobState,
    check_job_id,
    exit_code_of,
    parse_job_id,
    parse_sacct,
    parse_squeue,
    sbatch_words,
)
from verl_async_dapo.verl.launch_env import has_credentials, looks_secret

SLURM_TARGET_NAME = "slurm"
JOB_ID_FILE = "slurm_job_id"
PGID_MARKER = "pgid"  # the supervisor's "did the attempt start?" file: here it holds the job id
SCRIPT_FILE = "job.sbatch"
COMMAND_TIMEOUT = 60.0
FOLLOW_POLL_SECONDS = 0.5
STATUS_POLL_SECONDS = 2.0
STOP_WAIT_SECONDS = 60.0  # past SLURM's KillWait (default 30 s)
_CHUNK = 1 << 20


def is_slurm_target(name: str) -> bool:
    return name == SLURM_TARGET_NAME


def submit_env() -> dict[str, str]:
    """The environment sbatch runs with (and, by --export=ALL, the job starts from): ours without anything that
    looks secret, because slurmctld keeps a job's environment in its state files. Secrets go in the env file."""
    return {k: v for k, v in os.environ.items() if not looks_secret(k) and not has_credentials(v)}


class SlurmTarget(HostTarget):
    """SLURM from this login node (``slurm``); ``options`` are the run's batch-job parameters."""

    kind = TargetKind.SLURM

    def __init__(self, options: SlurmOptions | None = None) -> None:
        super().__init__()
        self.name = SLURM_TARGET_NAME
        self.options = options or SlurmOptions()

    def __repr__(self) -> str:
        return f"SlurmTarget({self.options.describe()!r})"

    # -- commands ------------------------------------------------------------------------------------------------

    async def slurm(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                    timeout: float = COMMAND_TIMEOUT) -> CommandResult:  # fmt: skip
        """A SLURM client command with the submit environment (never the secret one)."""
        argv = check_argv(argv)
        try:
            with anyio.fail_after(timeout):
                done = await anyio.run_process(argv, check=False, env=dict(env or submit_env()),
                                               stdin=subprocess.DEVNULL)  # fmt: skip
        except TimeoutError:
            raise TargetUnavailable(f"{argv[0]} did not answer within {timeout:g} s (is slurmctld up?)") from None
        except FileNotFoundError:
            raise TargetUnavailable(f"{argv[0]} is not installed here: the SLURM target needs the SLURM client "
                                    "commands on this machine (a login node)") from None  # fmt: skip
        return CommandResult(done.returncode, done.stdout.decode("utf-8", "replace"),
                             done.stderr.decode("utf-8", "replace"))  # fmt: skip

    async def ensure_running(self) -> None:
        res = await self.slurm(["sinfo", "-h", "-o", "%P"], timeout=30)
        if res.exit_code != 0:
            raise TargetUnavailable(f"SLURM does not answer: {sbatch_words(res.stderr or res.stdout)}")

    async def test_submit(self, options: SlurmOptions, cwd: str) -> str | None:
        """``sbatch --test-only`` with these options: None when SLURM would take the job, else its own words."""
        check_target_path(cwd, "cwd")
        argv = options.argv(job_name="vad-test-only", log_path="/dev/null", cwd=cwd, script="/dev/null",
                            job_dir="/", test_only=True)[:-2]  # fmt: skip
        res = await self.slurm([*argv, "--wrap=true"], timeout=30)
        return None if res.exit_code == 0 else (sbatch_words(res.stderr or res.stdout) or f"exit {res.exit_code}")

    # -- jobs ------------------------------------------------------------------------------------------------------

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
        if not os.path.isdir(cwd):
            raise TargetError(f"the working directory {cwd} does not exist on this login node")
        name = job_name_for(job_dir)
        existing = await self._existing_job(job_dir, name)
        if existing is not None:  # submitted before (a restarted supervisor): reattach, never submit twice
            return JobHandle(target=self.name, job_dir=job_dir, log_path=log_path, exec_id=existing)
        env_vars[START_RAY_ENV] = "1" if self.options.start_ray else "0"
        script = posixpath.join(job_dir, SCRIPT_FILE)

        def prepare() -> None:
            os.makedirs(job_dir, mode=0o700, exist_ok=True)
            os.chmod(job_dir, 0o700)
            _write(posixpath.join(job_dir, "argv"), nul_records(argv), 0o600)
            _write(posixpath.join(job_dir, "env"), env_records(env_vars), 0o600)
            _write(script, BATCH_SCRIPT.encode(), 0o700)
            os.makedirs(os.path.dirname(log_path), mode=0o700, exist_ok=True)
            fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(queued_line(name, self.options.describe()))

        try:
            await anyio.to_thread.run_sync(prepare)
        except OSError as exc:
            raise TargetError(f"cannot prepare the job files in {job_dir}: {exc}") from exc
        res = await self.slurm(self.options.argv(job_name=name, log_path=log_path, cwd=cwd, script=script,
                                                 job_dir=job_dir))  # fmt: skip
        job_id = parse_job_id(res.stdout) if res.exit_code == 0 else None
        if job_id is None:
            _forget_secrets(job_dir)  # the secrets have no job to go to
            raise TargetError(f"sbatch refused the job: {sbatch_words(res.stderr or res.stdout) or res.exit_code}")
        for marker in (JOB_ID_FILE, PGID_MARKER):
            _write(posixpath.join(job_dir, marker), f"{job_id}\n".encode(), 0o600)
        return JobHandle(target=self.name, job_dir=job_dir, log_path=log_path, exec_id=job_id)

    async def _existing_job(self, job_dir: str, name: str) -> str | None:
        recorded = _read_job_id(job_dir)
        if recorded is not None:
            return recorded
        # -t all: a job that already ended (the supervisor died right after sbatch) is still this attempt's job.
        res = await self.slurm(["squeue", "-h", "-t", "all", "--name", name, "-o", "%i"], timeout=30)
        found = [ln.strip() for ln in res.stdout.splitlines() if ln.strip().isdigit()] if res.exit_code == 0 else []
        return found[0] if found else None

    def _job_id(self, handle: JobHandle) -> str:
        if handle.exec_id and handle.exec_id.isdigit():
            return check_job_id(handle.exec_id)
        found = _read_job_id(handle.job_dir)
        if found is None:
            raise TargetError(f"no SLURM job id recorded in {handle.job_dir}: the job was never submitted")
        return found

    async def job_state(self, job_id: str) -> JobState | None:
        """squeue while slurmctld remembers the job, else sacct; None when neither knows it."""
        check_job_id(job_id)
        res = await self.slurm(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T|%r"], timeout=30)
        if res.exit_code == 0:
            state = parse_squeue(res.stdout)
            if state is not None:
                return state
        elif "Invalid job id" not in res.stderr:  # slurmctld down or busy: not "the job is gone"
            raise TargetError(f"squeue failed: {sbatch_words(res.stderr or res.stdout)}")
        acct = await self.slurm(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,Reason"], timeout=30)
        return parse_sacct(acct.stdout) if acct.exit_code == 0 else None

    async def _scontrol_exit_code(self, job_id: str) -> int | None:
        res = await self.slurm(["scontrol", "show", "job", "-o", job_id], timeout=30)
        for word in res.stdout.split() if res.exit_code == 0 else []:
            if word.startswith("ExitCode="):
                return exit_code_of(word.removeprefix("ExitCode="))
        return None

    async def job_status(self, handle: JobHandle) -> JobStatus:
        job_id = self._job_id(handle)
        rc = parse_rc(_read_small(posixpath.join(handle.job_dir, "rc")))
        state = await self.job_state(job_id)
        if state is None:  # forgotten by slurmctld and no accounting: the rc file is all there is
            _forget_secrets(handle.job_dir)
            return JobStatus(running=False, exit_code=rc, pgid=None)
        if state.active and not (rc is not None and state.state == "COMPLETING"):
            return JobStatus(running=True, exit_code=None, pgid=None, queued=state.queued,
                             scheduler_state=state.state)  # fmt: skip
        _forget_secrets(handle.job_dir)  # a job cancelled while pending never read (and deleted) its env file
        code = rc if rc is not None else state.exit_code
        if code is None and state.state not in ("COMPLETING", "COMPLETED"):
            code = await self._scontrol_exit_code(job_id)
        if code is None and state.state == "COMPLETED":
            code = 0
        if code == 0 and rc is None and state.state != "COMPLETED":  # e.g. "0:15" of a cancel: never a success
            code = None
        return JobStatus(running=False, exit_code=code, pgid=None, scheduler_state=state.state)

    async def stop_job(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        """scancel, then wait until SLURM says the job has ended (it TERMs, then KILLs after KillWait)."""
        job_id = self._job_id(handle)
        state = await self.job_state(job_id)
        if state is None or not state.active:
            return
        res = await self.slurm(["scancel", job_id], timeout=30)
        if res.exit_code != 0 and "already completing or completed" not in res.stderr:
            raise TargetError(f"scancel {job_id} failed: {sbatch_words(res.stderr or res.stdout)}")
        deadline = time.monotonic() + max(grace_seconds, 0.0) + STOP_WAIT_SECONDS
        while (state := await self.job_state(job_id)) is not None and state.active and state.state != "COMPLETING":
            if time.monotonic() > deadline:
                raise TargetError(f"SLURM job {job_id} is still {state.state} after scancel")
            await anyio.sleep(0.5)

    def follow(self, handle: JobHandle, *, from_offset: int | None = None) -> AsyncIterator[bytes]:
        check_target_path(handle.log_path, "log_path")
        if from_offset is not None and (not isinstance(from_offset, int) or from_offset < 0):
            raise InvalidTargetInput("from_offset must be >= 0")
        return self._follow_job(handle, from_offset)

    async def _follow_job(self, handle: JobHandle, from_offset: int | None) -> AsyncIterator[bytes]:
        """The log as it grows, until the job has ended (then its last bytes): SLURM writes it on the compute node,
        this node sees it on the shared filesystem, so it is polled rather than tailed."""
        if from_offset is None:
            size = await self.file_size(handle.log_path) or 0
            from_offset = max(0, size - FOLLOW_DEFAULT_BYTES)
        position, checked = from_offset, 0.0
        ended = False
        while True:
            data = await self.read_range(handle.log_path, position, _CHUNK)
            if data:
                position += len(data)
                yield data
                if len(data) == _CHUNK:
                    continue
            if ended:
                return
            if time.monotonic() - checked >= STATUS_POLL_SECONDS:
                checked = time.monotonic()
                ended = not (await self.job_status(handle)).running  # one more read after it ended: the last bytes
                if ended:
                    continue
            await anyio.sleep(FOLLOW_POLL_SECONDS)


def _write(path: str, data: bytes, mode: int) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _forget_secrets(job_dir: str) -> None:
    Path(job_dir, "env").unlink(missing_ok=True)


def _read_small(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(64)
    except OSError:
        return None


def _read_job_id(job_dir: str) -> str | None:
    text = (_read_small(posixpath.join(job_dir, JOB_ID_FILE)) or b"").decode("ascii", "replace").strip()
    return text if text.isdigit() else None
