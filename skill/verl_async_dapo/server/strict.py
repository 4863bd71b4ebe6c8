"""No silent argument: a tool refuses an argument it does not take, naming the closest one it does (issue 28).

The SDK builds each tool's argument model from the function's signature with pydantic's default ``extra="ignore"``:
``start_training {"train_step": 4}`` then planned 100 steps without a word. Here every registered tool gets

- an argument model with ``extra="forbid"`` (the published input schema says ``additionalProperties: false``), and
- a check before the SDK's validation that names the unknown argument, the closest known ones (difflib) and the
  list the tool takes.

The refusal is a pydantic ``ValidationError`` (the SDK turns it into a tool execution error the model reads, as for
any invalid argument: SEP-1303) built without the input value: a misspelt ``api_key`` must not echo the key.
"""

from __future__ import annotations

import difflib
from typing import Any

from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from pydantic import ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


def suggest(name: str, known: list[str]) -> list[str]:
    """The known names closest to ``name`` (case and '-' vs '_' ignored), best first."""
    folded = {k.lower().replace("-", "_"): k for k in known}
    wanted = name.lower().replace("-", "_")
    hits = difflib.get_close_matches(wanted, list(folded), n=2, cutoff=0.7)
    # A prefix either way counts too (batch_size → train_batch_size, ppo_mini_batch_size): difflib's ratio misses it.
    hits += [k for k in folded if k not in hits and len(wanted) >= 3 and (k.endswith(wanted) or k.startswith(wanted))]
    return [folded[h] for h in hits][:3]


def unknown_argument_message(tool: str, name: str, known: list[str]) -> str:
    close = suggest(name, known)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (f"unknown argument {name!r} (nothing was done): {hint}{tool} takes: "
            f"{', '.join(known) if known else 'no arguments'}")  # fmt: skip


class _StrictMetadata(FuncMetadata):
    """The SDK's metadata with unknown keys refused before its own validation."""

    tool_name: str = ""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        known = [f.alias or n for n, f in self.arg_model.model_fields.items()]
        unknown = [k for k in arguments_to_validate if k not in known]
        if unknown:
            errors = [InitErrorDetails(type=PydanticCustomError("unknown_argument",
                                                                unknown_argument_message(self.tool_name, k, known)),
                                       loc=(k,), input="(not shown)") for k in unknown]  # fmt: skip
            raise ValidationError.from_exception_data(self.arg_model.__name__, errors, hide_input=True)
        return super().validate_arguments(arguments_to_validate)


def make_strict(tool: Tool) -> None:
    """Refuse unknown arguments in ``tool`` (registered already); its input schema says so too."""
    base = tool.fn_metadata.arg_model

    class Strict(base):  # type: ignore[misc, valid-type]
        model_config = ConfigDict(extra="forbid", title=base.__name__, arbitrary_types_allowed=True)

    Strict.__name__ = Strict.__qualname__ = base.__name__
    assert issubclass(Strict, ArgModelBase)
    meta = tool.fn_metadata
    tool.fn_metadata = _StrictMetadata(arg_model=Strict, output_schema=meta.output_schema,
                                       output_model=meta.output_model, wrap_output=meta.wrap_output,
                                       tool_name=tool.name)  # fmt: skip
    tool.parameters = Strict.model_json_schema(by_alias=True)
