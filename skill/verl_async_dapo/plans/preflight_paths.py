"""The paths preflight asks a target about, and one question for all of them (pure helpers, one cache).

Each check (verl, entry, data, disk) names its own paths; asked one check at a time that is a docker exec each, and
on a Ray target a short job of ~2 s each. ``KnownPaths`` asks once for every path the checks will name and answers
the checks from that; a path it was not asked about (the version picks one entry layout) is asked when needed.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Sequence

from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.targets.base import Target
from verl_async_dapo.verl.user_overrides import CHECKPOINT_KEY, user_value

# A release of each layout (recipe/ before 0.7.1, verl/experimental after).
LAYOUT_VERSIONS = ("0.7.0", "0.9.0")


def version_file(verl_home: str) -> str:
    return posixpath.join(verl_home, "verl/version/version")


def checkpoint_ancestors(settings: TrainingSettings) -> tuple[str, list[str]]:
    """Where the run writes checkpoints, and that path with each of its parents up to "/"."""
    # Where the run really writes (issue 27): the user's trainer.default_local_dir wins over CKPT_DIR.
    ckpt = user_value(settings.extra_overrides, CHECKPOINT_KEY) or settings.ckpt_dir or "checkpoints"
    ckpt = ckpt if ckpt.startswith("/") else posixpath.join(settings.verl_home, ckpt)
    ancestors = [ckpt]
    while ancestors[-1] != "/":
        ancestors.append(posixpath.dirname(ancestors[-1]))
    return ckpt, ancestors


class KnownPaths:
    """``paths_exist`` for one preflight, answered from what it already asked where it can."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._exists: dict[str, bool] = {}

    async def exist(self, paths: Sequence[str]) -> dict[str, bool]:
        unknown = [p for p in dict.fromkeys(paths) if p not in self._exists]
        if unknown:
            self._exists.update(await self.target.paths_exist(unknown))
        return {p: self._exists[p] for p in paths}

    async def ask_first(self, paths: Sequence[str]) -> None:
        """One question for all of ``paths``. Unanswered (the target failed it), each check asks for itself later
        and reports what failed in its own line."""
        with contextlib.suppress(TargetError):
            await self.exist(paths)
