"""Helpers for the shell-script tests (no ``__init__.py`` here: pytest puts this directory on ``sys.path``, so the
module name is unique across tests/).

``ScriptRunner`` runs scripts/*.sh with ``bash`` as a subprocess (argv list, explicit env dict, no shell strings) and
the CLI with the same environment. The environment is built from scratch (only PATH, HOME, locale and Docker client
variables are inherited), so a developer's SWANLAB_* or VERL_* settings cannot leak into a test.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.models.containers import Container

from harness.fixtures import REPO_ROOT, put_file
from harness.standin_files import put_tree
from harness.waiting import wait_until

SCRIPTS_DIR = REPO_ROOT / "scripts"
VENV_BIN = Path(sys.executable).parent  # the venv running pytest holds the verl-async-dapo entry point
CLI = VENV_BIN / "verl-async-dapo"
MODEL_DIR = "/verl/models/Qwen3-8B"
DATA_FILES = ("/verl/data/dapo-math-17k.parquet", "/verl/data/aime-2024.parquet")
CONTROL_FILE = "/verl/standin_control.json"
INHERITED = (
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "VERL_ASYNC_DAPO_ALLOW_NO_GPUS",  # the test image has no GPUs (tests/conftest.py allows it explicitly)
    "VERL_ASYNC_DAPO_WATCHDOG",  # off for the suite (tests/conftest.py)
)
ACTIVE = {"starting", "running", "retrying"}
FINAL = {"succeeded", "failed", "stopped"}


@dataclass(frozen=True)
class ScriptResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def describe(self) -> str:
        head = f"{self.argv} exited {self.returncode} after {self.seconds:.1f}s"
        return f"{head}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@dataclass
class ScriptRunner:
    """Runs scripts/*.sh and the CLI with one private state home and one target container."""

    home: Path
    container_name: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.home / "state"

    def run(self, script: str, *args: str, env: dict[str, str] | None = None, timeout_s: float = 180) -> ScriptResult:
        argv = ["bash", str(SCRIPTS_DIR / script), *args]
        began = time.monotonic()
        proc = subprocess.run(argv, env={**self.env, **(env or {})}, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)  # fmt: skip
        return ScriptResult(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - began)

    def cli(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(CLI), *args], env=self.env, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)  # fmt: skip

    def cli_json(self, *args: str) -> Any:
        proc = self.cli(*args, "--json")
        assert proc.returncode in (0, 1), f"verl-async-dapo {args} exited {proc.returncode}: {proc.stderr}"
        return json.loads(proc.stdout)

    def wait_until_final(self, run_id: str, deadline_s: float = 90) -> dict[str, Any]:
        """Wait until the store says the run ended (bounded), then return what ``status <run> --json`` says.

        The store, not the CLI, is polled: a ``status`` process costs ~0.4 s of CPU, and a poll every 0.5 s made
        this wait cost more than the run it waits for (the status the script's user sees is still asked once)."""

        def ended() -> bool:
            with closing(sqlite3.connect(self.state_dir / "state.db")) as conn:
                row = conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            return row is not None and row[0] in FINAL

        wait_until(ended, f"run {run_id} to end", deadline_s, lambda: json.dumps(self.cli_json("status", run_id)))
        return self.cli_json("status", run_id)

    def store_counts(self) -> tuple[int, int]:
        """(live sessions, runs) in this home's state DB; (0, 0) when no DB was ever created.

        A session that `start` gave up (abandoned_at set) is kept for the record but is never current.
        """
        db = self.state_dir / "state.db"
        if not db.exists():
            return (0, 0)
        with sqlite3.connect(db) as conn:
            sessions = conn.execute("SELECT count(*) FROM sessions WHERE abandoned_at IS NULL").fetchone()[0]
            runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        return (int(sessions), int(runs))

    def stop_active_runs(self) -> None:
        if not (self.state_dir / "state.db").exists():
            return
        proc = self.cli("runs", "--json")
        for row in json.loads(proc.stdout or "[]"):
            if row["status"] in ACTIVE:
                self.cli("stop", row["run_id"])


def script_env(home: Path, container_name: str) -> dict[str, str]:
    """The manual run that works: stand-in friendly settings, a private state and config home, SwanLab off."""
    env = {name: os.environ[name] for name in INHERITED if name in os.environ}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
    env.update({
        "VERL_ASYNC_DAPO_HOME": str(home / "state"), "VERL_ASYNC_DAPO_CONFIG_DIR": str(home / "config"),
        "CONTAINER": container_name, "TRAIN_STEPS": "6", "FRAMEWORK": "fsdp", "SWANLAB_MODE": "disabled",
        "SAVE_FREQ": "2",
    })  # fmt: skip
    return env


def prepare(container: Container) -> Container:
    """Create the model directory and data files preflight reads (the stand-in does not read them)."""
    put_tree(container)
    return container


def write_control(container: Container, **settings: Any) -> None:
    """Failure injection for the stand-in (schema: tests/standin/entry/standin_control.py)."""
    put_file(container, CONTROL_FILE, json.dumps(settings))
