"""Parsing verl version strings (pure).

The launcher learns the version from ``pip show verl``, ``verl/version/version`` or the user, so the
text can be ``0.9.1``, ``v0.6.1``, ``0.8.0.dev``, ``0.9.1rc1`` or ``0.7.0+cu124``. Only the release
numbers choose a profile: a pre-release or dev build of X.Y.Z is treated as X.Y.Z because verl's
``main`` already carries the next release's config schema under its ``.dev`` version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from verl_async_dapo.exceptions import VersionError

_VERSION_RE = re.compile(
    r"""
    ^\s*v?
    (?P<major>\d{1,4})\.(?P<minor>\d{1,4})(?:\.(?P<patch>\d{1,4}))?
    (?P<suffix>(?:[._-]?(?:a|b|rc|alpha|beta|pre|preview|c|dev|post)[._-]?\d*)*)
    (?:\+[A-Za-z0-9.]+)?
    \s*$
    """,
    re.VERBOSE | re.IGNORECASE,
)


@total_ordering
@dataclass(frozen=True)
class VerlVersion:
    major: int
    minor: int
    patch: int
    # The original text's pre/dev/post part, kept for display only (it never changes the profile).
    suffix: str = ""

    @classmethod
    def parse(cls, text: str) -> VerlVersion:
        if not isinstance(text, str):
            raise VersionError(f"verl version must be a string like '0.9.1', got {type(text).__name__}")
        match = _VERSION_RE.match(text)
        if match is None:
            shown = text if len(text) <= 40 else text[:40] + "…"
            raise VersionError(
                f"cannot parse verl version {shown!r}: expected MAJOR.MINOR[.PATCH] such as '0.6.1' or '0.9.1' "
                "(a leading 'v', an rc/dev suffix and a '+local' tag are accepted)"
            )
        return cls(
            int(match["major"]),
            int(match["minor"]),
            int(match["patch"] or 0),
            match["suffix"].lstrip("._-").lower(),
        )

    @property
    def release(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, VerlVersion):
            return NotImplemented
        return self.release < other.release

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VerlVersion):
            return NotImplemented
        return self.release == other.release

    def __hash__(self) -> int:
        return hash(self.release)

    def __str__(self) -> str:
        return "{}.{}.{}".format(*self.release)


def V(text: str) -> VerlVersion:
    return VerlVersion.parse(text)
