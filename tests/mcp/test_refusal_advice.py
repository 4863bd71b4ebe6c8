"""Issue 28, item 3: every fix a refusal names is an argument of the tool being called or of the exact other tool it
names, and following it literally changes the outcome, on both faces.

Static part: every piece of advice in the product's texts that names an argument (``name=true``) names a tool that
takes it (``wording.flag`` always does: ``allow_no_gpus=true (an argument of select_container)``); tool
descriptions and argument descriptions speak of their own tool and are left out. Dynamic part: the refusals a new
user meets on the host target (no GPU, no model, a misspelt argument) are followed literally, on MCP and on the
CLI, and the refused problem goes away.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import ok, refused, stop_active_runs

from harness.standin_files import parquet_bytes, write_model
from verl_async_dapo import cli, runs

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).parent / "snapshots" / "tools.json"
TOOLS: dict[str, set[str]] = {t["name"]: set(t["inputSchema"].get("properties", {}))
                              for t in json.loads(SNAPSHOT.read_text("utf-8"))}  # fmt: skip
ARG_ADVICE = re.compile(r"(?:^|(?<=[\s(]))([a-z_]+)=(?:true|false)\b")
OF_TOOL = re.compile(r"\b([a-z_]+)=(?:true|false) \(an argument of ([a-z_]+)\)")
START_ARG = re.compile(r"the start_training argument ([a-z_]+)")


def _advice_literals() -> Iterator[tuple[str, int, str]]:
    """(file, line, text) of every string constant in the product that is not a docstring or a Field description."""
    for path in sorted((REPO / "skill" / "verl_async_dapo").rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                skip.add(id(node.value))  # docstrings
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Field":
                skip.update(id(k.value) for k in node.keywords if k.arg == "description")
                skip.update(id(v) for k in node.keywords if k.arg == "description" for v in ast.walk(k.value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                yield str(path.relative_to(REPO)), node.lineno, node.value


def test_every_argument_named_in_advice_belongs_to_a_tool_named_with_it() -> None:
    orphans = []
    for where, line, text in _advice_literals():
        for match in ARG_ADVICE.finditer(text):
            named = [t for t in TOOLS if re.search(rf"\b{t}\b", text)]
            if not any(match.group(1) in TOOLS[t] for t in named):
                orphans.append(f"{where}:{line}: {match.group(0)} (tools named: {named})")
    assert orphans == []


def test_every_flag_call_names_a_tool_that_takes_the_argument() -> None:
    calls = []
    for path in (REPO / "skill" / "verl_async_dapo").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "flag":
                of = next((k.value.value for k in node.keywords if k.arg == "of"), None)  # type: ignore[attr-defined]
                calls.append((node.args[0].value, of))  # type: ignore[attr-defined]
    assert calls, "the check found the calls"
    assert [(arg, of) for arg, of in calls if of not in TOOLS or arg not in TOOLS[of]] == []


@pytest.fixture
def tree(host_verl_tree: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in verl tree on the host (no GPU here), data in place, no model yet; SwanLab disabled."""
    (host_verl_tree / "data").mkdir(exist_ok=True)
    for name in ("dapo-math-17k.parquet", "aime-2024.parquet"):
        (host_verl_tree / "data" / name).write_bytes(parquet_bytes())
    for name, value in {"VERL_HOME": str(host_verl_tree), "TRAIN_STEPS": "2", "TRAINER_GPUS": "1",
                        "ROLLOUT_GPUS": "1", "ROLLOUT_TP": "1", "FRAMEWORK": "fsdp", "SWANLAB_MODE": "disabled",
                        "STANDIN_STEP_SECONDS": "0.05",
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(runs.ALLOW_NO_GPUS_ENV, raising=False)
    yield host_verl_tree
    stop_active_runs()


def _follow(text: str, called: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls the advice names, literally: `X=true (an argument of T)` → T {X: true}; `the start_training
    argument A` → start_training {A: …} (the value is the caller's; the name is what is checked)."""
    calls: list[tuple[str, dict[str, Any]]] = [(t, {a: True}) for a, t in OF_TOOL.findall(text)]
    calls += [("start_training", {a: None}) for a in START_ARG.findall(text)]
    for tool, args in calls:
        assert tool in TOOLS and set(args) <= TOOLS[tool], (called, tool, args)
    return calls


async def test_mcp_refusals_followed_literally_change_the_outcome(connect: Any, tree: Path) -> None:
    async with connect() as client:
        await ok(client, "select_container", {"name": "host"})
        await ok(client, "set_proxy", {})
        await ok(client, "choose_features", {"names": ["default"]})
        text = await refused(client, "start_training")
        assert "[error] gpus: " in text and "[error] MODEL_PATH: " in text, text
        calls = _follow(text, "start_training")
        assert ("select_container", {"allow_no_gpus": True}) in calls, calls
        assert ("start_training", {"model_path": None}) in calls, calls
        # Follow the GPU advice: the answer to question 1 again, with the argument it names.
        await ok(client, "select_container", {"name": "host", "allow_no_gpus": True})
        text = await refused(client, "start_training")
        assert "[error] gpus: " not in text and "[error] MODEL_PATH: " in text, text
        # Follow the model advice: the start_training argument it names.
        model = write_model(tree / "elsewhere" / "my-model")
        started = await ok(client, "start_training", {"model_path": str(model)})
        assert started["run_id"].startswith("run_")
        # A misspelt argument: the name it suggests is taken as is.
        text = await refused(client, "plan_training", {"train_step": 3})
        meant = re.search(r"did you mean ([a-z_]+)", text)
        assert meant is not None, text
        plan = await ok(client, "plan_training", {meant.group(1): 3})
        assert plan["settings"]["train_steps"] == 3 and plan["settings_sources"]["train_steps"] == "argument", plan


def test_cli_refusals_followed_literally_change_the_outcome(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["start", "--container", "host"]) == cli.EXIT_FAIL
    err = capsys.readouterr().err
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", err))
    start_flags = {o for a in cli.build_parser()._subparsers._group_actions[0].choices["start"]._actions  # type: ignore[union-attr]
                   for o in a.option_strings}  # fmt: skip
    assert flags and flags <= start_flags, (flags - start_flags, err)  # every flag named is one of `start`'s
    assert "--allow-no-gpus" in flags and "or set MODEL_PATH" in err, err
    write_model(tree / "models" / "Qwen3-8B")  # "download the model there": the default path
    assert cli.main(["start", "--container", "host", "--allow-no-gpus"]) == cli.EXIT_OK, capsys.readouterr().err
    assert "run id:   run_" in capsys.readouterr().out
