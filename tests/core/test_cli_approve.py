"""The CLI's share of issue 27, item 3: overrides and parameters that load code or write outside the run's tree need
the person's yes — typed at the terminal, or ``--approve`` — and refused overrides are refused. The real CLI as a
subprocess, a pty for the prompt."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "verl_async_dapo"]
EVIL = "data.custom_cls.path=/tmp/evil_dataset.py"
MISSING = "vad-no-such-container-i27"  # ends the start right after the approval gate, nothing created


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_ASYNC_DAPO_") and k != "EXTRA_OVERRIDES"}
    env.update(VERL_ASYNC_DAPO_HOME=str(tmp_path / "state"), VERL_ASYNC_DAPO_CONFIG_DIR=str(tmp_path / "config"),
               SWANLAB_MODE="disabled")  # fmt: skip
    return env


def _start(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "start", "--container", MISSING, *extra], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize("args", [("--override", EVIL), ("--reward-fn-path", "/tmp/reward.py"),
                                  ("--override", "trainer.default_local_dir=/etc/ckpt")])  # fmt: skip
def test_without_a_terminal_it_needs_the_flag(tmp_path: Path, args: tuple[str, str]) -> None:
    proc = _start(tmp_path, *args)
    assert proc.returncode != 0 and "only the user may approve" in proc.stderr, proc.stderr
    assert "--approve" in proc.stderr and args[1].split("=")[-1] in proc.stderr, proc.stderr
    approved = _start(tmp_path, *args, "--approve")
    assert "only the user may approve" not in approved.stderr and MISSING in approved.stderr, approved.stderr


def test_refused_overrides_are_refused_with_the_flag_too(tmp_path: Path) -> None:
    proc = _start(tmp_path, "--override", "+ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD=/tmp/x.so", "--approve")
    assert proc.returncode != 0 and "is refused" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("answer", "approved"), [(b"n\n", False), (b"y\n", True)])
def test_a_terminal_shows_the_values_and_asks(tmp_path: Path, answer: bytes, approved: bool) -> None:
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, [*CLI, "start", "--container", MISSING, "--override", EVIL], _env(tmp_path))  # noqa: S606
    seen = b""
    deadline = time.monotonic() + 90
    while b"[y/N]" not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 1)[0]:
            seen += os.read(fd, 4096)
    assert EVIL.encode() in seen and b"imports this Python file" in seen, seen
    os.write(fd, answer)
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.waitpid(pid, 0)
    assert (b"only the user may approve" in seen) is not approved, seen
    assert (MISSING.encode() in seen.split(b"[y/N]")[-1]) is approved, seen
