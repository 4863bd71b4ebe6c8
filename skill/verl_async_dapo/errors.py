"""Which exceptions are the user's to fix (shown as a clear message) and which are our bugs.

The MCP server turns the first kind into ``ToolError`` and the CLI into ``error: …`` on
stderr; anything else propagates (a traceback in the CLI, a sanitized error in MCP).
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from pydantic import ValidationError

from verl_async_dapo.exceptions import VerlAsyncDapoError, describe_validation_error
from verl_async_dapo.wording import Face


def user_facing_error(exc: BaseException, face: Face = Face.MCP) -> str | None:
    """The actionable message for an expected failure, in the words of ``face``; None for an unexpected one.

    A refused run parameter (``exc.params``) is named as that face's caller passes it (settings.param_hint)."""
    from verl_async_dapo.settings import param_hint  # settings imports pydantic-settings: only when needed

    # Every exception of the tree says what to do (naming tools/arguments or commands/flags, as the face asks)
    # and never holds a secret value (exceptions.py).
    if isinstance(exc, VerlAsyncDapoError):
        return exc.for_face(face) + param_hint(exc.params, face.value)
    if isinstance(exc, ValidationError):
        return f"invalid input: {describe_validation_error(exc)}"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        where = f": {exc.filename}" if exc.filename else ""
        return f"could not save state ({exc.strerror}{where}); free space or fix the state directory, then retry"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
    return None


def scrubbed_user_error(exc: BaseException, scrub: Callable[[str], str], face: Face = Face.MCP) -> str | None:
    """user_facing_error with every secret masked (``scrub``: the application context's): the one way both faces
    word an expected failure. None for an unexpected one."""
    message = user_facing_error(exc, face)
    return None if message is None else scrub(message)
