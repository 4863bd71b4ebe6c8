"""Issue 28, item 4: preflight looks inside what the run reads. An empty model directory, a 0-byte or non-parquet
data file, a parquet without the prompt column and a recipe without its Hydra config were `[ok]` (the run then
failed seconds to minutes after "starting"); now each is an error, all in the same report, on the host target with a
real stand-in verl tree (tests/standin). The parquet files are real (harness.standin_files.parquet_bytes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from harness.standin_files import parquet_bytes, write_data, write_model
from verl_async_dapo.plans.preflight import CheckStatus, run_preflight
from verl_async_dapo.plans.preflight_files import judge_model_dir, judge_parquet
from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.targets.host import HostTarget
from verl_async_dapo.wording import Face


def test_judging_the_model_directory_and_the_parquet_footer() -> None:
    assert judge_model_dir("/m", [])[0:2] == ("error", "/m is empty: not a Hugging Face model directory")
    assert judge_model_dir("/m", ["config.json"])[0] == "error"
    assert judge_model_dir("/m", ["config.json", "model-00001-of-00002.safetensors"])[0] == "ok"
    assert judge_parquet("/d", b"", "prompt", "TRAIN_FILE", "train_file")[1] == "/d is empty (0 bytes)"
    assert judge_parquet("/d", b"PAR1", "prompt", "TRAIN_FILE", "train_file")[0] == "error"
    assert judge_parquet("/d", b"a,b\n1,2\n", None, "VAL_FILE", "val_file")[1].endswith("(no PAR1 footer)")
    assert judge_parquet("/d", parquet_bytes(), "prompt", "TRAIN_FILE", "train_file")[0] == "ok"
    # "prompt" inside another column's name is not the column (a Thrift string is its length, then its bytes)
    missing = judge_parquet("/d", parquet_bytes(("raw_prompt", "answer")), "prompt", "TRAIN_FILE", "train_file")
    assert missing[0] == "error" and "no column 'prompt'" in missing[1]
    assert judge_parquet("/d", parquet_bytes(("question",)), "question", "TRAIN_FILE", "train_file")[0] == "ok"


@pytest.fixture
def venv_python_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


async def test_every_content_problem_is_in_one_report(host_verl_tree: Path, venv_python_first: None) -> None:
    tree = host_verl_tree
    (tree / "models" / "Qwen3-8B").mkdir(parents=True)  # the empty download
    (tree / "data").mkdir()
    (tree / "data" / "dapo-math-17k.parquet").write_bytes(b"")  # 0 bytes
    (tree / "data" / "aime-2024.parquet").write_bytes(b"question,answer\n")  # a CSV under a parquet name
    # The recipe without the Megatron config (a half-updated submodule); FSDP's dapo_trainer.yaml stays.
    (tree / "recipe" / "dapo" / "config" / "dapo_megatron_trainer.yaml").unlink()
    settings = TrainingSettings.model_validate({"VERL_HOME": str(tree), "TRAINER_GPUS": 1, "ROLLOUT_GPUS": 1})
    report = await run_preflight(HostTarget(), settings, allow_no_gpus=True)
    errors = {c.name: c.detail for c in report.errors}
    assert errors.keys() == {"MODEL_PATH", "TRAIN_FILE", "VAL_FILE", "recipe config"}, report.lines()
    assert "is empty" in errors["MODEL_PATH"] and "(0 bytes)" in errors["TRAIN_FILE"]
    assert "no PAR1 footer" in errors["VAL_FILE"] and "dapo_megatron_trainer" in errors["recipe config"]
    cli_lines = "\n".join(report.lines(Face.CLI))
    assert "or set MODEL_PATH" in cli_lines and "git submodule update --init --recursive recipe" in cli_lines

    write_model(tree / "models" / "Qwen3-8B")
    write_data(tree / "data")
    (tree / "data" / "dapo-math-17k.parquet").write_bytes(parquet_bytes(("question", "answer")))
    report = await run_preflight(HostTarget(), settings.model_copy(update={"framework": "fsdp"}), allow_no_gpus=True)
    errors = {c.name: c for c in report.errors}
    assert errors.keys() == {"TRAIN_FILE"} and "no column 'prompt'" in errors["TRAIN_FILE"].detail, report.lines()
    assert "the start_training argument prompt_key" in errors["TRAIN_FILE"].line()
    fixed = settings.model_copy(update={"framework": "fsdp", "prompt_key": "question"})
    report = await run_preflight(HostTarget(), fixed, allow_no_gpus=True)
    assert report.ok, report.lines()
    hydra = next(c for c in report.checks if c.name == "hydra")
    assert hydra.status is CheckStatus.OK and f"(in {Path(sys.executable).parent}/python3)" in hydra.detail  # its Python


def test_the_python_probe_answers_for_hydra_in_the_same_interpreter_start() -> None:
    """The python3 and hydra checks share one process (one exec in a container): its real output, with and without
    hydra importable (``-S``: no site-packages), is what the two checks report."""
    import subprocess

    from verl_async_dapo.plans.preflight_python import PYTHON_SCRIPT, parse_python_probe

    with_hydra = subprocess.run([sys.executable, "-c", PYTHON_SCRIPT], capture_output=True, text=True, check=True)
    probe = parse_python_probe(with_hydra.stdout)
    assert probe.version == sys.version.split()[0] and probe.executable == sys.executable
    assert probe.hydra_version is not None and probe.hydra_version.startswith("1.3"), with_hydra.stdout
    bare = subprocess.run([sys.executable, "-S", "-c", PYTHON_SCRIPT], capture_output=True, text=True, check=True)
    probe = parse_python_probe(bare.stdout)
    assert probe.hydra_version is None and probe.hydra_error is not None
    assert probe.hydra_error.startswith("ModuleNotFoundError: No module named 'hydra'"), bare.stdout
    assert parse_python_probe("3.11.2 /usr/bin/python3\n").hydra_error == "no answer from the probe"
    noisy = parse_python_probe("3.11.2 /usr/bin/python3\nhydra 9.9 (a line printed on import)\nvad-hydra-version 1.3.2\n")
    assert noisy.hydra_version == "1.3.2", noisy
