"""The same supervision on the other target kind and the other training mode: OOM recovery on the HOST target
(no container: the stand-in tree under tmp_path is VERL_HOME, the job runs under this venv's python3).
One-step-off-policy keeping its trainer/rollout GPU split across a relaunch (resuming FSDP needs the same world
size, verl.md §7) is decided in-process in tests/decisions/test_oom_ladder.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from sv_helpers import TRACKER, Cli, checkpoint_dir, last_bar

from harness.standin_files import parquet_bytes, write_model


def test_host_target_recovers_from_gpu_oom(cli: Cli, host_verl_tree: Path) -> None:
    write_model(host_verl_tree / "models" / "Qwen3-8B")
    (host_verl_tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (host_verl_tree / "data" / name).write_bytes(parquet_bytes())
    (host_verl_tree / "standin_control.json").write_text(
        json.dumps({"oom_at_step": 3, "oom_unless": ["offload"], "step_seconds": 0.1}), "utf-8"
    )
    # The host target runs `python3` from PATH: the Cli env puts this venv (which has hydra) first.
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1)
    started = cli.start("host")
    run_id = started["run_id"]
    assert started["target"] == "host"
    assert f'grep "Training Progress" {host_verl_tree}/train.log | tail -1' in started["monitor_commands"]

    status = cli.wait_final(run_id)
    assert status["status"] == "succeeded", cli.explain(run_id)
    assert (status["attempt"], status["resumed_from_step"], status["step"]) == (2, 2, 6)
    assert status["features"][-1] == "offload"
    first, second = cli.errors(run_id)["attempts"]
    assert (first["category"], first["changes_next_attempt"]) == ("gpu_oom", ["+offload"])
    assert (second["status"], second["exit_code"]) == ("succeeded", 0)
    assert second["reason_started"].endswith("resuming from step 2")

    a1, a2 = cli.attempts(run_id)
    assert a1.job and a2.job
    log1, log2 = Path(a1.job["log_path"]), Path(a2.job["log_path"])
    assert log1.parent != log2.parent and log1.is_relative_to(host_verl_tree)
    assert "CUDA out of memory" in log1.read_text() and "Setting global step to 2" in log2.read_text()
    ckpt = Path(checkpoint_dir(a2))
    assert ckpt.is_relative_to(host_verl_tree) and (ckpt / "global_step_2" / "actor").is_dir()
    assert (ckpt / TRACKER).read_text().strip() == "6"
    # {VERL_HOME}/train.log points at the current attempt; the original monitoring command works unchanged.
    assert (host_verl_tree / "train.log").resolve() == log2.resolve()
    line = subprocess.run(["sh", "-c", 'grep "Training Progress" "$1" | tail -1', "sh", str(host_verl_tree / "train.log")],
                          capture_output=True, text=True, check=True, timeout=30).stdout  # fmt: skip
    assert last_bar(line) == (6, 6), line
