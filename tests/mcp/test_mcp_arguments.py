"""Bad arguments, one injection attempt per argument: refused with a message the model can act
on, nothing executed, nothing stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import answer_first_three, ok, refused

from verl_async_dapo.features import FEATURE_ORDER


async def test_unknown_feature_lists_the_valid_ones(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        await ok(c, "select_container", {"name": "host"})
        await ok(c, "set_proxy", {})
        message = await refused(c, "choose_features", {"names": ["flash_attn", "turbo_mode"]})
        assert "turbo_mode" in message
        for feature in FEATURE_ORDER:
            assert feature.value in message
        assert (await ok(c, "get_session"))["next_question"] == "features"


@pytest.mark.parametrize(
    "names", [["offload", "no_offload"], ["x" * 65], ["default"] * 33], ids=["on-and-off", "too-long", "too-many"]
)
async def test_contradictory_or_oversized_feature_lists_are_refused(
    connect: Callable[..., Any], names: list[str]
) -> None:
    async with connect() as c:
        await ok(c, "select_container", {"name": "host"})
        await ok(c, "set_proxy", {})
        before = await ok(c, "get_session")
        message = await refused(c, "choose_features", {"names": names})
        assert message.strip(), "a refusal must say why"
        # Nothing was stored: the session is exactly as before and still waits for the features answer.
        after = await ok(c, "get_session")
        assert after == before
        assert after["next_question"] == "features"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("http_proxy", "; touch {canary}"),
        ("https_proxy", "http://proxy:8080/$(touch {canary})"),
        ("http_proxy", "-x http://evil"),
        ("http_proxy", "file:///etc/passwd"),
        ("no_proxy", "localhost;touch {canary}"),
        ("no_proxy", "-v"),
    ],
)
async def test_proxy_injection_is_refused(connect: Callable[..., Any], tmp_path: Path, field: str, value: str) -> None:
    canary = tmp_path / "pwned"
    async with connect() as c:
        await ok(c, "select_container", {"name": "host"})
        message = await refused(c, "set_proxy", {field: value.format(canary=canary)})
        assert field in message
        session = await ok(c, "get_session")
        assert "proxy" not in session["answers"] and session["next_question"] == "proxy"
    assert not canary.exists()


@pytest.mark.parametrize(
    "name", ["jins; touch /tmp/x", "$(touch /tmp/x)", "`id`", "-v", "a b", "../host", "x" * 129, ""]
)
async def test_container_name_with_shell_metacharacters_is_refused(connect: Callable[..., Any], name: str) -> None:
    async with connect() as c:
        message = await refused(c, "select_container", {"name": name})
        assert "name" in message
        assert (await ok(c, "get_session"))["session_id"] is None  # nothing was started


@pytest.mark.parametrize(
    ("create", "mentions"),
    [
        ({"name": "ok-name", "image": "ubuntu; touch /tmp/x"}, "image"),
        ({"name": "ok-name", "image": "--privileged"}, "image"),
        ({"name": "bad name", "image": "ubuntu:22.04"}, "name"),
        ({"name": "ok-name", "image": "ubuntu:22.04", "gpus": "all; id"}, "gpus"),
        ({"name": "ok-name", "image": "ubuntu:22.04", "shm_size": "1g --privileged"}, "shm_size"),
        ({"name": "ok-name", "image": "ubuntu:22.04", "mounts": {"/var/run/docker.sock:/x": "/x"}}, "mount"),
        ({"name": "ok-name", "image": "ubuntu:22.04", "mounts": {"relative": "/data"}}, "absolute"),
        ({"name": "ok-name", "image": "ubuntu:22.04", "privileged": True}, "privileged"),
    ],
)
async def test_create_spec_is_validated_before_docker_is_touched(
    connect: Callable[..., Any], create: dict[str, Any], mentions: str
) -> None:
    async with connect() as c:
        message = await refused(c, "select_container", {"create": create})
        assert mentions in message


async def test_name_and_create_together_are_refused(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        message = await refused(
            c, "select_container", {"name": "host", "create": {"name": "n1", "image": "ubuntu:22.04"}}
        )
        assert "either" in message


async def test_unknown_container_names_the_fix(connect: Callable[..., Any], docker_engine: None) -> None:
    async with connect() as c:
        message = await refused(c, "select_container", {"name": "vad-no-such-container-7f3a"})
        assert "vad-no-such-container-7f3a" in message


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        ({"train_steps": 0}, "train_steps"),
        ({"trainer_gpus": -1}, "trainer_gpus"),
        ({"max_oom_retries": 11}, "max_oom_retries"),
        ({"framework": "jax"}, "framework"),
        ({"mode": "ppo; rm -rf /"}, "mode"),
        ({"model_path": "-rf"}, "model_path"),
        ({"train_file": "../../etc/passwd"}, "train_file"),
        ({"val_file": "a\nb"}, "val_file"),
    ],
)
async def test_start_training_rejects_bad_parameters(
    connect: Callable[..., Any], args: dict[str, Any], mentions: str
) -> None:
    async with connect() as c:
        await answer_first_three(c)
        await ok(c, "configure_swanlab", {"mode": "disabled"})
        message = await refused(c, "start_training", args)
        assert mentions in message
        session = await ok(c, "get_session")
        assert session["state"] == "ready" and session["run_id"] is None


@pytest.mark.parametrize("run_id", ["../../etc/passwd", "run_x; id", "r" * 200, "ses_abc"])
@pytest.mark.parametrize("tool", ["get_progress", "check_errors", "stop_training"])
async def test_run_ids_are_validated(connect: Callable[..., Any], tool: str, run_id: str) -> None:
    async with connect() as c:
        message = await refused(c, tool, {"run_id": run_id})
        assert "run_id" in message


@pytest.mark.parametrize("tool", ["get_progress", "check_errors", "stop_training"])
async def test_run_tools_before_any_run_say_what_to_do(connect: Callable[..., Any], tool: str) -> None:
    async with connect() as c:
        assert "start_training" in await refused(c, tool)


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        ({"mode": "offline"}, "mode"),
        ({"mode": "cloud", "host": "ftp://swanlab.example", "api_key": "k" * 20}, "http"),
        ({"mode": "cloud", "host": "http://user:pw@swanlab.example", "api_key": "k" * 20}, "credentials"),
        ({"mode": "cloud", "host": "http://127.0.0.1:9", "api_key": "bad key with spaces"}, "API key"),
        ({"mode": "local", "log_dir": "../../etc"}, ".."),
    ],
)
async def test_swanlab_settings_are_validated(connect: Callable[..., Any], args: dict[str, Any], mentions: str) -> None:
    async with connect() as c:
        await answer_first_three(c)
        message = await refused(c, "configure_swanlab", args)
        assert mentions in message
        assert "k" * 20 not in message
        assert (await ok(c, "get_session"))["next_question"] == "swanlab"


@pytest.mark.parametrize(("tool", "typo", "meant"), [
    ("start_training", "train_step", "train_steps"), ("start_training", "batch_size", "train_batch_size"),
    ("plan_training", "train_step", "train_steps"), ("select_container", "allow_no_gpu", "allow_no_gpus"),
    ("set_proxy", "http-proxy", "http_proxy"), ("choose_features", "name", "names"),
    ("configure_swanlab", "apikey", "api_key"), ("get_progress", "runid", "run_id"),
    ("check_errors", "run", "run_id"), ("stop_training", "confirmed", "confirm"),
    ("resume_training", "run_ids", "run_id"), ("configure_notifications", "event", "events"),
])  # fmt: skip
async def test_a_misspelt_argument_is_refused_with_the_one_meant(connect: Callable[..., Any], tool: str, typo: str,
                                                                  meant: str) -> None:  # fmt: skip
    """Issue 28: `train_step` was dropped and the run planned 100 steps. Now every tool refuses an argument it does
    not take, names the closest one, stores nothing, and echoes no value (a misspelt key stays unseen)."""
    async with connect() as c:
        schema = {t.name: t.input_schema for t in (await c.list_tools()).tools}[tool]
        assert schema.get("additionalProperties") is False, tool
        assert meant in schema["properties"], (tool, meant)  # the table names real arguments
        before = await ok(c, "get_session")
        message = await refused(c, tool, {typo: "sk-canary-0123456789"})
        assert f"unknown argument {typo!r}" in message and f"did you mean {meant}" in message, message
        assert "sk-canary" not in message
        assert await ok(c, "get_session") == before


async def test_every_tool_publishes_no_additional_properties(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        tools = {t.name: t.input_schema for t in (await c.list_tools()).tools}
    assert [n for n, s in tools.items() if s.get("additionalProperties") is not False] == []
    async with connect() as c:  # and a tool without arguments refuses one too
        message = await refused(c, "get_session", {"session": "x"})
        assert "unknown argument 'session'" in message and "get_session takes:" in message
