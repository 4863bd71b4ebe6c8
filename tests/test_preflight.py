"""Preflight checks and the Hydra dry-run, against the real test container and this host.

The container comes from the harness test image: python3 + hydra-core, verl stand-in trees at
/verl (0.9.1), /opt/verl-0.9.1 and /opt/verl-0.6.1 (real configs from the wheels), no GPUs.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from docker.models.containers import Container

from harness.fixtures import exec_argv, silent_first
from harness.standin_files import DATA_NAMES, MODEL_FILES, parquet_bytes
from verl_async_dapo.exceptions import InvalidTargetInput, TargetError
from verl_async_dapo.plans import preflight
from verl_async_dapo.plans.preflight import CheckStatus, PreflightReport, run_preflight
from verl_async_dapo.plans.prelaunch import ValidationCache, validate_overrides
from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.targets.base import Target
from verl_async_dapo.targets.docker import DockerTarget
from verl_async_dapo.targets.host import HostTarget
from verl_async_dapo.verl import EntryPlan
from verl_async_dapo.wording import Face

STALE_DAPO_KEY = "reward_model.overlong_buffer.enable=True"  # the 0.6.x name; gone from 0.7.1 on
CURRENT_DAPO_KEY = "reward.reward_kwargs.overlong_buffer_cfg.enable=True"
DAPO_CONFIG = ("recipe/dapo/config", "dapo_trainer")

# nvidia-smi stand-in: the csv the real one prints for the two queries preflight sends, in the format of the real
# H200 captures in tests/memory/fixtures/ (the numbers: two 80 GB H100s; GPU 1 is busy with another process).
FAKE_NVIDIA_SMI = b"""#!/bin/sh
case "$1" in
  --query-gpu=*) printf '0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559, 1, 81007\\n1, GPU-bbbb, NVIDIA H100 80GB HBM3, 81559, 40000, 41008\\n' ;;
  --query-compute-apps=*) printf 'GPU-bbbb, 4242, /usr/bin/python3, 39990\\n' ;;
  *) exit 2 ;;
