"""The harness itself: the Docker Engine, the cached test image, and the verl stand-in running inside it."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from docker.models.containers import Container

from harness.fixtures import BUILD_IMAGE, ENSURE_DOCKER, exec_argv, put_file, read_file

STEP_SECONDS = {"STANDIN_STEP_SECONDS": "0.05"}
DAPO = ["python3", "-m", "recipe.dapo.main_dapo"]
# verl.md §8: one ` - `-separated metric field.
FIELD = re.compile(r"^([^:\s]+):(?:np\.\w+\()?([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)|True|False)\)?$")
STEP_LINE = re.compile(r"^\((?:DAPO)?TaskRunner pid=\d+\) (step:(\d+) - .*)$", re.M)


def overrides(ckpt: str, steps: int, *extra: str) -> list[str]:
    """A minimal valid DAPO override list for the stand-in trees (any verl version in the image)."""
    return [
        "actor_rollout_ref.rollout.name=vllm",
        "data.train_batch_size=512",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=2",
        "trainer.test_freq=2",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={ckpt}",
        "trainer.resume_mode=auto",
        "trainer.val_before_train=False",
        *extra,
    ]


def step_numbers(stdout: str) -> list[int]:
    return [int(m.group(2)) for m in STEP_LINE.finditer(stdout)]


def test_ensure_docker_is_idempotent(docker_engine: None) -> None:
    started = time.monotonic()
    proc = subprocess.run(["bash", str(ENSURE_DOCKER)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Docker Engine is up" in proc.stderr
    assert time.monotonic() - started < 30


def test_cached_build_is_fast_and_prints_the_tag_last(test_image: str) -> None:
    started = time.monotonic()
    proc = subprocess.run(["bash", str(BUILD_IMAGE)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == test_image
    assert re.fullmatch(r"verl-async-dapo-test:[0-9a-f]{16}", test_image)
    assert time.monotonic() - started < 15


def test_image_has_python_hydra_and_both_verl_trees(container: Container) -> None:
    container.reload()
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert container.attrs["Config"]["Cmd"] == ["sleep", "infinity"]
    probe = exec_argv(container, ["python3", "-c", "import hydra, omegaconf, swanlab; print(hydra.__version__)"])
    assert probe.exit_code == 0, probe.output
    assert probe.stdout.startswith("1.3.")
    for path in (
        "/opt/verl-0.6.1/recipe/dapo/main_dapo.py",
        "/opt/verl-0.6.1/recipe/one_step_off_policy/main_ppo.py",
        "/opt/verl-0.9.1/recipe/dapo/main_dapo.py",
        "/opt/verl-0.9.1/verl/experimental/one_step_off_policy/main_ppo.py",
        "/verl/recipe/dapo/config/dapo_trainer.yaml",
        "/verl/verl/trainer/config/ppo_trainer.yaml",
        "/verl/verl_standin/standin_core.py",
    ):
        assert exec_argv(container, ["test", "-f", path]).exit_code == 0, path
    for tree, version in (("/opt/verl-0.6.1", "0.6.1"), ("/opt/verl-0.9.1", "0.9.1"), ("/verl", "0.9.1")):
        assert read_file(container, f"{tree}/verl/version/version").decode().strip() == version
    assert exec_argv(container, ["python3", "-c", "import torch"]).exit_code != 0  # the stand-in needs none


def test_healthy_run_checkpoints_then_resumes(container: Container) -> None:
    first = exec_argv(container, [*DAPO, *overrides("/tmp/ckpt", 3)], environment=STEP_SECONDS, workdir="/verl")
    assert first.exit_code == 0, first.output
    assert "Size of train dataloader: 33, Size of val dataloader: 1" in first.stdout
    assert "Total training steps: 3" in first.stdout
    assert "Training from scratch" in first.stdout
    assert re.search(r"\(WorkerDict pid=\d+\) ", first.stdout)
    assert step_numbers(first.stdout) == [1, 2, 3]
    for line in (m.group(1) for m in STEP_LINE.finditer(first.stdout)):
        fields = line.split(" - ")[1:]
        assert all(FIELD.match(f) for f in fields), line
        keys = {f.split(":", 1)[0] for f in fields}
        assert {"training/global_step", "timing_s/step", "critic/score/mean", "response_length/mean"} <= keys
        assert "perf/max_memory_allocated_gb" in keys
    assert "critic/score/mean:np.float64(" in first.stdout
    assert re.search(
        r"\) \rTraining Progress: 100%\|█+\| 3/3 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+(it/s|s/it)\]", first.stderr
    )
    assert "Final validation metrics: {'val-core/" in first.stdout
    assert read_file(container, "/tmp/ckpt/latest_checkpointed_iteration.txt").decode() == "3"
    for path in ("/tmp/ckpt/global_step_2/actor", "/tmp/ckpt/global_step_3/actor"):
        assert exec_argv(container, ["test", "-d", path]).exit_code == 0, path
    assert exec_argv(container, ["test", "-f", "/tmp/ckpt/global_step_2/data.pt"]).exit_code == 0

    second = exec_argv(container, [*DAPO, *overrides("/tmp/ckpt", 5)], environment=STEP_SECONDS, workdir="/verl")
    assert second.exit_code == 0, second.output
    assert "Load from checkpoint folder: /tmp/ckpt/global_step_3" in second.stdout
    assert "Setting global step to 3" in second.stdout
    assert "Training from scratch" not in second.stdout
    assert step_numbers(second.stdout) == [4, 5]
    assert "Training Progress:  60%|██████    | 3/5 [" in second.stderr  # tqdm starts at initial=3
    assert read_file(container, "/tmp/ckpt/latest_checkpointed_iteration.txt").decode() == "5"


def test_gpu_oom_until_offload_is_on(container: Container) -> None:
    control = {"oom_at_step": 2, "oom_kind": "gpu", "oom_unless": ["offload"]}
    put_file(container, "/verl/standin_control.json", json.dumps(control))
    oom = exec_argv(container, [*DAPO, *overrides("/tmp/ck", 3)], environment=STEP_SECONDS, workdir="/verl")
    assert oom.exit_code == 1, oom.output
    assert step_numbers(oom.stdout) == [1]
    assert "Error executing job with overrides: ['actor_rollout_ref.rollout.name=vllm'" in oom.stderr
    assert (
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_ref_update_actor()" in oom.stderr
    )
    assert (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        in oom.stderr
    )
    assert oom.stderr.index("Error executing job with overrides") < oom.stderr.index("CUDA out of memory")

    offload = [
        "actor_rollout_ref.actor.fsdp_config.param_offload=True",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
        "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    ]
    ok = exec_argv(container, [*DAPO, *overrides("/tmp/ck", 3, *offload)], environment=STEP_SECONDS, workdir="/verl")
    assert ok.exit_code == 0, ok.output
    assert "CUDA out of memory" not in ok.output
    assert "perf/max_memory_allocated_gb:38.42" in ok.stdout


def test_stale_override_gets_hydras_real_error(container: Container) -> None:
    stale = [*DAPO, *overrides("/tmp/ck", 1), "reward_model.overlong_buffer.enable=True"]
    new = exec_argv(container, stale, workdir="/opt/verl-0.9.1")
    assert new.exit_code == 1, new.output
    assert "Could not override 'reward_model.overlong_buffer.enable'." in new.stderr
    assert "Key 'overlong_buffer' is not in struct" in new.stderr
    assert "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace." in new.stderr

    full = exec_argv(container, stale, workdir="/opt/verl-0.9.1", environment={"HYDRA_FULL_ERROR": "1"})
    assert full.exit_code == 1
    assert "hydra.errors.ConfigCompositionException: Could not override" in full.stderr

    # The legacy key is valid on the in-tree recipe of 0.6.1: the same list composes there.
    old = exec_argv(container, [*stale, "--cfg", "job"], workdir="/opt/verl-0.6.1")
    assert old.exit_code == 0, old.output
    assert "overlong_buffer:" in old.stdout


@pytest.mark.parametrize(
    ("workdir", "module"),
    [
        ("/opt/verl-0.6.1", "recipe.one_step_off_policy.main_ppo"),
        ("/opt/verl-0.9.1", "verl.experimental.one_step_off_policy.main_ppo"),
    ],
)
def test_one_step_off_entry_per_layout(container: Container, workdir: str, module: str) -> None:
    argv = ["python3", "-m", module, *overrides("/tmp/ck", 1)]
    hybrid = exec_argv(container, argv, environment=STEP_SECONDS, workdir=workdir)
    assert hybrid.exit_code == 1  # one-step-off asserts `not self.hybrid_engine`
    assert "ray.exceptions.RayTaskError(AssertionError): ray::OneStepTaskRunner.run()" in hybrid.stderr
    ok = exec_argv(
        container, [*argv, "actor_rollout_ref.hybrid_engine=False"], environment=STEP_SECONDS, workdir=workdir
    )
    assert ok.exit_code == 0, ok.output
    assert re.search(r"^\(OneStepTaskRunner pid=\d+\) step:1 - ", ok.stdout, re.M)
