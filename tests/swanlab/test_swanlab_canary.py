"""A canary key goes through every step and must show up only in the secret env dict."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from verl_async_dapo.exceptions import SwanlabConfigError
from verl_async_dapo.secret_store import SecretStore
from verl_async_dapo.swanlab import SwanlabConfig, check_key, launch_env, logger_enabled, resolve_configured, run_link

CANARY = "CANARY-7f3e9d2c1b0a-do-not-leak"


def _views(obj: Any) -> list[str]:
    views = [repr(obj), str(obj), f"{obj}", f"{obj!r}"]
    if hasattr(obj, "model_dump_json"):
        views += [obj.model_dump_json(), json.dumps(obj.model_dump(mode="json")), repr(obj.model_dump())]
    return views


async def test_canary_key_only_in_secret_env(
    fake_swanlab: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    env = {"SWANLAB_HOST": fake_swanlab.host, "SWANLAB_API_KEY": CANARY, "SWANLAB_LOG_DIR": "/verl/swanlog"}
    cfg = resolve_configured(env, tmp_path / "none.json")
    assert cfg is not None and cfg.source == "env"
    assert cfg.api_key is not None and cfg.api_key.get_secret_value() == CANARY  # it is really held

    public, secret = launch_env(cfg)
    assert secret == {"SWANLAB_API_KEY": CANARY}
    assert logger_enabled(cfg)

    result = await check_key(cfg)  # the fake server only knows its own key
    assert result.status == "wrong_key"

    fake_swanlab.behaviour = "echo"
    echoed = await check_key(cfg)
    assert echoed.status == "wrong_key" and "[redacted]" in echoed.message

    leaks = [
        *_views(cfg),
        cfg.describe(),
        str(cfg.api_key),
        repr(cfg.api_key),
        json.dumps(public),
        repr(public),
        *_views(result),
        *_views(echoed),
        str(run_link(cfg, f"{fake_swanlab.host}/@alice/p/runs/abc")),
        caplog.text,
        *capsys.readouterr(),
    ]
    assert not [text for text in leaks if CANARY in text]
    # The server got it only where the protocol puts it: the authorization header.
    for request in fake_swanlab.requests:
        assert request.headers["authorization"] == CANARY
        assert CANARY not in request.path and CANARY not in request.body.decode()
        assert not [v for k, v in request.headers.items() if k != "authorization" and CANARY in v]


def test_canary_not_echoed_by_validation_errors(tmp_path: Path) -> None:
    bad = CANARY + " with a space"
    # Not a pydantic ValidationError: its errors() would carry the input (the key).
    with pytest.raises(SwanlabConfigError) as info:
        SwanlabConfig(mode="cloud", api_key=bad)  # type: ignore[arg-type]
    assert CANARY not in str(info.value) and CANARY not in repr(info.value)
    # Errors pydantic does raise for such a model hide the input in their text.
    with pytest.raises(ValidationError) as info_v:
        SwanlabConfig(mode="cloud", api_key=CANARY, log_dir="../x")  # type: ignore[arg-type]
    assert CANARY not in str(info_v.value)
    assert CANARY not in json.dumps(info_v.value.errors(include_url=False), default=str)

    with pytest.raises(SwanlabConfigError) as info2:
        resolve_configured({"SWANLAB_API_KEY": bad}, tmp_path / "none.json")
    assert "printable ASCII" in str(info2.value) and CANARY not in str(info2.value)


def test_canary_from_config_file_error_paths(tmp_path: Path) -> None:
    path = tmp_path / "swanlab.json"
    path.write_text(json.dumps({"mode": "cloud", "api_key": CANARY, "host": "gopher://x"}))
    path.chmod(0o600)
    with pytest.raises(SwanlabConfigError) as info:
        resolve_configured({}, path)
    assert CANARY not in str(info.value)
    path.chmod(0o644)
    with pytest.raises(SwanlabConfigError) as info:
        resolve_configured({}, path)
    assert "chmod 600" in str(info.value) and CANARY not in str(info.value)


def test_canary_in_secret_store_is_offered_for_redaction(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "secrets")
    ref = store.put(CANARY, label="swanlab_api_key")
    assert CANARY not in ref
    assert CANARY in store.known_values()
    assert store.get(ref) == CANARY
