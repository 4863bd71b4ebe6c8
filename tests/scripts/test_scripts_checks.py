"""The scripts' checks and failure paths: preflight, bad variables (fail fast, start nothing), --help, shellcheck.

Everything that talks to a target uses the real Docker Engine; --help and shellcheck need no engine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from docker.models.containers import Container
from script_helpers import SCRIPTS_DIR, ScriptResult, ScriptRunner

from harness.fixtures import REPO_ROOT, exec_argv, unavailable

SCRIPTS = ("quick_start.sh", "preflight_check.sh", "run_dapo.sh", "run_one_step_off_policy.sh")
START_SCRIPTS = ("quick_start.sh", "run_dapo.sh", "run_one_step_off_policy.sh")
FAIL_FAST_S = 15.0  # generous for a loaded CI machine; a bad variable is refused in well under a second


def assert_nothing_started(runner: ScriptRunner, target: Container) -> None:
    """No session or run in the store, no run directory, training log or training process in the container."""
    assert runner.store_counts() == (0, 0)
    listing = exec_argv(target, ["ls", "-A", "/verl"]).stdout.split()
    assert ".verl-async-dapo" not in listing and "train.log" not in listing, listing
    processes = exec_argv(target, ["ps", "-eo", "args"]).stdout
    assert "main_dapo" not in processes and "main_ppo" not in processes, processes


# -- preflight_check.sh --------------------------------------------------------------------------------------
def test_preflight_check_passes_on_a_prepared_container(scripts: ScriptRunner, prepared_container: Container) -> None:
    result = scripts.run("preflight_check.sh")
    assert result.returncode == 0, result.describe()
    for line in (
        f"[ok] target: {scripts.container_name} is reachable and running",
        "[ok] verl: verl 0.9.1",
        "[ok] MODEL_PATH: /verl/models/Qwen3-8B",
        "[ok] TRAIN_FILE: /verl/data/dapo-math-17k.parquet",
        "[ok] VAL_FILE: /verl/data/aime-2024.parquet",
    ):
        assert line in result.stdout, result.describe()
    assert "[error]" not in result.stdout
    assert "[INFO] preflight passed" in result.stderr
    assert_nothing_started(scripts, prepared_container)


def test_preflight_check_names_the_missing_paths(
    container: Container, make_runner: Callable[[Container], ScriptRunner]
) -> None:
    runner = make_runner(container)  # a bare container: no model, no data
    result = runner.run("preflight_check.sh")
    assert result.returncode == 1, result.describe()
    errors = [line for line in result.stdout.splitlines() if line.startswith("[error]")]
    assert any(line.startswith("[error] MODEL_PATH: /verl/models/Qwen3-8B does not exist") for line in errors), errors
    assert any(line.startswith("[error] TRAIN_FILE: /verl/data/dapo-math-17k.parquet") for line in errors), errors
    assert any(line.startswith("[error] VAL_FILE: /verl/data/aime-2024.parquet") for line in errors), errors
    assert "[ok] verl: verl 0.9.1" in result.stdout  # only the missing paths fail
    assert "[ERROR] preflight failed" in result.stderr


def test_quick_start_stops_at_a_failed_preflight(
    container: Container, make_runner: Callable[[Container], ScriptRunner]
) -> None:
    runner = make_runner(container)
    result = runner.run("quick_start.sh")
    assert result.returncode == 1, result.describe()
    assert "[error] MODEL_PATH: /verl/models/Qwen3-8B does not exist" in result.stdout
    assert "nothing was started" in result.stderr
    assert "run id:" not in result.stdout
    assert_nothing_started(runner, container)


def test_run_dapo_with_a_failed_preflight_leaves_no_session(
    container: Container, make_runner: Callable[[Container], ScriptRunner]
) -> None:
    runner = make_runner(container)
    result = runner.run("run_dapo.sh")
    assert result.returncode == 1, result.describe()
    assert "[error] MODEL_PATH: /verl/models/Qwen3-8B does not exist" in result.stderr + result.stdout
    assert "nothing was started" in result.stderr
    assert runner.store_counts() == (0, 0)


# -- bad variables ---------------------------------------------------------------------------------------------
# Each bad variable once and each script once (the variables are checked by the CLI the scripts call, the same
# settings model for all four; each script is shown to stop at it with its own "nothing was started"). Until
# 2026-12-04 this was the 4 x 4 product, 16 script runs of ~1 CPU-s for the same 4 checks.
BAD_VARIABLES = [
    pytest.param("quick_start.sh", "FRAMEWORK", "foo", id="FRAMEWORK=foo-quick_start.sh"),
    pytest.param("preflight_check.sh", "TRAIN_STEPS", "-1", id="TRAIN_STEPS=-1-preflight_check.sh"),
    pytest.param("run_dapo.sh", "USER_FEATURES", "bogus", id="USER_FEATURES=bogus-run_dapo.sh"),
    pytest.param("run_one_step_off_policy.sh", "ENABLE_OFFLOAD", "maybe", id="ENABLE_OFFLOAD=maybe-run_one_step_off"),
]


def test_the_bad_variable_cases_cover_every_script() -> None:
    assert sorted(p.values[0] for p in BAD_VARIABLES) == sorted(SCRIPTS)


@pytest.mark.parametrize(("script", "name", "value"), BAD_VARIABLES)
def test_a_bad_variable_fails_fast_and_starts_nothing(
    script: str,
    name: str,
    value: str,
    prepared_container: Container,
    make_runner: Callable[[Container], ScriptRunner],
) -> None:
    runner = make_runner(prepared_container)
    result = runner.run(script, env={name: value}, timeout_s=60)
    assert result.returncode != 0, result.describe()
    assert result.seconds < FAIL_FAST_S, result.describe()
    assert "error: invalid training parameters:" in result.stderr, result.describe()
    assert name in result.stderr, result.describe()  # the error names the variable the user set
    assert "Traceback" not in result.output, result.describe()
    assert "run id:" not in result.stdout
    if script != "preflight_check.sh":
        assert "nothing was started" in result.stderr, result.describe()
        assert "did not succeed" not in result.stderr  # nothing ran, so nothing "failed"
    assert_nothing_started(runner, prepared_container)


@pytest.mark.parametrize("script", ["run_one_step_off_policy.sh", "quick_start.sh"])
def test_a_rollout_tp_that_does_not_divide_the_rollout_gpus_fails_fast(
    script: str, prepared_container: Container, make_runner: Callable[[Container], ScriptRunner]
) -> None:
    """Only the launch plan checks ROLLOUT_TP against the GPUs; before the fix, start returned and the supervisor
    crash-looped (restarted by every status call), so the following script never ended."""
    runner = make_runner(prepared_container)
    # ROLLOUT_TP explicit: the default fits the GPUs (2, or 1 for an odd count), a value the user set is never changed.
    env = {"MODE": "one_step_off_policy", "TRAINER_GPUS": "2", "ROLLOUT_GPUS": "3", "ROLLOUT_TP": "2"}
    result = runner.run(script, env=env, timeout_s=60)
    assert result.returncode != 0, result.describe()
    assert result.seconds < FAIL_FAST_S, result.describe()
    assert "ROLLOUT_TP=2 must divide the 3 rollout GPUs (ROLLOUT_GPUS)" in result.stderr, result.describe()
    assert "nothing was started" in result.stderr
    assert_nothing_started(runner, prepared_container)


# -- --help and arguments (no engine needed: the CLI must not even be called) ----------------------------------
@pytest.fixture
def help_env(tmp_path: Path) -> dict[str, str]:
    """VAD_CLI is a recorder that fails loudly, CONTAINER does not exist, the state home does not exist yet."""
    recorder = tmp_path / "cli-recorder"
    recorder.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "cli-called"}\nexit 3\n', "utf-8")
    recorder.chmod(0o755)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "VAD_CLI": str(recorder),
        "VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"), "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "config"),
        "CONTAINER": "no-such-container-for-help",
    }  # fmt: skip


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_missing_container_names_the_variable_and_lists_the_targets(scripts: ScriptRunner, script: str) -> None:
    names = scripts.cli("containers", "--names").stdout.split()
    assert "host" in names and scripts.container_name in names, names
    if "jins" in names:
        pytest.skip("a container named jins (the default) exists on this machine")
    unset = {k: v for k, v in scripts.env.items() if k != "CONTAINER"}
    result = run_plain(script, [], unset)
    assert result.returncode == 1, result.describe()
    assert "CONTAINER is not set and the default container 'jins' does not exist; set CONTAINER to one of: " in (
        result.stderr), result.describe()  # fmt: skip
    assert scripts.container_name in result.stderr and " host " in result.stderr
    wrong = run_plain(script, [], {**scripts.env, "CONTAINER": "vad-no-such-target"})
    assert wrong.returncode == 1 and "CONTAINER=vad-no-such-target: no such target; existing: host" in wrong.stderr
    assert scripts.store_counts() == (0, 0)  # nothing was started or even asked


def run_plain(script: str, args: list[str], env: dict[str, str]) -> ScriptResult:
    argv = ["bash", str(SCRIPTS_DIR / script), *args]
    proc = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=False,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    return ScriptResult(argv, proc.returncode, proc.stdout, proc.stderr, 0.0)


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_usage_and_touches_nothing(
    script: str, flag: str, help_env: dict[str, str], tmp_path: Path
) -> None:
    result = run_plain(script, [flag], help_env)
    assert result.returncode == 0, result.describe()
    assert result.stdout.startswith("Usage: "), result.describe()
    assert f"bash scripts/{script}" in result.stdout.split("\n\n", 1)[0]  # the usage paragraph
    assert "Environment" in result.stdout
    assert "#:" not in result.stdout and "set -euo" not in result.stdout
    assert result.stderr == ""
    assert not (tmp_path / "cli-called").exists(), "--help must not call the CLI"
    assert not (tmp_path / "state").exists() and not (tmp_path / "config").exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unexpected_argument_is_refused(script: str, help_env: dict[str, str], tmp_path: Path) -> None:
    result = run_plain(script, ["--steps=4"], help_env)
    assert result.returncode == 2, result.describe()
    assert "unexpected argument '--steps=4'" in result.stderr
    assert not (tmp_path / "cli-called").exists()


# -- shellcheck ----------------------------------------------------------------------------------------------
def test_scripts_are_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        unavailable("shellcheck is not installed (tests/run.sh installs it through tests/harness/ensure_docker.sh)")
    assert shellcheck is not None
    scripts = sorted(str(p.relative_to(REPO_ROOT)) for p in SCRIPTS_DIR.glob("*.sh"))
    assert "scripts/common.sh" in scripts and "scripts/serve.sh" in scripts and len(scripts) == 6, scripts
    proc = subprocess.run([shellcheck, "-x", *scripts], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
