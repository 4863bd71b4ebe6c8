"""The verl stand-in's failure injection and trackers, run on the HOST (venv python + a stand-in tree, no Docker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DAPO = [sys.executable, "-m", "recipe.dapo.main_dapo"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "SWANLAB_", "VERL_", "STANDIN_"))}
    return {**env, "STANDIN_STEP_SECONDS": "0", **extra}


def run(tree: Path, *args: str, control: dict | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    if control is not None:
        (tree / "standin_control.json").write_text(json.dumps(control))
    flags = [a for a in args if a.startswith("--")]  # Hydra's own flags go before the overrides
    argv = [
        *DAPO,
        *flags,
        "actor_rollout_ref.rollout.name=vllm",
        "data.train_batch_size=512",
        "trainer.total_training_steps=2",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={tree / 'ckpt'}",
        "trainer.val_before_train=False",
        *(a for a in args if not a.startswith("--")),
    ]
    return subprocess.run(argv, cwd=tree, env=clean_env(**env), capture_output=True, text=True, timeout=120)


def test_the_standin_process_reads_verls_yaml_on_libyaml(host_verl_tree: Path) -> None:
    """Importing the entry module switches OmegaConf to the C parser for the whole process, as its Hydra composes."""
    probe = ("import recipe.dapo.main_dapo, yaml\n"
             "from omegaconf import OmegaConf, _utils\n"
             "loader = _utils.get_yaml_loader()\n"
             "print(issubclass(loader, yaml.CSafeLoader), OmegaConf.load('recipe/dapo/config/dapo_trainer.yaml') is not None)")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", probe], cwd=host_verl_tree, env=clean_env(), capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"], proc.stdout


def test_the_standin_process_composes_once_and_a_bad_override_still_fails_in_hydras_words(host_verl_tree: Path) -> None:
    """@hydra.main's mode-reading compose is skipped (verl's configs never set hydra.mode): one compose per process,
    two when an override names hydra.mode; a stale key still fails with Hydra's own message, exit 1."""
    probe = ("import runpy, sys\n"
             "from hydra._internal.hydra import Hydra\n"
             "composed = Hydra.compose_config\n"
             "calls = []\n"
             "Hydra.compose_config = lambda self, *a, **k: calls.append(1) or composed(self, *a, **k)\n"
             "sys.argv = ['main_dapo', 'trainer.total_training_steps=0', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('recipe.dapo.main_dapo', run_name='__main__', alter_sys=True)\n"
             "finally:\n    print('composes', len(calls), flush=True)\n")  # fmt: skip

    def composes(*overrides: str) -> tuple[int, str]:
        proc = subprocess.run([sys.executable, "-c", probe, *overrides], cwd=host_verl_tree, env=clean_env(),
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        counted = [line for line in proc.stdout.splitlines() if line.startswith("composes ")]
        assert counted, proc.stdout + proc.stderr
        return int(counted[-1].split()[1]), proc.stderr

    assert composes()[0] == 1
    assert composes("hydra.mode=RUN")[0] == 2
    count, stderr = composes("trainer.no_such_key_here=1")
    assert count == 1
    assert "Could not override 'trainer.no_such_key_here'" in stderr, stderr


OFFLOAD = "actor_rollout_ref.actor.fsdp_config.param_offload=True"
ACT_OFFLOAD = "actor_rollout_ref.model.enable_activation_offload=True"


def test_oom_unless_needs_every_feature(host_verl_tree: Path) -> None:
    control = {"oom_at_step": 1, "oom_unless": ["offload", "recompute"]}
    only_offload = run(host_verl_tree, OFFLOAD, control=control)
    assert only_offload.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in only_offload.stderr
    both = run(host_verl_tree, OFFLOAD, ACT_OFFLOAD)
    assert both.returncode == 0, both.stderr


def test_oom_at_startup_and_key_predicates(host_verl_tree: Path) -> None:
    cap = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    control = {"oom_at_step": 0, "oom_unless": [f"{cap}<=8192"]}
    oom = run(host_verl_tree, control=control)
    assert oom.returncode == 1
    assert "ray::WorkerDict.actor_rollout_ref_init_model()" in oom.stderr
    assert "Training Progress" not in oom.stderr  # died before the loop
    assert run(host_verl_tree, f"{cap}=8192").returncode == 0


def test_megatron_offload_counts_as_offload(host_verl_tree: Path) -> None:
    control = {"oom_at_step": 1, "oom_unless": ["offload"]}
    megatron = ["--config-name=dapo_megatron_trainer", "actor_rollout_ref.actor.megatron.param_offload=True"]
    result = run(host_verl_tree, *megatron, control=control)
    assert result.returncode == 0, result.stderr[-3000:]


def test_rollout_oom_until_gpu_memory_utilization_is_low(host_verl_tree: Path) -> None:
    control = {"oom_at_step": 1, "oom_kind": "rollout", "gpu_memory_utilization_max": 0.6}
    high = run(host_verl_tree, "actor_rollout_ref.rollout.gpu_memory_utilization=0.9", control=control)
    assert high.returncode == 1
    assert "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62" in high.stderr
    assert "ray.exceptions.RayTaskError(RuntimeError)" in high.stderr
    low = run(host_verl_tree, "actor_rollout_ref.rollout.gpu_memory_utilization=0.6")
    assert low.returncode == 0, low.stderr


def test_host_oom_is_rays_memory_monitor(host_verl_tree: Path) -> None:
    result = run(host_verl_tree, control={"oom_at_step": 2, "oom_kind": "host"})  # no oom_unless: always
    assert result.returncode == 1
    assert "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory." in result.stderr
    assert "killed due to memory pressure (OOM)" in result.stderr
    assert "CUDA out of memory" not in result.stderr
    # "!feature": host memory runs out only while CPU offload is on.
    control = {"oom_at_step": 1, "oom_kind": "host", "oom_unless": ["!offload"]}
    assert run(host_verl_tree, OFFLOAD, control=control).returncode == 1
    assert run(host_verl_tree).returncode == 0


@pytest.mark.parametrize(
    ("fail", "anchors"),
    [
        ("config", ["RayTaskError(AssertionError)", "must be divisible by minimal possible batch size"]),
        ("missing_file", ["RayTaskError(FileNotFoundError)", "FileNotFoundError: Unable to find '"]),
        ("import", ["ImportError: cannot import name 'TaskRunner' from 'verl.trainer.main_ppo'"]),
        ("nccl_timeout", ["Watchdog caught collective operation timeout: WorkNCCL(", "Timeout(ms)=600000",
                          "ray.exceptions.ActorDiedError: The actor died unexpectedly"]),
        ("worker_died", ["(raylet) A worker died or was killed while executing a task", "ActorDiedError"]),
        ("too_difficult", ["Generated too many. Please check if your data are too difficult"]),
    ],
)  # fmt: skip
def test_injected_failures_print_the_real_text(host_verl_tree: Path, fail: str, anchors: list[str]) -> None:
    result = run(host_verl_tree, control={"fail": fail})
    assert result.returncode == 1, result.stdout[-2000:]
    for anchor in anchors:
        assert anchor in result.stderr, (anchor, result.stderr[-3000:])
    assert "out of memory" not in result.stderr.replace("OOM killer", "")


def test_sigkill_and_hang(host_verl_tree: Path) -> None:
    killed = run(host_verl_tree, control={"fail": "sigkill", "fail_at_step": 1})
    assert killed.returncode == -signal.SIGKILL
    (host_verl_tree / "standin_control.json").write_text(json.dumps({"hang": True, "fail_at_step": 1}))
    argv = [*DAPO, "actor_rollout_ref.rollout.name=vllm", "trainer.logger=[console]", "trainer.val_before_train=False"]
    proc = subprocess.Popen(argv, cwd=host_verl_tree, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(3)
        assert proc.poll() is None, "a hanging run must keep running"
    finally:
        proc.kill()  # only the process this test started
        out, _ = proc.communicate(timeout=30)
    assert b"step:1 - " not in out


def test_bad_control_file_is_a_test_error_not_a_verl_failure(host_verl_tree: Path) -> None:
    result = run(host_verl_tree, control={"oom_at_stpe": 1})
    assert result.returncode == 2
    assert "bad control file" in result.stderr and "oom_at_stpe" in result.stderr


def test_swanlab_and_file_loggers(host_verl_tree: Path, tmp_path: Path) -> None:
    pytest.importorskip("swanlab")
    logs = tmp_path / "swanlog"
    jsonl = tmp_path / "metrics.jsonl"
    result = run(
        host_verl_tree,
        "trainer.logger=[console,swanlab,file]",
        SWANLAB_MODE="offline",
        SWANLAB_LOG_DIR=str(logs),
        VERL_FILE_LOGGER_PATH=str(jsonl),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(logs.glob("run-*")), "swanlab.init(logdir=SWANLAB_LOG_DIR) made no run directory"
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert records[-1]["data"]["training/global_step"] == 2
