"""Messages name actions in the words of their face; the vocabulary is checked against the real tools and flags."""

from __future__ import annotations

import json
import re
from pathlib import Path

from verl_async_dapo import cli
from verl_async_dapo.errors import user_facing_error
from verl_async_dapo.exceptions import FlowError, UserInputError
from verl_async_dapo.flow import Question, SessionState, check_answer_allowed
from verl_async_dapo.wording import ARG_FLAGS, TOOL_COMMANDS, Face, Say, flag, setting, tool

SNAPSHOT = Path(__file__).resolve().parents[1] / "mcp" / "snapshots" / "tools.json"


def _tools() -> dict[str, set[str]]:
    return {t["name"]: set(t["inputSchema"].get("properties", {})) for t in json.loads(SNAPSHOT.read_text("utf-8"))}


def _cli_flags() -> set[str]:
    parser = cli.build_parser()
    flags: set[str] = set()
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for sub in action.choices.values():
            for option in sub._actions:
                flags.update(option.option_strings)
    return flags


def test_every_tool_term_is_a_real_tool_and_every_cli_rendering_a_real_command() -> None:
    tools = _tools()
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for name, rendering in TOOL_COMMANDS.items():
        assert name in tools, name
        words = re.findall(r"`verl-async-dapo (\w+)", rendering)
        assert all(w in commands for w in words), rendering


def test_every_argument_term_is_a_real_argument_and_a_real_flag() -> None:
    arguments = set().union(*_tools().values())
    flags = _cli_flags()
    for name, rendering in ARG_FLAGS.items():
        assert name in arguments, name
        assert rendering in flags or rendering.isupper(), rendering  # RUN_ID is a positional


def test_one_message_two_renderings() -> None:
    say = Say("stop it with {stop} or pass {allow}; or set {v}", stop=tool("stop_training"),
              allow=flag("allow_shared_gpus", of="select_container"), v=setting("MODEL_PATH", "model_path"))  # fmt: skip
    assert say.render(Face.MCP) == ("stop it with stop_training or pass allow_shared_gpus=true (an argument of "
                                    "select_container); or set the "
                                    "start_training argument model_path (or MODEL_PATH in the server's environment)")
    assert say.render(Face.CLI) == "stop it with `verl-async-dapo stop RUN_ID` or pass --allow-shared-gpus; or set MODEL_PATH"
    assert str(say) == say.render(Face.MCP)
    error = UserInputError(say)
    assert user_facing_error(error) == say.render(Face.MCP)
    assert user_facing_error(error, Face.CLI) == say.render(Face.CLI)


def test_a_frozen_session_refusal_names_cli_commands_at_the_cli() -> None:
    try:
        check_answer_allowed(Question.PROXY, {}, False, SessionState.RUNNING)
    except FlowError as exc:
        assert "get_progress" in str(exc) and "stop_training" in str(exc)
        cli_text = user_facing_error(exc, Face.CLI) or ""
        assert "`verl-async-dapo status`" in cli_text and "`verl-async-dapo stop RUN_ID`" in cli_text
        assert "get_progress" not in cli_text and "stop_training" not in cli_text
    else:
        raise AssertionError("a running session's answers must be frozen")
