"""tests/standin/make_tree.py: tree layout per release, wheel cache, refusals."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from verl_compose import make_tree_module as mt

LEGACY_FILES = [
    "verl/version/version",
    "verl/trainer/config/ppo_trainer.yaml",
    "verl/trainer/config/ppo_megatron_trainer.yaml",
    "recipe/dapo/config/dapo_trainer.yaml",
    "recipe/dapo/config/dapo_megatron_trainer.yaml",
    "recipe/one_step_off_policy/config/one_step_off_ppo_trainer.yaml",
    "recipe/one_step_off_policy/config/one_step_off_ppo_megatron_trainer.yaml",
]
CURRENT_FILES = [
    "verl/version/version",
    "verl/trainer/config/ppo_trainer.yaml",
    "verl/trainer/config/legacy_reward_impl.yaml",
    "recipe/dapo/config/dapo_trainer.yaml",
    "recipe/dapo/config/dapo_megatron_trainer.yaml",
    "verl/experimental/one_step_off_policy/config/one_step_off_ppo_trainer.yaml",
    "verl/experimental/one_step_off_policy/config/one_step_off_ppo_megatron_trainer.yaml",
]


@pytest.mark.downloads
@pytest.mark.parametrize(("version", "files"), [("0.6.1", LEGACY_FILES), ("0.9.1", CURRENT_FILES)])
def test_tree_layout(verl_trees: Any, version: str, files: list[str]) -> None:
    tree = verl_trees(version)
    for name in files:
        assert (tree / name).is_file(), name
    assert (tree / "verl/version/version").read_text().strip() == version
    # The recipe configs are the layout's: legacy reward keys before 0.7.1, reward.* after.
    dapo = (tree / "recipe/dapo/config/dapo_trainer.yaml").read_text()
    assert ("overlong_buffer:" in dapo) is (version == "0.6.1")
    assert ("overlong_buffer_cfg:" in dapo) is (version == "0.9.1")
    # Only yaml from the wheel: its Python modules import torch.
    assert not list((tree / "verl" / "trainer").rglob("*.py"))


@pytest.mark.downloads
@pytest.mark.skipif(not mt.ENTRY_DIR.is_dir(), reason="no stand-in entry modules in this checkout")
@pytest.mark.parametrize("version", ["0.6.1", "0.9.1"])
def test_entry_modules_are_placed(verl_trees: Any, version: str) -> None:
    tree = verl_trees(version)
    one_step = (
        "recipe/one_step_off_policy/main_ppo.py"
        if version == "0.6.1"
        else "verl/experimental/one_step_off_policy/main_ppo.py"
    )
    for name, source in (("recipe/dapo/main_dapo.py", "main_dapo.py"), (one_step, "one_step_off_main_ppo.py")):
        if (mt.ENTRY_DIR / source).is_file():
            assert (tree / name).read_bytes() == (mt.ENTRY_DIR / source).read_bytes()
            assert (tree / Path(name).parent / "__init__.py").is_file()
    for helper in mt.ENTRY_DIR.glob("standin_*.py"):
        assert (tree / "verl_standin" / helper.name).read_bytes() == helper.read_bytes()
    assert (tree / "verl/__init__.py").read_text() == f'__version__ = "{version}"\n'
    assert not (tree / "standin_control.json").exists()


def _fake_wheel(path: Path, version: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("verl/version/version", version)
        zf.writestr("verl/trainer/config/ppo_trainer.yaml", "trainer: {}\n")
        zf.writestr("verl/trainer/config/__init__.py", "import torch\n")
        zf.writestr("verl/experimental/one_step_off_policy/config/one_step_off_ppo_trainer.yaml", "rollout: {}\n")
    return path


def test_make_tree_from_a_wheel(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "verl-0.9.1-py3-none-any.whl", "0.9.1")
    tree = mt.make_tree("0.9.1", wheel, tmp_path / "tree")
    assert (tree / "verl/trainer/config/ppo_trainer.yaml").is_file()
    assert not (tree / "verl/trainer/config/__init__.py").exists()
    assert (tree / "verl/experimental/one_step_off_policy/config/one_step_off_ppo_trainer.yaml").is_file()
    assert (tree / "recipe/dapo/config/dapo_trainer.yaml").is_file()


def test_legacy_070_gets_its_one_step_off_overlay(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "verl-0.7.0-py3-none-any.whl", "0.7.0")
    tree = mt.make_tree("0.7.0", wheel, tmp_path / "tree")
    text = (tree / "recipe/one_step_off_policy/config/one_step_off_ppo_trainer.yaml").read_text()
    assert "free_cache_engine: False" in text
    # Legacy trees never take the experimental one-step-off config from the wheel.
    assert not (tree / "verl/experimental").exists() or not list((tree / "verl/experimental").rglob("*.yaml"))


def test_refusals(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "verl-0.9.1-py3-none-any.whl", "0.9.1")
    with pytest.raises(ValueError, match=r"is verl 0\.9\.1, expected 0\.8\.0"):
        mt.make_tree("0.8.0", wheel, tmp_path / "t1")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(FileExistsError):
        mt.make_tree("0.9.1", wheel, busy)
    with pytest.raises(ValueError, match="release version"):
        mt.make_tree("latest", wheel, tmp_path / "t2")


def test_wheel_cache_reuses_the_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mt.CACHE_ENV, str(tmp_path))
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        _fake_wheel(dest / "verl-0.9.1-py3-none-any.whl", "0.9.1")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mt.subprocess, "run", fake_run)
    first = mt.wheel_cache("0.9.1")
    second = mt.wheel_cache("0.9.1")
    assert first == second == tmp_path / "verl-0.9.1-py3-none-any.whl"
    assert len(calls) == 1
    assert "verl==0.9.1" in calls[0] and "--no-deps" in calls[0]
    assert [p.name for p in tmp_path.iterdir()] == ["verl-0.9.1-py3-none-any.whl"]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = _fake_wheel(tmp_path / "w.whl", "0.6.1")
    assert mt.main(["0.6.1", str(tmp_path / "tree"), "--wheel", str(wheel)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "tree")
    assert (tmp_path / "tree/recipe/one_step_off_policy/config/one_step_off_ppo_trainer.yaml").is_file()
