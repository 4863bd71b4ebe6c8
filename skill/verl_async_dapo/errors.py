"""Which exceptions are the user's to fix (shown as a clear message) and which are our bugs.

The MCP server turns the first kind into ``ToolError`` and the CLI into ``error: …`` on
stderr; anything else propagates (a traceback in the CLI, a sanitized error in MCP).
"""

from __future__ import annotations

import errno

from pydantic import ValidationError


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, named by field; pydantic's "Value error, " noise removed."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def user_facing_error(exc: BaseException, face: str = "mcp") -> str | None:
    """The actionable message for an expected failure, or None for an unexpected one.

    ``face`` (mcp / cli): a refused run parameter is named as that face's caller passes it."""
    from verl_async_dapo.features import FeatureError
    from verl_async_dapo.flow import FlowError
    from verl_async_dapo.secret_store import SecretStoreError
    from verl_async_dapo.sessions import UserInputError
    from verl_async_dapo.settings import ParamError
    from verl_async_dapo.store import StoreError
    from verl_async_dapo.swanlab import SwanlabConfigError
    from verl_async_dapo.targets.base import TargetError

    # SecretStoreError messages never hold a secret value (by design), only paths and the fix.
    if isinstance(exc, (UserInputError, ParamError, FlowError, FeatureError, StoreError, TargetError, SwanlabConfigError,
                        SecretStoreError)):  # fmt: skip
        from verl_async_dapo.settings import param_hint

        return str(exc) + param_hint(tuple(getattr(exc, "params", ())), face)
    if isinstance(exc, ValidationError):
        return f"invalid input: {describe_validation_error(exc)}"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        where = f": {exc.filename}" if exc.filename else ""
        return f"could not save state ({exc.strerror}{where}); free space or fix the state directory, then retry"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
    return None
