"""The SwanLab config file: owner-only or refused, atomic, clear errors when malformed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from verl_async_dapo.exceptions import SwanlabConfigError
from verl_async_dapo.swanlab import SwanlabConfig, SwanlabMode, load_config_file, resolve_configured, save_config_file


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_save_creates_0600_file_in_0700_dir_even_with_loose_umask(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "swanlab.json"
    old = os.umask(0o000)  # the worst case: nothing masked
    try:
        save_config_file(SwanlabConfig(mode="cloud", host="http://h:8000", api_key="k1", log_dir="d"), path)  # type: ignore[arg-type]
    finally:
        os.umask(old)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700 and _mode(path.parent.parent) == 0o700
    data = json.loads(path.read_text())
    assert data == {"version": 1, "mode": "cloud", "host": "http://h:8000", "api_key": "k1", "log_dir": "d"}
    assert [p.name for p in path.parent.iterdir()] == ["swanlab.json"]  # no temp file left behind


def test_save_replaces_atomically_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "swanlab.json"
    save_config_file(SwanlabConfig(mode="cloud", api_key="first"), path)  # type: ignore[arg-type]
    inode_before = path.stat().st_ino
    save_config_file(SwanlabConfig(mode="local", log_dir="/x"), path)  # type: ignore[arg-type]
    assert path.stat().st_ino != inode_before  # a new file renamed over, not rewritten in place
    cfg = load_config_file(path)
    assert cfg is not None
    assert (cfg.mode, cfg.api_key, cfg.log_dir, cfg.source) == (SwanlabMode.LOCAL, None, "/x", "config_file")


def test_save_uses_default_path(tmp_path: Path) -> None:
    path = save_config_file(SwanlabConfig(mode="disabled"))  # type: ignore[arg-type]
    assert path == Path(os.environ["VERL_ASYNC_DAPO_CONFIG_DIR"]) / "swanlab.json"
    assert _mode(path) == 0o600


def test_missing_file_is_none(tmp_path: Path) -> None:
    assert load_config_file(tmp_path / "absent.json") is None


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_group_or_world_accessible_file_is_refused_with_chmod_hint(tmp_path: Path, mode: int) -> None:
    path = _write(tmp_path / "swanlab.json", json.dumps({"mode": "cloud", "api_key": "k"}), mode)
    with pytest.raises(SwanlabConfigError) as info:
        load_config_file(path)
    assert f"chmod 600 {path}" in str(info.value)
    assert f"{mode:04o}" in str(info.value)
    # ...and resolution surfaces the same error instead of silently asking
    with pytest.raises(SwanlabConfigError, match="chmod 600"):
        resolve_configured({}, path)


def test_env_wins_without_touching_an_insecure_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "swanlab.json", "{}", 0o644)
    cfg = resolve_configured({"SWANLAB_API_KEY": "k"}, path)
    assert cfg is not None and cfg.source == "env"


def test_chmod_600_fixes_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "swanlab.json", json.dumps({"mode": "cloud", "api_key": "k"}), 0o644)
    os.chmod(path, 0o600)
    cfg = load_config_file(path)
    assert cfg is not None and cfg.api_key is not None and cfg.api_key.get_secret_value() == "k"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "malformed"),
        (json.dumps({"mode": "cloud", "api_key": "k", "extra": 1}), "malformed"),
        (json.dumps({"api_key": "k"}), "malformed"),
        (json.dumps({"mode": "sideways"}), "unknown SwanLab mode"),
        (json.dumps({"mode": "cloud"}), "cloud needs an API key"),
        (json.dumps({"mode": "cloud", "api_key": "k", "host": "file:///etc"}), "http:// or https://"),
        (json.dumps({"mode": "cloud", "api_key": "k", "version": 2}), "malformed"),
    ],
)
def test_malformed_file_gives_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "swanlab.json", text)
    with pytest.raises(SwanlabConfigError, match=message) as info:
        load_config_file(path)
    assert str(path) in str(info.value)


def test_directory_instead_of_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "swanlab.json"
    path.mkdir(mode=0o700)
    with pytest.raises(SwanlabConfigError, match=r"cannot read|not a regular file"):
        load_config_file(path)
