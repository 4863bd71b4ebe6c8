"""Shared by the target tests (a plain module: conftest modules are not meant to be imported)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from verl_async_dapo.targets.base import Target


def unique_name(prefix: str = "vadt") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class Env:
    """A target plus a scratch directory inside it (and a canary path that must never appear)."""

    target: Target
    kind: str
    work: str
    canary: str

    async def exists(self, path: str) -> bool:
        return (await self.target.paths_exist([path]))[path]
