"""Helpers for the supervisor end-to-end tests: drive the real CLI in subprocesses, read the state store,
look inside the container.

The product is only ever driven through ``python -m verl_async_dapo …`` with an isolated environment (its own
state and config dirs, SwanLab disabled, no proxy variables, this venv first on PATH so the host target's
``python3`` has hydra). Every wait is a bounded poll with a message that says what was awaited and shows the
run's state, the supervisor's own log and its events, so a failure explains itself.
(No ``__init__.py`` in this directory: pytest puts it on sys.path, so this module's name is unique in tests/.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from docker.models.containers import Container

from harness.fixtures import exec_argv
from harness.standin_files import parquet_bytes, put_tree, write_model
from harness.waiting import wait_until
from verl_async_dapo.status import ACTIVE_RUN_STATUSES
from verl_async_dapo.store import AttemptRow, RunRow, Store

T = TypeVar("T")

VENV_BIN = Path(sys.executable).parent
CLI = (sys.executable, "-m", "verl_async_dapo")
FINAL = frozenset({"succeeded", "failed", "stopped"})
ACTIVE = frozenset(ACTIVE_RUN_STATUSES)
RUN_DEADLINE_S = 90.0  # bounded, with headroom: the 2-core machine is shared with other suites
# `start` runs preflight (a handful of docker execs) and waits up to 3 s for a SwanLab link; ~4-6 s when idle.
# The bound is generous because other engineers' suites share the machine's two cores.
START_BUDGET_S = 30.0
POLL_S = 0.2
CONTAINER_HOME = "/verl"
CONTROL_FILE = "standin_control.json"
TRACKER = "latest_checkpointed_iteration.txt"

# Variables of the developer's shell that must never leak into a test run (proxies would be frozen into the run).
_PASSTHROUGH = ("HOME", "LANG", "LC_ALL", "TMPDIR", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "USER",
                "VERL_ASYNC_DAPO_ALLOW_NO_GPUS", "VERL_ASYNC_DAPO_WATCHDOG")  # fmt: skip

# Progress bar as verl's tqdm prints it (verl.md §8): "Training Progress:  50%|█████     | 3/6 [...]".
_BAR_RE = re.compile(r"Training Progress:.*?\|\s*(\d+)/(\d+)\s*\[")


@dataclass
class Cli:
    """The product's CLI with an isolated environment, plus the state store it writes (same path)."""

    home: Path
    env: dict[str, str]
    store: Store

    @classmethod
    def isolated(cls, home: Path) -> Cli:
        home.mkdir(parents=True, exist_ok=True)
        env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
        env.update(
            PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            VERL_ASYNC_DAPO_HOME=str(home),
            VERL_ASYNC_DAPO_CONFIG_DIR=str(home / "config"),
            SWANLAB_MODE="disabled",
            FRAMEWORK="fsdp",
            TRAIN_STEPS="6",
            SAVE_FREQ="2",
            PYTHONUNBUFFERED="1",
        )
        # Create the schema before any CLI runs, so the test's reader never races a CLI's first migration.
        return cls(home=home, env=env, store=Store(home / "state.db"))

    def set(self, **variables: str | int | float) -> None:
        self.env.update({k: str(v) for k, v in variables.items()})

    # -- running commands ------------------------------------------------------------------------
    def argv(self, *args: str) -> list[str]:
        return [*CLI, *args]

    def run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), env=self.env, cwd=self.home, capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip

    def json(self, *args: str, codes: tuple[int, ...] = (0,), timeout: float = 60.0) -> Any:
        proc = self.run(*args, "--json", timeout=timeout)
        assert proc.returncode in codes, (
            f"`verl-async-dapo {' '.join(args)} --json` exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
        return json.loads(proc.stdout)

    def start(self, container: str, *extra: str) -> dict[str, Any]:
        """``start --json``: returns at once with a run id (the training goes on in the background)."""
        began = time.monotonic()
        result = self.json("start", "--container", container, *extra, timeout=START_BUDGET_S + 30)
        elapsed = time.monotonic() - began
        assert elapsed < START_BUDGET_S, f"start took {elapsed:.1f} s; it must return without waiting for training"
        assert result["run_id"].startswith("run_"), result
        return result

    def status(self, run_id: str) -> dict[str, Any]:
        return self.json("status", run_id, codes=(0, 1))  # exit 1 = the run failed

    def errors(self, run_id: str) -> dict[str, Any]:
        return self.json("errors", run_id)

    # -- the store ---------------------------------------------------------------------------------
    def run_row(self, run_id: str) -> RunRow:
        row = self.store.run(run_id)
        assert row is not None, f"run {run_id} is not in the store"
        return row

    def attempts(self, run_id: str) -> list[AttemptRow]:
        return self.store.attempts(run_id)

    def explain(self, run_id: str) -> str:
        """Everything useful when a wait times out: the run row, attempts, events and the supervisor's logs."""
        row = self.store.run(run_id)
        lines = [f"run: {row.status if row else None} reason={row.final_reason if row else None} "
                 f"supervisor_pid={row.supervisor_pid if row else None}"]  # fmt: skip
        for a in self.store.attempts(run_id):
            lines.append(f"attempt {a.n}: {a.status} exit={a.exit_code} error={a.error} decision={a.decision}")
        lines += [f"event {e.level} {e.kind}: {e.message}" for e in self.store.events(run_id)]
        for name in ("supervisor.log", "supervisor.out"):
            path = self.home / "runs" / run_id / name
            if path.is_file():
                lines.append(f"--- {name} (tail) ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(lines)

    def wait_status(self, run_id: str, statuses: frozenset[str] | set[str], timeout: float = RUN_DEADLINE_S) -> RunRow:
        """Poll the store (cheap: no subprocess) until the run is in one of ``statuses``."""
        return wait_until(
            lambda: (row if (row := self.run_row(run_id)).status in statuses else None),
            f"run {run_id} to reach {sorted(statuses)}", timeout, lambda: self.explain(run_id),
        )  # fmt: skip

    def wait_final(self, run_id: str, timeout: float = RUN_DEADLINE_S) -> dict[str, Any]:
        """Wait for a final state in the store, then return what ``status --json`` says about it."""
        self.wait_status(run_id, FINAL, timeout)
        return self.status(run_id)

    def wait_step(self, run_id: str, step: int, timeout: float = RUN_DEADLINE_S) -> RunRow:
        """Until the supervisor has recorded progress at ``step`` or later for a still-active run."""

        def reached() -> RunRow | None:
            row = self.run_row(run_id)
            assert row.status not in FINAL, f"run ended ({row.status}) before step {step}:\n{self.explain(run_id)}"
            return row if row.progress and (row.progress.get("step") or 0) >= step else None

        return wait_until(reached, f"run {run_id} to reach step {step}", timeout, lambda: self.explain(run_id))

    # -- cleanup -------------------------------------------------------------------------------------
    def stop_all(self) -> None:
        """Stop every run this test left active, then end its supervisors (by pid, checked to be ours)."""
        for row in self.store.runs(100):
            if row.status in ACTIVE:
                self.run("stop", row.id, "--json", timeout=60)
        for row in self.store.runs(100):
            pid = row.supervisor_pid
            if pid and is_our_supervisor(pid, row.id):
                os.kill(pid, signal.SIGKILL)


# -- processes on this machine ------------------------------------------------------------------------
def proc_cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def proc_alive(pid: int) -> bool:
    """Alive and not a zombie (a killed supervisor whose parent has not reaped it yet holds nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def is_our_supervisor(pid: int, run_id: str) -> bool:
    cmdline = proc_cmdline(pid) or ""
    return proc_alive(pid) and "verl_async_dapo" in cmdline and "supervise" in cmdline and run_id in cmdline


# -- the container ----------------------------------------------------------------------------------------
def prepare_verl_home(container: Container, control: dict[str, Any] | None = None) -> None:
    """The model and data files preflight reads (harness.standin_files) and the stand-in's control file."""
    put_tree(container)
    if control is not None:
        write_control(container, control)


def write_control(container: Container, control: dict[str, Any]) -> None:
    out = exec_argv(container, ["sh", "-c", 'printf %s "$1" > "$2"', "sh", json.dumps(control),
                                f"{CONTAINER_HOME}/{CONTROL_FILE}"])  # fmt: skip
    assert out.exit_code == 0, out.output


def sh(container: Container, script: str, *args: str) -> str:
    """A fixed shell script (arguments positional) in the container; returns stdout, asserting success."""
    out = exec_argv(container, ["sh", "-c", script, "sh", *args], timeout_s=60)
    assert out.exit_code == 0, f"{script!r} exited {out.exit_code}: {out.output}"
    return out.stdout


def cat(container: Container, path: str) -> str:
    return sh(container, 'cat -- "$1"', path)


def exists(container: Container, path: str) -> bool:
    return exec_argv(container, ["test", "-e", path]).exit_code == 0


@dataclass(frozen=True)
class Proc:
    pid: int
    pgid: int
    stat: str
    args: str

    @property
    def argv0(self) -> str:
        return os.path.basename(self.args.split(" ", 1)[0])


def processes(container: Container) -> list[Proc]:
    """Live processes in the container. Zombies are left out: the test image's PID 1 (`sleep infinity`) reaps
    nothing, so a killed job's children linger as zombies that hold no memory and no GPU (like the product's
    own liveness checks, which ignore them too)."""
    rows = []
    for line in sh(container, "ps -e -o pid=,pgid=,stat=,args=").splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[0].isdigit() and not parts[2].startswith("Z"):
            rows.append(Proc(int(parts[0]), int(parts[1]), parts[2], parts[3]))
    return rows


def launchers(container: Container) -> list[Proc]:
    """The detached launcher shells (``bash -c LAUNCHER vad-launch …``); setsid's wrapper is not counted."""
    return [p for p in processes(container) if p.argv0 == "bash" and " vad-launch " in p.args]


def trainers(container: Container, module: str = "main_") -> list[Proc]:
    """The stand-in trainer processes (``python3 -m recipe.dapo.main_dapo …`` and the one-step-off entry)."""
    return [p for p in processes(container) if p.argv0.startswith("python") and f".{module}" in p.args]


def last_bar(text: str) -> tuple[int, int] | None:
    """(step, total) of the last ``Training Progress`` bar in ``text``."""
    found = _BAR_RE.findall(text.replace("\r", "\n"))
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def override_value(attempt: AttemptRow, key: str) -> str | None:
    for item in attempt.overrides:
        name, _, value = item.partition("=")
        if name.lstrip("+") == key:
            return value
    return None


def prepare_host_tree(tree: Path, control: dict[str, Any]) -> None:
    """A host-target stand-in tree with the default model dir and data files, and the stand-in's control file."""
    write_model(tree / "models" / "Qwen3-8B")
    (tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (tree / "data" / name).write_bytes(parquet_bytes())
    (tree / CONTROL_FILE).write_text(json.dumps(control), "utf-8")
