"""An in-process target: the supervisor's decisions tested in milliseconds of CPU instead of seconds of processes.

In the spirit of httpx's ``MockTransport``: the same ``Target`` interface as the host target, over this machine's
files, but nothing is spawned. A job is the verl stand-in's own trainer (tests/standin/entry, the one test double)
run in a thread of the test process, its config composed in-process by real Hydra from the stand-in verl tree, its
output written to the attempt's log as a launcher would, its checkpoints written where verl writes them, its exit
code kept in the job dir's ``rc`` file. The pre-launch Hydra check (``python3 -c COMPOSE_SCRIPT``) runs in-process
too. Everything after that is the product's own code: the real ``Supervisor`` (given this target), the real store,
classifier, policy, resume check and watchman.

What it leaves to the real targets (tests/supervisor, tests/targets): processes, process groups and signals, the
launcher script, ``tail -F``, a supervisor killed and healed. A job that would SIGKILL itself ends its thread with
exit code 137 (what the launcher records for a killed child); a hung job sleeps until ``stop_job``.

Runs on it: tests/harness/inprocess_runs.py (``InProcessRuns``, the ``inprocess`` fixture of tests/decisions).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import posixpath
import re
import sys
import threading
import traceback
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from standin.entry.standin_yaml import libyaml_for_omegaconf
from verl_async_dapo.plans import prelaunch
from verl_async_dapo.records import JobHandle
from verl_async_dapo.targets.base import CommandResult, JobStatus, check_target_path
from verl_async_dapo.targets.host import HostTarget

# One Hydra at a time in this process: its GlobalHydra is a singleton (the pre-launch check and a job's start), and
# verl's configs name their search path relative to the working directory (``file://verl/trainer/config``), so a
# compose runs with the process in the target's cwd, as ``python3`` there would be.
_HYDRA = threading.Lock()


@contextlib.contextmanager
def _hydra_in(cwd: str | None) -> Iterator[None]:
    with _HYDRA, libyaml_for_omegaconf():
        saved = os.getcwd()
        if cwd:
            os.chdir(cwd)
        try:
            yield
        finally:
            os.chdir(saved)
POLL_S = 0.02
_CHECKS: dict[tuple[str | None, ...], CommandResult] = {}  # InProcessTarget._checked
# What differs between two runs of the same plan: the run's id (store.new_id) and the experiment name's start stamp.
_RUN_ID = re.compile(r"run_[A-Za-z0-9_-]{22}|(?<=-)\d{8}-\d{6}\b")
KILLED_RC = 137  # 128 + SIGKILL, what the launcher writes for a child that was killed
FAKE_PGID_BASE = 4_000_000  # above any real pid (pid_max is at most 4194304): never signalled, never found in /proc


class _Stopped(BaseException):
    """Raised in a job's thread by its sleeps once ``stop_job`` asked it to end (a BaseException: the trainer
    catches no such thing)."""


class _Killed(BaseException):
    """Raised in a job's thread where the stand-in would SIGKILL its own process."""


def _standin(tree: Path) -> Any:
    """The stand-in's trainer module, imported from the tree's ``verl_standin`` package (the same files every
    stand-in tree carries: which tree it comes from does not matter, the tree is passed to each trainer)."""
    if str(tree) not in sys.path:
        sys.path.insert(0, str(tree))
    from verl_standin import standin_core

    return standin_core


@dataclass
class _Entry:
    module: str
    config_dir: str
    config_name: str
    overrides: list[str]


def _parse_entry(argv: Sequence[str], cwd: str) -> _Entry:
    """``python3 -m <module> [--config-path=… --config-name=…] overrides…`` as a verl launch plan writes it."""
    args = list(argv)
    if len(args) < 3 or args[1] != "-m":
        raise ValueError(f"not a verl entry launch: {args[:3]}")
    module = args[2]
    # The stand-in entries' @hydra.main: config_path "config" beside the module, and their config names.
    config_path = posixpath.join(*module.split(".")[:-1], "config")
    config_name = "one_step_off_ppo_trainer" if "one_step_off" in module else "dapo_trainer"
    overrides: list[str] = []
    for arg in args[3:]:
        if arg.startswith("--config-path="):
            config_path = arg.split("=", 1)[1]
        elif arg.startswith("--config-name="):
            config_name = arg.split("=", 1)[1]
        else:
            overrides.append(arg)
    config_dir = config_path if config_path.startswith("/") else posixpath.join(cwd, config_path)
    return _Entry(module, config_dir, config_name, overrides)


