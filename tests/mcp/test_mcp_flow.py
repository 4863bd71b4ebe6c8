"""The question flow through the MCP tools, in both protocol eras: order, refusals, restart, skip."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from typing import Any

import pytest
from mcp_helpers import answer_first_three, ok, refused, result_text

from verl_async_dapo.targets.docker.containers import reset_client


async def test_happy_path_in_the_required_order(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        listing = await ok(c, "list_containers")
        assert listing["containers"][0]["name"] == "host"
        assert listing["create_new"]["option"] == "create"
        assert listing["session"]["next_question"] == "container"
        assert listing["menu_zh"].startswith("检测到以下容器：") and "创建新容器" in listing["menu_zh"]
        assert "请选择容器" in listing["menu_zh"]

        s = await ok(c, "select_container", {"name": "host"})
        assert s["answers"]["container"]["name"] == "host"
        assert s["next_question"] == "proxy"
        assert s["prompt_zh"] == '请提供代理配置（如不需要请回复"无"）：http_proxy / https_proxy'

        s = await ok(c, "set_proxy", {"http_proxy": "无", "https_proxy": ""})
        assert s["next_question"] == "features"
        assert s["prompt_zh"] == '是否有自定义特性需求？(回复"默认"使用默认配置)'

        s = await ok(c, "choose_features", {"names": ["default"]})
        assert s["next_question"] == "swanlab"
        assert s["prompt_zh"] == "SwanLab 监控配置：Host / API Key"

        sw = await ok(c, "configure_swanlab", {"mode": "disabled"})
        assert sw["changed"] is True and sw["already_configured"] is False
        assert sw["key_from"] == "none"

        s = await ok(c, "get_session")
        assert s["state"] == "ready"
        assert s["next_question"] is None
        assert "start_training" in s["next_step"]
        assert set(s["answers"]) == {"container", "proxy", "features", "swanlab"}


# (tool, args, answered before the call, what the refusal must name)
OUT_OF_ORDER = [
    ("set_proxy", {}, 0, "list_containers"),
    ("choose_features", {"names": ["default"]}, 0, "list_containers"),
    ("configure_swanlab", {"mode": "disabled"}, 0, "list_containers"),
    ("start_training", {}, 0, "list_containers"),
    ("choose_features", {"names": ["default"]}, 1, "set_proxy"),
    ("configure_swanlab", {"mode": "local"}, 1, "set_proxy"),
    ("start_training", {}, 1, "set_proxy"),
    ("configure_swanlab", {"mode": "disabled"}, 2, "choose_features"),
    ("start_training", {}, 2, "choose_features"),
    ("start_training", {}, 3, "configure_swanlab"),
]


@pytest.mark.parametrize(("tool", "args", "answered", "names"), OUT_OF_ORDER)
async def test_out_of_order_calls_are_refused_naming_the_next_step(
    connect: Callable[..., Any], tool: str, args: dict[str, Any], answered: int, names: str
) -> None:
    steps = [("select_container", {"name": "host"}), ("set_proxy", {}), ("choose_features", {"names": []})]
    async with connect() as c:
        for name, step_args in steps[:answered]:
            await ok(c, name, step_args)
        before = await ok(c, "get_session")
        message = await refused(c, tool, args)
        assert names in message
        assert await ok(c, "get_session") == before  # a refused call changes nothing


async def test_restarting_the_server_resumes_at_the_next_question(connect: Callable[..., Any]) -> None:
    async with connect() as first:
        await ok(first, "select_container", {"name": "host"})
        s = await ok(first, "set_proxy", {"http_proxy": "http://user:pw-123@proxy.example:3128"})
        session_id = s["session_id"]
    async with connect() as second:  # a new lifespan: a new AppContext on the same state dir
        s = await ok(second, "get_session")
        assert s["session_id"] == session_id
        assert s["next_question"] == "features"
        assert s["answers"]["proxy"]["http_proxy"] == "http://user:***@proxy.example:3128"
        assert "pw-123" not in json.dumps(s)
        s = await ok(second, "choose_features", {"names": ["offload", "no_flash_attn"]})
        assert s["answers"]["features"] == {"enabled": ["offload"], "disabled": ["flash_attn"]}
        assert s["next_question"] == "swanlab"


async def test_revising_an_earlier_answer_is_allowed_before_start(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        await answer_first_three(c)
        s = await ok(c, "set_proxy", {"https_proxy": "http://proxy.example:8080"})
        assert s["answers"]["proxy"]["https_proxy"] == "http://proxy.example:8080"
        assert s["next_question"] == "swanlab"


async def test_swanlab_from_the_environment_skips_question_4(
    connect: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWANLAB_API_KEY", "env-key-must-not-leak-0123456789")
    monkeypatch.setenv("SWANLAB_HOST", "http://127.0.0.1:9")
    async with connect() as c:
        s = await ok(c, "get_session")
        assert s["swanlab_preconfigured"] is True and s["swanlab_source"] == "env"
        s = await answer_first_three(c)
        assert s["state"] == "ready"
        assert s["next_question"] is None
        assert s["next_step"] == "all questions answered: call start_training"
        result = await c.call_tool("configure_swanlab", {})
        assert not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["already_configured"] is True
        assert result.structured_content["configured_from"] == "env"
        assert result.structured_content["changed"] is False
        assert "env-key-must-not-leak" not in result_text(result)


async def test_swanlab_local_mode_in_the_environment_also_skips(
    connect: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWANLAB_MODE", "local")
    async with connect() as c:
        s = await answer_first_three(c)
        assert s["next_step"] == "all questions answered: call start_training"


async def test_without_docker_the_host_is_offered_with_the_reason(
    connect: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    reset_client()
    async with connect() as c:
        listing = await ok(c, "list_containers")
        # A machine with the SLURM client commands (tests/run.sh installs them) offers its cluster too: no Docker.
        slurm = shutil.which("sinfo") is not None and shutil.which("sbatch") is not None
        assert [x["name"] for x in listing["containers"]] == ["host", *(["slurm"] if slurm else [])]
        assert listing["docker_note"] and "Docker is not reachable" in listing["docker_note"]
        assert "DOCKER_HOST" in listing["docker_note"] or "systemctl" in listing["docker_note"]
        # Nothing can be created without Docker: no "create new" choice, in the menu or the structured answer.
        lines = ["  [1] host (本机，不使用容器)", "  [2] slurm (SLURM 集群，每次训练作为批处理作业提交)"][: 1 + slurm]
        assert listing["menu_zh"].splitlines()[1:] == [*lines, "", f"请选择容器 ({'1/2' if slurm else '1'}):"]
        assert "create a new container" not in listing["menu_en"] and listing.get("create_new") is None
        s = await ok(c, "select_container", {"name": "host"})  # the host works without Docker
        assert s["next_question"] == "proxy"


async def test_session_resource_matches_get_session(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        await ok(c, "select_container", {"name": "host"})
        resources = {str(r.uri): r for r in (await c.list_resources()).resources}
        assert "verl-async-dapo://session/current" in resources
        read = await c.read_resource("verl-async-dapo://session/current")
        text = read.contents[0].text  # type: ignore[union-attr]
        assert json.loads(text) == await ok(c, "get_session")
        templates = [t.uri_template for t in (await c.list_resource_templates()).resource_templates]
        assert templates == ["verl-async-dapo://runs/{run_id}/log"]


async def test_log_resource_refuses_bad_and_unknown_run_ids(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        # Each refusal is matched on its own reason: the URI itself contains "runs", so a bare "run" would match
        # any error at all (a crash included).
        cases = (
            ("verl-async-dapo://runs/not-a-run/log", r"'not-a-run' is not a run id \(run_…\)"),
            ("verl-async-dapo://runs/run_doesnotexist/log", r"unknown run 'run_doesnotexist'; get_progress shows"),
        )
        for uri, reason in cases:
            with pytest.raises(Exception, match=reason):
                await c.read_resource(uri)


async def test_start_prompt_gives_the_order_and_the_first_tool(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        assert "start_dapo_training" in prompts
        got = await c.get_prompt("start_dapo_training")
        text = got.messages[0].content.text  # type: ignore[union-attr]
        order = [text.index(tool) for tool in ("list_containers", "set_proxy", "choose_features", "configure_swanlab")]
        assert order == sorted(order)
        assert text.index("start_training") > order[-1]
        for original in (
            "检测到以下容器",
            '请提供代理配置（如不需要请回复"无"）',
            "是否有自定义特性需求",
            "SwanLab 监控配置",
        ):
            assert original in text