esac
"""
# nvidia-smi on a machine whose driver sees no GPU: it answers, with no rows.
EMPTY_NVIDIA_SMI = b"""#!/bin/sh
exit 0
"""


def settings(**values: object) -> TrainingSettings:
    return TrainingSettings.model_validate(values)


def by_name(report: PreflightReport, name: str) -> preflight.Check:
    (check,) = [c for c in report.checks if c.name == name]
    return check


async def provide_inputs(target: Target, home: str) -> None:
    for name, content in MODEL_FILES.items():
        await target.write_file(f"{home}/models/Qwen3-8B/{name}", content)
    for name in DATA_NAMES:
        await target.write_file(f"{home}/data/{name}", parquet_bytes())


@pytest.fixture
def docker_target(container: Container) -> DockerTarget:
    return DockerTarget(container.name)


@pytest.fixture
def venv_python_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host target runs `python3` from PATH: make that the venv's (it has hydra), as an activated venv would."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


async def test_container_missing_model_and_no_gpus_are_errors_together(docker_target: DockerTarget) -> None:
    report = await run_preflight(docker_target, settings())
    lines = report.lines()
    assert not report.ok
    model = by_name(report, "MODEL_PATH")
    assert model.status is CheckStatus.ERROR
    missing = f"[error] MODEL_PATH: /verl/models/Qwen3-8B does not exist in {docker_target.name} → download the model there"
    # The agent is told the start_training argument, a person at the CLI the environment variable.
    assert f"{missing} or set the start_training argument model_path (or MODEL_PATH in the server's environment)" in lines
    assert f"{missing} or set MODEL_PATH" in report.lines(Face.CLI)
    gpus = by_name(report, "gpus")
    assert gpus.status is CheckStatus.ERROR and gpus.detail.startswith("no GPU visible: nvidia-smi is not available")
    gpu_line = next(line for line in lines if line.startswith("[error] gpus: "))
    assert "recreate it with --gpus all" in gpu_line and "allow_no_gpus=true" in gpu_line, gpu_line
    assert "--allow-no-gpus" in next(line for line in report.lines(Face.CLI) if line.startswith("[error] gpus: "))
    assert "install the NVIDIA driver" not in gpu_line  # container advice for a container
    assert by_name(report, "verl").detail == "verl 0.9.1 (/verl/verl/version/version)"
    assert by_name(report, "dapo recipe").detail == "/verl/recipe/dapo/main_dapo.py"
    assert by_name(report, "hydra").detail.startswith("hydra-core 1.3")
    assert by_name(report, "target").status is CheckStatus.OK
    assert by_name(report, "disk").status in (CheckStatus.OK, CheckStatus.WARNING)
    assert {c.name for c in report.errors} == {"MODEL_PATH", "TRAIN_FILE", "VAL_FILE", "gpus"}
    as_json = json.loads(json.dumps(report.to_dict()))
    assert as_json["ok"] is False and as_json["target"] == docker_target.name
    assert {"name": "MODEL_PATH", "status": "error"}.items() <= as_json["checks"][
        [c["name"] for c in as_json["checks"]].index("MODEL_PATH")
    ].items()

    await provide_inputs(docker_target, "/verl")
    refused = await run_preflight(docker_target, settings())
    assert [c.name for c in refused.errors] == ["gpus"]  # training needs GPUs: an error unless allowed
    again = await run_preflight(docker_target, settings(), allow_no_gpus=True)
    assert again.ok, again.lines()
    assert [c.name for c in again.warnings][:1] == ["gpus"]
    assert by_name(again, "gpus").detail.endswith("; allowed (allow_no_gpus)")


async def test_gpu_count_against_required(docker_target: DockerTarget) -> None:
    await docker_target.write_file("/usr/local/bin/nvidia-smi", FAKE_NVIDIA_SMI, mode=0o755)
    report = await run_preflight(docker_target, settings(TRAINER_GPUS=4, ROLLOUT_GPUS=4))
    assert (
        "[error] gpus: 2 GPU(s) visible, 8 required (dapo) → lower TRAINER_GPUS / ROLLOUT_GPUS / N_GPUS or pick a "
        "target with more GPUs" in report.lines(Face.CLI)
    )
    assert "lower trainer_gpus / rollout_gpus (start_training arguments;" in by_name(report, "gpus").line()
    enough = await run_preflight(docker_target, settings(N_GPUS=2, MODE="dapo"))
    assert by_name(enough, "gpus").status is CheckStatus.OK
    # Too few GPUs is never waved through by allow_no_gpus: that allows none at all, not fewer than needed.
    short = await run_preflight(docker_target, settings(TRAINER_GPUS=4, ROLLOUT_GPUS=4), allow_no_gpus=True)
    assert by_name(short, "gpus").status is CheckStatus.ERROR


async def test_nvidia_smi_listing_no_gpu_is_an_error_unless_allowed(docker_target: DockerTarget) -> None:
    await docker_target.write_file("/usr/local/bin/nvidia-smi", EMPTY_NVIDIA_SMI, mode=0o755)
    refused = by_name(await run_preflight(docker_target, settings()), "gpus")
    assert refused.status is CheckStatus.ERROR and refused.detail == "0 GPU(s) visible, 8 required (dapo)"
    allowed = by_name(await run_preflight(docker_target, settings(), allow_no_gpus=True), "gpus")
    assert allowed.status is CheckStatus.WARNING


async def test_gpus_without_memory_figures_are_counted_and_the_fit_not_judged(docker_target: DockerTarget) -> None:
    na = b"""#!/bin/sh
