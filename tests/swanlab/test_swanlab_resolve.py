"""Where the SwanLab setting comes from (env > config file > ask), host checks, and what reaches the container."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from verl_async_dapo.exceptions import SwanlabConfigError
from verl_async_dapo.swanlab import (
    PUBLIC_API_HOST,
    PUBLIC_WEB_HOST,
    SwanlabConfig,
    SwanlabMode,
    default_config_path,
    launch_env,
    logger_enabled,
    normalize_host,
    resolve_configured,
    run_link,
    save_config_file,
)

HOST = "http://10.143.2.129:8000"


@pytest.fixture
def cfg_file(tmp_path: Path) -> Path:
    return tmp_path / "cfgdir" / "swanlab.json"


def _saved(path: Path, **fields: object) -> Path:
    fields.setdefault("mode", "cloud")
    save_config_file(SwanlabConfig(**fields), path)  # type: ignore[arg-type]
    return path


# --- priority -----------------------------------------------------------------------------------


def test_nothing_configured_means_ask(cfg_file: Path) -> None:
    assert resolve_configured({}, cfg_file) is None
    assert not cfg_file.exists()


def test_config_file_used_when_env_is_empty(cfg_file: Path) -> None:
    _saved(cfg_file, host=HOST, api_key="file-key", log_dir="/verl/swanlog")
    cfg = resolve_configured({}, cfg_file)
    assert cfg is not None
    assert (cfg.source, cfg.mode, cfg.host, cfg.log_dir) == ("config_file", SwanlabMode.CLOUD, HOST, "/verl/swanlog")
    assert cfg.api_key is not None and cfg.api_key.get_secret_value() == "file-key"


def test_env_beats_config_file(cfg_file: Path) -> None:
    _saved(cfg_file, host=HOST, api_key="file-key")
    env = {"SWANLAB_HOST": "http://other.example:9000", "SWANLAB_API_KEY": "env-key"}
    cfg = resolve_configured(env, cfg_file)
    assert cfg is not None and cfg.source == "env"
    assert cfg.host == "http://other.example:9000"
    assert cfg.api_key is not None and cfg.api_key.get_secret_value() == "env-key"


def test_env_local_mode_needs_no_key_and_wins_over_file(cfg_file: Path) -> None:
    _saved(cfg_file, host=HOST, api_key="file-key")
    cfg = resolve_configured({"SWANLAB_MODE": "local", "SWANLAB_LOG_DIR": "/data/swanlog"}, cfg_file)
    assert cfg is not None
    assert (cfg.source, cfg.mode, cfg.api_key, cfg.log_dir) == ("env", SwanlabMode.LOCAL, None, "/data/swanlog")


def test_env_disabled_counts_as_configured(cfg_file: Path) -> None:
    cfg = resolve_configured({"SWANLAB_MODE": "disabled"}, cfg_file)
    assert cfg is not None and cfg.mode is SwanlabMode.DISABLED and cfg.source == "env"


def test_env_key_alone_means_public_cloud(cfg_file: Path) -> None:
    cfg = resolve_configured({"SWANLAB_API_KEY": "k"}, cfg_file)
    assert cfg is not None and cfg.mode is SwanlabMode.CLOUD and cfg.host is None
    assert (cfg.api_host, cfg.web_host) == (PUBLIC_API_HOST, PUBLIC_WEB_HOST)
    assert cfg.login_url == "https://api.swanlab.cn/api/login/api_key"


def test_env_cloud_without_key_and_no_file_asks(cfg_file: Path) -> None:
    assert resolve_configured({"SWANLAB_HOST": HOST}, cfg_file) is None
    assert resolve_configured({"SWANLAB_MODE": "cloud"}, cfg_file) is None


def test_partial_env_laid_over_file_keeps_key_for_same_host(cfg_file: Path) -> None:
    _saved(cfg_file, host=HOST, api_key="file-key")
    cfg = resolve_configured({"SWANLAB_HOST": HOST + "/", "SWANLAB_LOG_DIR": "logs"}, cfg_file)
    assert cfg is not None and cfg.source == "config_file"
    assert cfg.api_key is not None and cfg.api_key.get_secret_value() == "file-key"
    assert cfg.log_dir == "logs"


def test_file_key_never_reused_for_another_host(cfg_file: Path) -> None:
    _saved(cfg_file, host=HOST, api_key="file-key")
    # The key belongs to HOST; sending it to another server would leak it: ask instead.
    assert resolve_configured({"SWANLAB_HOST": "http://elsewhere.example:8000"}, cfg_file) is None


def test_env_mode_local_over_file_cloud_without_env_key(cfg_file: Path) -> None:
    _saved(cfg_file, mode="local", log_dir="x")
    cfg = resolve_configured({}, cfg_file)
    assert cfg is not None and cfg.mode is SwanlabMode.LOCAL and cfg.log_dir == "x"


def test_default_config_path_follows_config_dir(tmp_path: Path) -> None:
    assert default_config_path() == Path(os.environ["VERL_ASYNC_DAPO_CONFIG_DIR"]) / "swanlab.json"
    assert resolve_configured({}) is None  # default path, nothing there


# --- host variables -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {"SWANLAB_HOST": HOST},
        {"SWANLAB_API_HOST": HOST + "/api"},  # the SDK's variable, old form with /api
        {"SWANLAB_API_HOST": HOST},  # SDK 0.9+ form
        {"SWANLAB_WEB_HOST": HOST},
        {"SWANLAB_HOST": HOST, "SWANLAB_API_HOST": HOST + "/api", "SWANLAB_WEB_HOST": HOST + "/"},
    ],
)
def test_host_variables_agree(env: dict[str, str], cfg_file: Path) -> None:
    cfg = resolve_configured({**env, "SWANLAB_API_KEY": "k"}, cfg_file)
    assert cfg is not None and cfg.host == HOST
    assert cfg.login_url == f"{HOST}/api/login/api_key"


def test_conflicting_host_variables_are_refused(cfg_file: Path) -> None:
    env = {"SWANLAB_HOST": HOST, "SWANLAB_API_HOST": "http://other:8000/api", "SWANLAB_API_KEY": "k"}
    with pytest.raises(SwanlabConfigError, match=r"different SwanLab servers.*SWANLAB_HOST.*SWANLAB_API_HOST"):
        resolve_configured(env, cfg_file)


def test_invalid_env_host_names_the_variable(cfg_file: Path) -> None:
    with pytest.raises(SwanlabConfigError, match=r"^SWANLAB_API_HOST: .*http:// or https://"):
        resolve_configured({"SWANLAB_API_HOST": "ftp://x", "SWANLAB_API_KEY": "k"}, cfg_file)


@pytest.mark.parametrize(
    ("mode_text", "expected"),
    [
        ("cloud", SwanlabMode.CLOUD),
        ("online", SwanlabMode.CLOUD),
        ("LOCAL", SwanlabMode.LOCAL),
        ("disabled", SwanlabMode.DISABLED),
    ],
)
def test_env_modes(mode_text: str, expected: SwanlabMode, cfg_file: Path) -> None:
    cfg = resolve_configured({"SWANLAB_MODE": mode_text, "SWANLAB_API_KEY": "k"}, cfg_file)
    assert cfg is not None and cfg.mode is expected


def test_offline_and_unknown_modes_are_refused(cfg_file: Path) -> None:
    with pytest.raises(SwanlabConfigError, match="offline is not supported"):
        resolve_configured({"SWANLAB_MODE": "offline"}, cfg_file)
    with pytest.raises(SwanlabConfigError, match="unknown SwanLab mode"):
        resolve_configured({"SWANLAB_MODE": "cluod"}, cfg_file)


def test_empty_env_values_count_as_unset(cfg_file: Path) -> None:
    assert resolve_configured({"SWANLAB_HOST": "", "SWANLAB_API_KEY": "  ", "SWANLAB_MODE": ""}, cfg_file) is None


# --- host validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://10.0.0.5:8000", "http://10.0.0.5:8000"),
        ("  HTTP://SwanLab.Example.com:8000/api/  ", "http://swanlab.example.com:8000"),
        ("https://swanlab.example.com/", "https://swanlab.example.com"),
        ("https://swanlab.cn", None),
        ("https://api.swanlab.cn/api", None),
        ("http://localhost:5092", "http://localhost:5092"),
    ],
)
def test_normalize_host_accepts(raw: str, expected: str | None) -> None:
    assert normalize_host(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("file:///etc/passwd", "http:// or https://"),
        ("javascript:alert(1)", "no scheme"),
        ("10.0.0.5:8000", "no scheme"),
        ("http://user:pw@10.0.0.5:8000", "credentials"),
        ("http://10.0.0.5:8000/swanlab", "path"),
        ("http://10.0.0.5:8000/?a=b", "query"),
        ("http://10.0.0.5 :8000", "whitespace"),
        ("http://10.0.0.5\x00:8000", "NUL"),
        ("http://[::1]:8000", "IPv6"),
        ("http://10.0.0.5:99999", "port"),
        ("http://bad_host!:80", "invalid host name"),
        ("", "empty"),
    ],
)
def test_normalize_host_refuses(raw: str, message: str) -> None:
    with pytest.raises(SwanlabConfigError, match=message):
        normalize_host(raw)


def test_bad_key_and_log_dir_are_refused_with_clear_messages() -> None:
    with pytest.raises(SwanlabConfigError, match="printable ASCII"):
        SwanlabConfig(mode=SwanlabMode.CLOUD, api_key="has space")
    with pytest.raises(SwanlabConfigError, match="cloud needs an API key"):
        SwanlabConfig(mode=SwanlabMode.CLOUD)
    with pytest.raises(ValueError, match=r"'\.\.'"):
        SwanlabConfig(mode=SwanlabMode.LOCAL, log_dir="../escape")


# --- launch env, logger, link -------------------------------------------------------------------


def test_launch_env_self_hosted() -> None:
    cfg = SwanlabConfig(mode="cloud", host=HOST, api_key="the-key", log_dir="/verl/swanlog")  # type: ignore[arg-type]
    public, secret = launch_env(cfg)
    assert public == {
        "SWANLAB_MODE": "cloud",
        "SWANLAB_LOG_DIR": "/verl/swanlog",
        "SWANLAB_API_HOST": f"{HOST}/api",
        "SWANLAB_WEB_HOST": HOST,
        "COLUMNS": "300",
    }
    assert secret == {"SWANLAB_API_KEY": "the-key"}


def test_launch_env_public_cloud_pins_hosts() -> None:
    public, secret = launch_env(SwanlabConfig(mode="cloud", api_key="k"))  # type: ignore[arg-type]
    assert public["SWANLAB_API_HOST"] == "https://api.swanlab.cn/api"
    assert public["SWANLAB_WEB_HOST"] == "https://swanlab.cn"
    assert "SWANLAB_LOG_DIR" not in public
    assert secret == {"SWANLAB_API_KEY": "k"}


def test_launch_env_local_and_disabled_carry_no_key_or_host() -> None:
    public, secret = launch_env(SwanlabConfig(mode="local", host=HOST, api_key="k"))  # type: ignore[arg-type]
    assert public == {"SWANLAB_MODE": "local", "COLUMNS": "300"} and secret == {}
    public, secret = launch_env(SwanlabConfig(mode="disabled"))  # type: ignore[arg-type]
    assert public == {"SWANLAB_MODE": "disabled"} and secret == {}


def test_logger_enabled() -> None:
    assert logger_enabled(SwanlabConfig(mode="cloud", api_key="k"))  # type: ignore[arg-type]
    assert logger_enabled(SwanlabConfig(mode="local"))  # type: ignore[arg-type]
    assert not logger_enabled(SwanlabConfig(mode="disabled"))  # type: ignore[arg-type]
    assert not logger_enabled(None)


def test_run_link() -> None:
    cloud = SwanlabConfig(mode="cloud", host=HOST, api_key="k")  # type: ignore[arg-type]
    url = f"{HOST}/@alice/verl-dapo/runs/cm9x8abcdefghijklmnop"
    assert run_link(cloud, url) == url
    assert run_link(cloud, None) is None
    assert run_link(cloud, "javascript:alert(1)") is None
    assert run_link(cloud, "http://a b") is None
    assert run_link(SwanlabConfig(mode="local", log_dir="/verl/my logs"), None) == "swanlab watch '/verl/my logs'"  # type: ignore[arg-type]
    assert run_link(SwanlabConfig(mode="local"), None) == "swanlab watch swanlog"  # type: ignore[arg-type]
    assert run_link(SwanlabConfig(mode="disabled"), url) is None  # type: ignore[arg-type]


def test_session_config_checks_the_answer() -> None:
    from verl_async_dapo.swanlab import session_config

    cfg = session_config(mode="cloud", host=HOST + "/api", api_key=" k ", log_dir="/verl/swanlog")
    assert (cfg.source, cfg.host, cfg.log_dir) == ("session", HOST, "/verl/swanlog")
    assert cfg.api_key is not None and cfg.api_key.get_secret_value() == "k"
    with pytest.raises(SwanlabConfigError, match=r"^invalid SwanLab settings in the answer: .*credentials"):
        session_config(mode="cloud", host="http://u:p@h:1", api_key="k")
    with pytest.raises(SwanlabConfigError, match="cloud needs an API key"):
        session_config(mode="cloud", host=HOST)
    with pytest.raises(SwanlabConfigError, match=r"log_dir: .*'\.\.'"):
        session_config(mode="local", log_dir="../up")