def _workflow(module: str) -> tuple[str, str]:
    """(workflow, entry) as the stand-in's entry modules pass them to ``standin_core.run``."""
    if "one_step_off" in module:
        return "one_step_off", "main_ppo"
    return "dapo", module.rsplit(".", 1)[-1]


@dataclass
class _Job:
    job_dir: str
    log_path: str
    pgid: int
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class _ThreadProcess:
    """The stand-in's ``Process`` for a trainer in a thread: sleeps a stop interrupts, no signals. A hung trainer
    that is stopped prints what Ray's driver prints on SIGTERM, as the stand-in process does."""

    def __init__(self, job: _Job, standin: Any, stream: Any) -> None:
        self.job, self.standin, self.stream = job, standin, stream

    @property
    def pid(self) -> int:
        return self.job.pgid

    def sleep(self, seconds: float) -> None:
        if self.job.stop.wait(max(seconds, 0.0)):
            raise _Stopped

    def hang(self) -> None:
        self.job.stop.wait()
        self.stream.write(self.standin.sigterm_lines(self.pid))
        self.stream.flush()
        raise _Stopped

    def kill(self) -> None:
        raise _Killed


class InProcessTarget(HostTarget):
    """The host target with jobs as threads and the Hydra check in-process (see the module's docstring)."""

    def __init__(self, tree: Path) -> None:
        super().__init__()
        self.tree = tree
        self.jobs: dict[str, _Job] = {}
        self.commands: list[list[str]] = []  # every argv ``run`` was asked to run, for tests to look at
        self._next_pgid = FAKE_PGID_BASE

    # -- short commands ----------------------------------------------------------------------------------
    async def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                  timeout: float = 60.0) -> CommandResult:  # fmt: skip
        args = list(argv)
        self.commands.append(args)
        if args[:2] == ["python3", "-c"] and args[2] in (prelaunch.COMPOSE_SCRIPT, prelaunch.COMPOSE_MANY_SCRIPT):
            # In a worker thread, as a subprocess would be: the event loop goes on following logs meanwhile.
            return await anyio.to_thread.run_sync(self._checked, args[2], args[3:], cwd)
        if args[:3] == ["ln", "-sfn", "--"]:
            link = args[4]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
            os.symlink(args[3], link)
            return CommandResult(0, "", "")
        return await super().run(argv, env=env, cwd=cwd, timeout=timeout)

    def _checked(self, script: str, args: list[str], cwd: str | None) -> CommandResult:
        """The Hydra check's answer, remembered for this process by its arguments with this tree's path taken out:
        it depends only on verl's config files (every stand-in tree is a copy of one template per version) and the
        override strings, and a test's tree path reaches it only inside path values Hydra does not open."""
        root = str(self.tree)

        def general(text: str) -> str:
            return _RUN_ID.sub("<run>", text.replace(root, "<tree>"))

        key = (script, general(cwd) if cwd else None, *(general(a) for a in args))
        known = _CHECKS.get(key)
        if known is None:
            known = self._python_c(script, args, cwd)
            if _RUN_ID.search(known.stdout):  # an answer that names the run cannot serve another
                return known
            known = _CHECKS[key] = CommandResult(known.exit_code, known.stdout.replace(root, "<tree>"), known.stderr)
        return CommandResult(known.exit_code, known.stdout.replace("<tree>", root), known.stderr)

    @staticmethod
    def _python_c(script: str, args: list[str], cwd: str | None) -> CommandResult:
        """The product's own check script, executed here as ``python3 -c`` would (argv, cwd, stdout, exit code)."""
        out = io.StringIO()
        code = 0
        # Its output is its print()s: given their own ``print`` rather than a redirected sys.stdout, which pytest's
        # live logging swaps back and forth from any thread.
        scope = {"__name__": "__main__", "print": functools.partial(print, file=out)}
        with _hydra_in(cwd):
            saved = sys.argv
            sys.argv = ["-c", *args]
            try:
                exec(compile(script, "<string>", "exec"), scope)  # noqa: S102 - the product's own script
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            finally:
                sys.argv = saved
        return CommandResult(code, out.getvalue(), "")

    # -- jobs ----------------------------------------------------------------------------------------------
    async def start_detached(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str, job_dir: str,
                             log_path: str) -> JobHandle:  # fmt: skip
        check_target_path(cwd, "cwd")
        os.makedirs(job_dir, mode=0o700, exist_ok=True)
        self._next_pgid += 1
        job = _Job(job_dir, log_path, self._next_pgid)
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).touch()
        entry = _parse_entry(argv, cwd)
        workflow, entry_name = _workflow(entry.module)
        standin = _standin(self.tree)
        def composed() -> Any:
            with _hydra_in(cwd):
                from hydra import compose, initialize_config_dir

                with initialize_config_dir(config_dir=entry.config_dir, version_base=None):
                    return compose(config_name=entry.config_name, overrides=entry.overrides)

        try:
            cfg = await anyio.to_thread.run_sync(composed)
        except Exception as exc:  # Hydra refused the overrides: what @hydra.main prints, exit 1
            self._finish(job, f"{exc}\n\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n", 1)
            Path(job_dir, "pgid").write_text(str(job.pgid))
            self.jobs[job_dir] = job
            return JobHandle(target=self.name, job_dir=job_dir, log_path=log_path, exec_id=None)

        def play() -> None:
            with open(log_path, "a", encoding="utf-8") as log:
                try:
                    standin.Trainer(cfg, workflow, entry_name, tree_root=Path(cwd), cwd=cwd,
                                    process=_ThreadProcess(job, standin, log), stream=log).fit()  # fmt: skip
                    code = 0
                except _Stopped:  # the group was signalled: the launcher died with it and wrote no rc
                    return
                except _Killed:
                    code = KILLED_RC
                except BaseException as exc:  # what Hydra's wrapper prints around the task function, exit 1
                    log.write(f"Error executing job with overrides: {entry.overrides!r}\n")
                    log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
                    log.write("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")
                    code = 1
            Path(job_dir, "rc").write_text(str(code))

        job.thread = threading.Thread(target=play, name=f"standin-{Path(job_dir).name}", daemon=True)
        Path(job_dir, "pgid").write_text(str(job.pgid))
        self.jobs[job_dir] = job
        job.thread.start()
        return JobHandle(target=self.name, job_dir=job_dir, log_path=log_path, exec_id=None)

    @staticmethod
    def _finish(job: _Job, text: str, code: int) -> None:
        with open(job.log_path, "a", encoding="utf-8") as log:
            log.write(text)
        Path(job.job_dir, "rc").write_text(str(code))

    def _job(self, handle: JobHandle) -> _Job | None:
        return self.jobs.get(handle.job_dir)

    async def job_status(self, handle: JobHandle) -> JobStatus:
        job = self._job(handle)
        rc_path = Path(handle.job_dir, "rc")
        if job is not None and job.running:
            return JobStatus(running=True, exit_code=None, pgid=job.pgid)
        rc = int(rc_path.read_text()) if rc_path.exists() else None
        return JobStatus(running=False, exit_code=rc, pgid=job.pgid if job else None)

    async def stop_job(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        job = self._job(handle)
        if job is None or job.thread is None:
            return
        job.stop.set()
        await anyio.to_thread.run_sync(job.thread.join, max(grace_seconds, 1.0))

    def follow(self, handle: JobHandle, *, from_offset: int | None = None) -> AsyncIterator[bytes]:
        return self._follow_file(handle, from_offset)

    async def _follow_file(self, handle: JobHandle, from_offset: int | None) -> AsyncIterator[bytes]:
        job = self._job(handle)
        path = handle.log_path
        size = os.path.getsize(path) if os.path.exists(path) else 0
        position = from_offset if from_offset is not None else max(0, size - (1 << 20))
        while True:
            alive = job is not None and job.running
            with open(path, "rb") as f:
                f.seek(position)
                chunk = f.read()
            if chunk:
                position += len(chunk)
                yield chunk
            elif not alive:
                return
            else:
                await anyio.sleep(POLL_S)

    def stop_all(self) -> None:
        """Test teardown: end every job's thread (a hung one too)."""
        for job in self.jobs.values():
            job.stop.set()
        for job in self.jobs.values():
            if job.thread is not None:
                job.thread.join(10)
