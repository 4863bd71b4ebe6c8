"""What every CLI command shares: exit codes, JSON output, the application context, the usage error."""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from verl_async_dapo.exceptions import UserInputError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _ctx() -> Any:
    from verl_async_dapo.context import AppContext

    return AppContext.from_environment()


def scrub(text: str) -> str:
    """The application context's scrub (every secret this user's state and environment hold), as the MCP face's."""
    try:
        return str(_ctx().scrub(text))
    except OSError:  # the failure being told may be the state directory's own: the generic masks still apply
        from verl_async_dapo.redact import redact

        return redact(text)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Imports with the cyclic garbage collector paused, and what they built frozen.

    Importing the mcp SDK builds several hundred pydantic models. The collector runs on allocation counts, so during
    that import it walks the growing heap again and again for little: module-level objects live as long as the
    process. Frozen afterwards (``gc.freeze``), those objects are left out of later collections too, so the first
    collections after start-up do not pay the walk back; the price is that the import's own garbage (a few thousand
    objects, < 1 MiB) is never freed. The server's cold start is ~6 % shorter (bench/RESULTS.md, benchmark 3); the
    other commands import far less and gain nothing measurable, so they do not use this.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


class CliUsageError(UserInputError):
    """A command line we refuse before doing anything; the message says what to do instead."""


def invoked_as(argv0: str | None = None, path: str | None = None) -> str:
    """This command as the user can type it: the bare name when PATH finds this same command, else its full path
    (right after scripts/install.py, ~/.local/bin is often not on PATH: a bare name there would not run)."""
    import os
    import shutil

    argv0 = argv0 if argv0 is not None else sys.argv[0]
    name = os.path.basename(argv0)
    if name != "verl-async-dapo":  # `python -m verl_async_dapo`, or main() called in-process: the installed name
        return "verl-async-dapo"
    found = shutil.which(name, path=path)
    mine = os.path.abspath(argv0)
    if found and os.path.realpath(found) == os.path.realpath(mine):
        return name
    return mine