printf '0, GPU-aaaa, GRID A100D-40C, [N/A], [N/A], [N/A]\\n1, GPU-bbbb, GRID A100D-40C, [N/A], [N/A], [N/A]\\n'
"""
    await docker_target.write_file("/usr/local/bin/nvidia-smi", na, mode=0o755)
    report = await run_preflight(docker_target, settings(N_GPUS=2))
    assert by_name(report, "gpus").detail == "2 GPU(s) visible, 2 required"
    memory = by_name(report, "gpu memory")
    assert memory.status is CheckStatus.WARNING and memory.detail.startswith("cannot judge the fit: GPU 0 reports")
    assert report.memory is None


async def test_gpu_memory_no_fit_names_the_share_and_the_process(docker_target: DockerTarget) -> None:
    """GPU 1 has 40.0 GiB free: vLLM's 0.6 x 79.1 GiB = 47.5 GiB cannot start there; 0.45 can."""
    await docker_target.write_file("/usr/local/bin/nvidia-smi", FAKE_NVIDIA_SMI, mode=0o755)
    await provide_inputs(docker_target, "/verl")
    report = await run_preflight(docker_target, settings(N_GPUS=2))
    memory = by_name(report, "gpu memory")
    assert memory.status is CheckStatus.ERROR and not report.ok
    assert memory.detail == ("vLLM will refuse to start: it asks 0.6 x 79.1 GiB = 47.5 GiB but sees 39.0 GiB free; "
                             "held by pid 4242 /usr/bin/python3 39.1 GiB")  # fmt: skip
    assert memory.fix is not None and memory.fix.startswith("lower the rollout share to gpu_memory_utilization=0.45")
    assert report.memory is not None and report.memory.fix.gpu_memory_utilization == 0.45
    estimate = by_name(report, "memory estimate")  # config.json is "{}" here: said, not guessed
    assert estimate.status is CheckStatus.WARNING and "no positive integer hidden_size" in estimate.detail
    fixed = await run_preflight(docker_target, settings(N_GPUS=2, GPU_MEMORY_UTILIZATION=0.45))
    assert by_name(fixed, "gpu memory").status is CheckStatus.WARNING  # starts; the other process is still named
    assert "pid 4242" in by_name(fixed, "gpu memory").detail
    assert report.to_dict()["memory"]["fit"]["suggested_util"] == 0.45


async def test_one_step_off_module_follows_the_detected_profile(docker_target: DockerTarget) -> None:
    legacy = await run_preflight(docker_target, settings(MODE="one_step_off_policy", VERL_HOME="/opt/verl-0.6.1"))
    assert by_name(legacy, "verl").detail.startswith("verl 0.6.1")
    assert by_name(legacy, "one-step-off module").detail == "/opt/verl-0.6.1/recipe/one_step_off_policy/main_ppo.py"
    current = await run_preflight(docker_target, settings(MODE="one_step_off_policy"))
    module = by_name(current, "one-step-off module")
    assert module.detail == "/verl/verl/experimental/one_step_off_policy/main_ppo.py"
    # 0.9.1 has no recipe/one_step_off_policy: a legacy-layout answer would be wrong there.
    assert module.status is CheckStatus.OK


async def test_missing_recipe_submodule_names_the_fix(docker_target: DockerTarget) -> None:
    assert (await docker_target.run(["rm", "-rf", "--", "/verl/recipe"])).exit_code == 0
    report = await run_preflight(docker_target, settings())
    recipe = by_name(report, "dapo recipe")
    assert recipe.status is CheckStatus.ERROR
    assert "/verl/recipe/dapo/main_dapo.py" in recipe.detail
    assert recipe.fix and "git submodule update --init --recursive recipe" in recipe.fix


async def test_missing_verl_home(docker_target: DockerTarget) -> None:
    report = await run_preflight(docker_target, settings(VERL_HOME="/nowhere/verl"))
    verl = by_name(report, "verl")
    assert verl.status is CheckStatus.ERROR and "/nowhere/verl" in verl.detail and verl.fix
    assert "dapo recipe" not in {c.name for c in report.checks}


async def test_missing_verl_home_advice_fits_the_target(docker_target: DockerTarget) -> None:
    in_container = by_name(await run_preflight(docker_target, settings(VERL_HOME="/nowhere/verl")), "verl").line()
    on_host = by_name(await run_preflight(HostTarget(), settings(VERL_HOME="/nowhere/verl")), "verl").line()
    assert "mount a verl checkout at /nowhere/verl" in in_container and "clone" not in in_container
    assert "clone verl to /nowhere/verl on this machine" in on_host and "mount" not in on_host


