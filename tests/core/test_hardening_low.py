"""Issue 27, finding 6 (low items), on the real CLI and the real file system: ``classify`` prints a log's words
without bidi / zero-width / control characters, and the state dir's ``runs/`` folder is the owner's only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from verl_async_dapo.context import AppContext

CLI = [sys.executable, "-m", "verl_async_dapo"]
REAL_OOM = Path(__file__).resolve().parents[1] / "logs" / "corpus" / "gpu_oom__torch_cuda_oom__entropy_from_logits_one_step_off.log"
HIDDEN = "\u202e\u2066\u200b\u200f\ufeff\x1b[2J\x07"
INVISIBLE = "\u202e\u2066\u200b\u200f\ufeff\x1b\x07"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_ASYNC_DAPO_")}
    env.update(VERL_ASYNC_DAPO_HOME=str(tmp_path / "state"), VERL_ASYNC_DAPO_CONFIG_DIR=str(tmp_path / "config"))
    return env


def test_classify_prints_no_bidi_zero_width_or_control_characters(tmp_path: Path) -> None:
    # The real log (its source URL on its first line), with hidden characters in its error line: a log can
    # carry anything the training printed.
    text = REAL_OOM.read_text("utf-8").replace("Tried to allocate", f"Tried {HIDDEN}to{HIDDEN} allocate")
    log = tmp_path / "hostile.log"
    log.write_text(text, "utf-8")
    for extra in ([], ["--json"]):
        proc = subprocess.run([*CLI, "classify", str(log), *extra], env=_env(tmp_path), capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert not any(ch in proc.stdout for ch in INVISIBLE), [ch for ch in INVISIBLE if ch in proc.stdout]
        assert "allocate 13.91 GiB" in proc.stdout
        assert "gpu_oom" in proc.stdout and "out of memory" in proc.stdout
    assert "\n" in json.loads(proc.stdout)["primary"]["excerpt"]  # an excerpt keeps its lines


def test_the_runs_folder_is_created_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        ctx = AppContext(home=tmp_path / "home", config_home=tmp_path / "config", env={})
        run = ctx.run_dir("run_abc")
        (tmp_path / "old" / "runs").mkdir(parents=True, mode=0o755)  # made by an older version
        older = AppContext(home=tmp_path / "old", config_home=tmp_path / "config", env={})
        older.run_dir("run_def")
    finally:
        os.umask(old)
    assert oct(run.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(run.stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "old" / "runs").stat().st_mode & 0o777) == "0o700"
    ctx.close()
    older.close()
