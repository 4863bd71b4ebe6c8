"""The review of a new container before it is created (issue 27): its mounts resolved, and what only the user may
approve (mounts outside the allow-list, privileges beyond the confined default). A service: reads the file system
through targets/mounts.py; the question itself is asked by the face (a form), never answered by the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_async_dapo import privileges as privileges_mod
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import UserInputError
from verl_async_dapo.targets import mounts
from verl_async_dapo.targets.base import CreateSpec


class MountsNeedConfirmation(UserInputError):
    """Mounts outside the allow-list or extra privileges: the user has to say yes first."""


@dataclass(frozen=True)
class CreationReview:
    """What creating a container needs: the mounts resolved, and what only the user may approve."""

    resolved_mounts: dict[str, str]  # resolved host dir → container dir: what Docker gets
    unlisted: tuple[str, ...]  # resolved mount sources outside the allow-list
    privileges: tuple[privileges_mod.Privilege, ...]  # every privilege asked for
    unapproved: tuple[privileges_mod.Privilege, ...]  # those the user did not pre-approve in the environment

    @property
    def needs_yes(self) -> bool:
        return bool(self.unlisted or self.unapproved)

    def question(self, create: CreateSpec) -> str:
        """The form's text: every mount (resolved, with its mode) and every privilege with what it hands out."""
        writable = set(create.writable)
        lines = "; ".join(f"{h} → {c} ({'read-write' if c in writable else 'read-only'})"
                          for h, c in self.resolved_mounts.items())  # fmt: skip
        text = f"Create container {create.name}"
        if lines:
            text += f" with these host directories mounted: {lines}"
        if self.privileges:
            text += f". Extra privileges beyond the confined default: {privileges_mod.describe(self.privileges)}"
        return text + "?"


def creation_review(ctx: AppContext, create: CreateSpec) -> CreationReview:
    """The review of a new container (raises UserInputError for a mount that would hand out the host or an unknown
    privilege)."""
    try:
        review = mounts.review(create.mounts, ctx.env)
        wanted = privileges_mod.parse(create.privileges)
    except mounts.MountRefused as exc:
        raise UserInputError(str(exc)) from None
    except ValueError as exc:
        raise UserInputError(str(exc)) from None
    resolved: dict[str, str] = {}
    for host, inside in create.mounts.items():
        real = review.resolved[host]
        if real in resolved:
            raise UserInputError(f"{host} and another mount source are the same directory {real}: mount it once")
        resolved[real] = inside
    approved = privileges_mod.pre_approved(ctx.env)
    return CreationReview(resolved_mounts=resolved, unlisted=tuple(review.unlisted), privileges=wanted,
                          unapproved=tuple(p for p in wanted if p not in approved))  # fmt: skip


def confirmation_refusal(review: CreationReview) -> str:
    """Why nothing was created without the user's yes, and what only the user can do about it (never an argument
    the model could set)."""
    parts = []
    if review.unlisted:
        parts.append(f"mounting {', '.join(review.unlisted)} (outside the mount allow-list {mounts.ALLOW_ENV})")
    if review.unapproved:
        parts.append(f"the privileges {', '.join(p.value for p in review.unapproved)}")
    return (f"{' and '.join(parts)} need the user's own yes, and this client cannot show the user a form: the model "
            f"cannot confirm it for them. The user can add the directories to {mounts.ALLOW_ENV} and the privileges "
            f"to {privileges_mod.PRE_APPROVED_ENV} in the server's environment (then restart it), use a client with "
            "forms, or create the container with docker themselves and select it by name; nothing was created")  # fmt: skip
