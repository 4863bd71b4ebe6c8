"""Messages that name what the user can do in the words of the face they are shown in.

The same refusal reaches an agent through MCP ("stop it with stop_training, or pass allow_shared_gpus=true") and a
person through the CLI ("stop it with `verl-async-dapo stop`, or pass --allow-shared-gpus"). A message is therefore
written once as a template whose actions are ``Term``s, each carrying both renderings; the face picks one when it
shows the message (``Say.render``). Nothing is string-replaced after the fact, and a term used here is one of the
names in ``TOOL_COMMANDS`` / ``ARG_FLAGS``, so a renamed tool or flag is changed in one place.

Errors carry such a message: every exception of exceptions.py takes a ``Text`` and renders it with ``for_face``.
Pure: no I/O. ``str()`` of a message is its MCP rendering (the agent is the main face, and existing callers that
only need text keep working).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Face(str, Enum):
    MCP = "mcp"
    CLI = "cli"


@dataclass(frozen=True)
class Term:
    """One action or setting, named as each face names it."""

    mcp: str
    cli: str

    def render(self, face: Face) -> str:
        return self.mcp if face is Face.MCP else self.cli


# What each MCP tool is on the command line (the CLI answers the four questions in one `start`).
TOOL_COMMANDS: dict[str, str] = {
    "list_containers": "`verl-async-dapo containers`",
    "select_container": "`verl-async-dapo start --container NAME`",
    "start_training": "`verl-async-dapo start --container NAME`",
    "get_progress": "`verl-async-dapo status`",
    "check_errors": "`verl-async-dapo errors`",
    "stop_training": "`verl-async-dapo stop RUN_ID`",
    "get_session": "`verl-async-dapo runs`",
    "configure_swanlab": "SWANLAB_HOST / SWANLAB_API_KEY (or --swanlab-mode local|disabled)",
}

# Tool arguments that are CLI flags under another spelling.
ARG_FLAGS: dict[str, str] = {
    "allow_shared_gpus": "--allow-shared-gpus",
    "allow_no_gpus": "--allow-no-gpus",
    "confirm": "--yes",
    "run_id": "RUN_ID",
}


def tool(name: str) -> Term:
    """An MCP tool, or the CLI command that does the same."""
    return Term(mcp=name, cli=TOOL_COMMANDS[name])


def flag(name: str, value: str = "true", *, of: str) -> Term:
    """An argument of the MCP tool ``of`` (``allow_no_gpus=true (an argument of select_container)``), or its CLI flag.

    The tool is always named (issue 28): advice shown by start_training that said only "pass allow_no_gpus=true"
    made the agent pass it to start_training, which does not take it. tests/mcp/test_refusal_advice.py checks that
    every ``flag`` names an argument its tool takes."""
    return Term(mcp=f"{name}={value} (an argument of {of})", cli=ARG_FLAGS[name])


def setting(env_name: str, arg: str | None = None) -> Term:
    """A training parameter: MCP names the start_training argument (when it has one) and the server's environment;
    the CLI names the environment variable of the shell it runs in."""
    mcp = f"the start_training argument {arg} (or {env_name} in the server's environment)" if arg else (
        f"{env_name} in the server's environment")  # fmt: skip
    return Term(mcp=mcp, cli=env_name)


def either(mcp: str, cli: str) -> Term:
    """Two already-rendered texts (e.g. a list of lines that themselves hold terms)."""
    return Term(mcp=mcp, cli=cli)


class Say:
    """A message: a ``str.format`` template whose fields are terms (or plain values, shown alike in both faces)."""

    __slots__ = ("template", "terms")

    def __init__(self, template: str, **terms: Term | Say | str | int) -> None:
        self.template = template
        self.terms = terms

    def render(self, face: Face) -> str:
        values = {k: v.render(face) if isinstance(v, (Term, Say)) else v for k, v in self.terms.items()}
        return self.template.format(**values)

    def __str__(self) -> str:
        return self.render(Face.MCP)

    def __repr__(self) -> str:
        return f"Say({self.template!r})"


Text = str | Say | Term


def render(text: Text | None, face: Face) -> str | None:
    """Plain strings are the same in every face."""
    if text is None:
        return None
    return text.render(face) if isinstance(text, (Say, Term)) else text
