"""What of a run only the user may approve (issue 27, item 3): code the training loads, output outside its tree.

The decision is ``verl.override_policy`` (pure); this service applies it to one start: the caller's parameters on
top of the user's configuration. What the server's environment already holds (EXTRA_OVERRIDES, REWARD_FN_PATH,
CKPT_DIR set by the user) is the user's own choice and is not asked again; what a caller passes (the model's tool
arguments, the CLI's flags) is, with the exact value shown. A start goes ahead only when every item is among those
the user approved (``approved``: the texts shown to them), so a yes covers what was shown and nothing else.
"""

from __future__ import annotations

from typing import Any

from verl_async_dapo.exceptions import ParamError, UserInputError
from verl_async_dapo.settings import TrainingSettings, settings_with_values
from verl_async_dapo.verl.override_policy import Approval, approvals
from verl_async_dapo.verl.plan import checkpoint_dir_for
from verl_async_dapo.verl.user_overrides import parse_user_overrides
from verl_async_dapo.wording import Say, Term

APPROVE_FLAG = "--approve"


class NeedsApproval(UserInputError):
    """Overrides or parameters that load code or write outside the run's tree: the user has to say yes first."""


def of_settings(settings: TrainingSettings) -> tuple[Approval, ...]:
    items = [(o.key, o.value, o.text) for o in parse_user_overrides(settings.extra_overrides)]
    ckpt = checkpoint_dir_for(settings, "RUN") if settings.ckpt_dir else None
    # VERL_HOME always takes part: unchanged from the user's configuration it is dropped by ``needed`` like any other
    # configured item; a caller's other directory is code and asked.
    return approvals(items, settings.verl_home, reward_fn_path=settings.resolved_reward_fn_path(), ckpt_dir=ckpt,
                     code_root=settings.verl_home)  # fmt: skip


def needed(settings: TrainingSettings, params: dict[str, Any]) -> tuple[Approval, ...]:
    """The items of ``settings`` the user has not already chosen in their own configuration (the environment)."""
    try:
        configured = set(of_settings(settings_with_values({})))
    except (ParamError, ValueError):  # the environment alone does not validate: nothing counts as chosen there
        configured = set()
    return tuple(a for a in of_settings(settings) if a not in configured)


def pending(settings: TrainingSettings, params: dict[str, Any]) -> list[str]:
    """The lines to show the user (each item's exact text and why), in order."""
    return [a.line() for a in needed(settings, params)]


def texts(settings: TrainingSettings, params: dict[str, Any]) -> tuple[str, ...]:
    return tuple(a.what for a in needed(settings, params))


def check(settings: TrainingSettings, params: dict[str, Any], approved: tuple[str, ...]) -> None:
    """Raise NeedsApproval unless every item needing the user's yes is among ``approved``."""
    missing = [a for a in needed(settings, params) if a.what not in approved]
    if missing:
        lines = "; ".join(a.line() for a in missing)
        raise NeedsApproval(Say(
            "only the user may approve these, and they have not: {lines}. {how} Nothing was started",
            lines=lines,
            how=Term(
                mcp="This client cannot show the user a form, and the model cannot approve on the user's behalf: the "
                    "user can start it from a terminal (verl-async-dapo start … --approve, which asks), or put these "
                    "values in the server's environment (EXTRA_OVERRIDES, REWARD_FN_PATH, CKPT_DIR) themselves.",
                cli=f"Confirm at the prompt (run it in a terminal), or pass {APPROVE_FLAG} after reading them.",
            ),
        ), ("extra_overrides",))  # fmt: skip