async def test_disk_thresholds(docker_target: DockerTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "DISK_WARN_BYTES", 1 << 60)
    warn = by_name(await run_preflight(docker_target, settings(CKPT_DIR="/ckpt/run1")), "disk")
    assert warn.status is CheckStatus.WARNING and "free at / (checkpoints: /ckpt/run1)" in warn.detail
    monkeypatch.setattr(preflight, "DISK_ERROR_BYTES", 1 << 60)
    error = by_name(await run_preflight(docker_target, settings()), "disk")
    assert error.status is CheckStatus.ERROR and "CKPT_DIR" in error.line(Face.CLI)


async def test_disk_is_checked_where_the_run_really_writes(docker_target: DockerTarget) -> None:
    """Issue 27: the user's trainer.default_local_dir decides, not the default checkpoint dir."""
    ckpt = "/dev/shm/vad-ckpt/run1"  # a tmpfs of its own in the container: another file system than /verl's
    disk = by_name(await run_preflight(docker_target, settings(CKPT_DIR="/verl/ckpt",
                                                               EXTRA_OVERRIDES=f"trainer.default_local_dir={ckpt}")),
                   "disk")  # fmt: skip
    assert f"free at /dev/shm (checkpoints: {ckpt})" in disk.detail, disk.detail


async def test_unreachable_target_is_one_error(docker_engine: None) -> None:
    report = await run_preflight(DockerTarget(f"vadt-missing-{uuid.uuid4().hex[:6]}"), settings())
    assert [c.name for c in report.checks] == ["target"]
    assert not report.ok and report.lines()[0].startswith("[error] target: ")


async def test_host_preflight(host_verl_tree: Path, venv_python_first: None, monkeypatch: pytest.MonkeyPatch) -> None:
    home = str(host_verl_tree)
    target = HostTarget()
    report = await run_preflight(target, settings(VERL_HOME=home))
    assert by_name(report, "verl").detail == f"verl 0.9.1 ({home}/verl/version/version)"
    assert by_name(report, "hydra").status is CheckStatus.OK
    gpus = by_name(report, "gpus")  # no nvidia-smi on this machine: host advice, not container advice
    assert gpus.status is CheckStatus.ERROR and "nvidia-smi is not available in this machine" in gpus.detail
    assert "install the NVIDIA driver on this machine" in gpus.line() and "--gpus all" not in gpus.line()
    assert by_name(report, "MODEL_PATH").detail == f"{home}/models/Qwen3-8B does not exist in host"
    await provide_inputs(target, home)
    assert [c.name for c in (await run_preflight(target, settings(VERL_HOME=home))).errors] == ["gpus"]
    assert (await run_preflight(target, settings(VERL_HOME=home), allow_no_gpus=True)).ok


class _CountingHost(HostTarget):
    """The host target, counting its paths_exist questions (each a docker exec in a container, a ~2 s job on Ray)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []

    async def paths_exist(self, paths: list[str]) -> dict[str, bool]:  # type: ignore[override]
        self.asked.append(list(paths))
        return await super().paths_exist(paths)


async def test_preflight_asks_about_every_path_in_one_question(
    host_verl_tree: Path, venv_python_first: None
) -> None:
    """VERL_HOME, the version file, the entry module and its config, the model and data, the checkpoint dir: one
    paths_exist for the checks of a preflight (five before), and the same lines as when each check asks itself."""
    home = str(host_verl_tree)
    target = _CountingHost()
    await provide_inputs(target, home)
    wanted = settings(VERL_HOME=home, REWARD_FN_PATH="rewards/missing.py")
    report = await run_preflight(target, wanted, allow_no_gpus=True)
    assert len(target.asked) == 1, target.asked
    assert {home, f"{home}/verl/version/version", f"{home}/rewards/missing.py", "/"} <= set(target.asked[0])
    assert by_name(report, "verl").detail == f"verl 0.9.1 ({home}/verl/version/version)"
    assert by_name(report, "dapo recipe").detail == f"{home}/recipe/dapo/main_dapo.py"
    assert by_name(report, "recipe config").status is CheckStatus.OK
    assert by_name(report, "MODEL_PATH").status is CheckStatus.OK
    assert by_name(report, "REWARD_FN_PATH").detail == f"{home}/rewards/missing.py does not exist in host"
    assert by_name(report, "disk").status is not CheckStatus.ERROR

    class Unanswered(_CountingHost):  # the first question fails: each check asks for itself, nothing is lost
        async def paths_exist(self, paths: list[str]) -> dict[str, bool]:  # type: ignore[override]
            if not self.asked:
                self.asked.append(list(paths))
                raise TargetError("lost answer")
            return await super().paths_exist(paths)

    again = await run_preflight(Unanswered(), wanted, allow_no_gpus=True)
    assert again.lines() == report.lines()



async def test_a_custom_reward_function_file_must_exist_in_the_target(docker_target: DockerTarget) -> None:
    await provide_inputs(docker_target, "/verl")
    wanted = settings(REWARD_FN_PATH="rewards/my_reward.py")
    report = await run_preflight(docker_target, wanted)
    check = by_name(report, "REWARD_FN_PATH")
    assert check.status is CheckStatus.ERROR and not report.ok
    assert check.detail == f"/verl/rewards/my_reward.py does not exist in {docker_target.name}"
    assert "REWARD_FN_PATH" in (check.fix or "")
    await docker_target.write_file("/verl/rewards/my_reward.py", b"def compute_score(*a, **k):\n    return 0.0\n")
    report = await run_preflight(docker_target, wanted, allow_no_gpus=True)  # this machine has no GPU
    assert by_name(report, "REWARD_FN_PATH").status is CheckStatus.OK and report.ok
    assert "REWARD_FN_PATH" not in {c.name for c in (await run_preflight(docker_target, settings())).checks}


# --- validate_overrides ---------------------------------------------------------------------------------------


async def test_stale_key_fails_with_verls_message_in_container(docker_target: DockerTarget) -> None:
    result = await validate_overrides(docker_target, "/verl", *DAPO_CONFIG, [STALE_DAPO_KEY])
    assert not result.ok and result.error
    assert "Could not override 'reward_model.overlong_buffer.enable'" in result.error
    assert "Key 'overlong_buffer' is not in struct" in result.error
    assert (
        await validate_overrides(docker_target, "/verl", *DAPO_CONFIG, [CURRENT_DAPO_KEY, "trainer.total_epochs=1"])
    ).ok
    appended = await validate_overrides(docker_target, "/verl", *DAPO_CONFIG, ["+trainer.total_epochs=2"])
    assert appended.error and appended.error.startswith(
        "Could not append to config. An item is already at 'trainer.total_epochs'"
    )
    # The same key is right on 0.6.1, whose DAPO config still has reward_model.overlong_buffer.
    assert (await validate_overrides(docker_target, "/opt/verl-0.6.1", *DAPO_CONFIG, [STALE_DAPO_KEY])).ok
    one_step = await validate_overrides(
        docker_target,
        "/verl",
        "verl/experimental/one_step_off_policy/config",
        "one_step_off_ppo_trainer.yaml",
        [STALE_DAPO_KEY],
    )
    assert one_step.error and "Could not override" in one_step.error


async def test_stale_key_fails_on_the_host(host_verl_tree: Path, venv_python_first: None) -> None:
    home = str(host_verl_tree)
    result = await validate_overrides(HostTarget(), home, *DAPO_CONFIG, [STALE_DAPO_KEY])
    assert result.error and "Could not override 'reward_model.overlong_buffer.enable'" in result.error
    assert (await validate_overrides(HostTarget(), home, *DAPO_CONFIG, [CURRENT_DAPO_KEY])).ok


async def test_searchpath_is_relative_to_the_verl_root(
    host_verl_tree: Path, venv_python_first: None, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config_dir = str(host_verl_tree / DAPO_CONFIG[0])
    result = await validate_overrides(HostTarget(), str(elsewhere), config_dir, DAPO_CONFIG[1], [])
    assert result.error and "Could not load 'ppo_trainer'" in result.error


@pytest.mark.parametrize(
    "bad",
    ["-c", "--cfg=job", "trainer.x=1\ntrainer.y=2", "trainer.x=a\x00b", "trainer.x=\r", ""],
)
async def test_unsafe_overrides_are_refused_before_running(bad: str) -> None:
    with pytest.raises(InvalidTargetInput):
        await validate_overrides(HostTarget(), "/verl", *DAPO_CONFIG, ["trainer.total_epochs=1", bad])


@pytest.mark.parametrize(
    ("home", "path", "name"),
    [
        ("relative", *DAPO_CONFIG),
        ("/verl", "../etc", "dapo_trainer"),
        ("/verl", DAPO_CONFIG[0], "../x"),
        ("-v", *DAPO_CONFIG),
    ],
)
async def test_bad_locations_are_refused(home: str, path: str, name: str) -> None:
    with pytest.raises(ValueError):
        await validate_overrides(HostTarget(), home, path, name, [])


async def test_override_values_are_data_not_commands(
    container: Container, host_verl_tree: Path, venv_python_first: None
) -> None:
    canary = f"/tmp/CANARY-{uuid.uuid4().hex[:8]}"
    quoted = [
        f"trainer.experiment_name='$(touch {canary})'",
        f"trainer.project_name='`touch {canary}`; touch {canary} | x && y'",
    ]
    unquoted = [f"trainer.experiment_name=$(touch {canary})"]
    docker_target = DockerTarget(container.name)
    for target, home in ((docker_target, "/verl"), (HostTarget(), str(host_verl_tree))):
        assert (await validate_overrides(target, home, *DAPO_CONFIG, quoted)).ok
        grammar = await validate_overrides(target, home, *DAPO_CONFIG, unquoted)
        assert grammar.error and "mismatched input '('" in grammar.error  # Hydra's parser, not a shell
    assert not os.path.exists(canary)
    assert not (await docker_target.paths_exist([canary]))[canary]


def test_report_rendering() -> None:
    report = PreflightReport(
        target="t",
        checks=[
            preflight.Check("a", CheckStatus.OK, "fine", "unused"),
            preflight.Check("b", CheckStatus.WARNING, "meh", "do x"),
            preflight.Check("c", CheckStatus.ERROR, "bad", "do y"),
        ],
    )
    assert report.lines() == ["[ok] a: fine", "[warn] b: meh → do x", "[error] c: bad → do y"]
    assert not report.ok and str(report).count("\n") == 2
    assert report.to_dict()["checks"][2] == {"name": "c", "status": "error", "detail": "bad", "fix": "do y"}


async def test_an_answer_docker_lost_is_asked_again_not_taken_for_a_verdict(container: Container,
                                                                            docker_target: DockerTarget) -> None:  # fmt: skip
    for name in ("python3", "tail"):  # the probe, and the read of verl/version/version
        silent_first(container, name, 1)
    report = await run_preflight(docker_target, settings(), allow_no_gpus=True)
    assert by_name(report, "python3").status is CheckStatus.OK, report.lines()
    assert by_name(report, "hydra").status is CheckStatus.OK, report.lines()  # was "hydra is not importable"
    assert by_name(report, "verl").detail.startswith("verl 0.9.1"), report.lines()  # was "no verl found"

    # The launch's Hydra check ahead of need: the lost answer is "could not validate", which the relaunch's lookup
    # checks again, not a verdict that rejects the attempt as a config error.
    exec_argv(container, ["rm", "-f", "/tmp/python3-calls"])
    entry = EntryPlan(module="recipe.dapo.main_dapo", config_name=DAPO_CONFIG[1], config_path=DAPO_CONFIG[0],
                      config_dir=f"/verl/{DAPO_CONFIG[0]}", cwd="/verl")  # fmt: skip
    cache = ValidationCache(docker_target)
    plan = SimpleNamespace(entry=entry, overrides=(CURRENT_DAPO_KEY,))  # the two fields the cache reads
    await cache.prevalidate([plan])  # type: ignore[list-item]
    assert exec_argv(container, ["cat", "/tmp/python3-calls"]).stdout.strip() == "1"  # the silent answer was the cache's
    assert (await cache.result(entry, plan.overrides)).ok
