"""``verl-async-dapo start``: the whole question flow answered from flags and the environment.

This is what the shell scripts call. It opens its own session (so it never hijacks one an
agent is in the middle of), answers the four questions in order with the original skill's
environment variables, then starts training exactly as the MCP tool does.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from verl_async_dapo import sessions
from verl_async_dapo.cli.params import training_params
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import UserInputError
from verl_async_dapo.runs import (
    StartResult,
    approval_texts,
    approvals_needed,
    check_approvals,
    no_gpus_allowed,
    preflight,
    refuse_unplannable,
    start_training,
)
from verl_async_dapo.settings import settings_with_values
from verl_async_dapo.wording import Face


def _env_first(ctx: AppContext, *names: str) -> str | None:
    for name in names:
        if ctx.env.get(name):
            return ctx.env[name]
    return None


async def start_from_cli(ctx: AppContext, args: argparse.Namespace) -> StartResult:
    params = training_params(args)
    settings = settings_with_values(params)  # validate every variable before anything is created
    approved = _approve(ctx, params, args.approve)  # asked before anything is looked at or created
    check_approvals(ctx, params, approved)
    allow = no_gpus_allowed(ctx, args.allow_no_gpus)
    await refuse_unplannable(args.container, settings, args.features, skip_preflight=args.skip_preflight,
                             allow_no_gpus=allow)  # before a session exists
    try:
        problem = SWANLAB_MISSING if _swanlab_unanswerable(ctx, args) else None
    except UserInputError as exc:  # SwanLab configured wrongly (e.g. a placeholder key)
        problem = str(exc)
    if problem is not None:
        # The target's problems in the same refusal: a new user met "SwanLab is not configured", then the verl
        # version, then preflight, in three runs (issue 28).
        found = [] if args.skip_preflight else [
            line for line in (await preflight(args.container, settings, allow_no_gpus=allow, ctx=ctx)).lines(Face.CLI)
            if not line.startswith(("[ok]", "[error] swanlab: "))]  # fmt: skip
        raise UserInputError("\n".join([problem, *found]))
    sid = sessions.new_session(ctx)
    try:
        await sessions.select_container(ctx, args.container, allow_shared_gpus=args.allow_shared_gpus,
                                        allow_no_gpus=args.allow_no_gpus, session_id=sid)  # fmt: skip
        sessions.set_proxy(
            ctx,
            args.http_proxy or _env_first(ctx, "http_proxy", "HTTP_PROXY"),
            args.https_proxy or _env_first(ctx, "https_proxy", "HTTPS_PROXY"),
            args.no_proxy or _env_first(ctx, "no_proxy", "NO_PROXY"),
            session_id=sid,
        )
        names = args.features.split(",") if args.features else settings.feature_choice().to_names()
        sessions.choose_features(ctx, names, session_id=sid)
        if sessions.swanlab_question_asked(ctx):
            await _ask_swanlab(ctx, args, sid)
        result = await start_training(ctx, params, skip_preflight=args.skip_preflight, session_id=sid, face=Face.CLI,
                                      apply_memory_fix=args.apply_memory_fix, approved=approved)
    except BaseException:
        # Nothing started: this half-answered session must not become the "current" one an agent picks up.
        sessions.abandon_session(ctx, sid)
        raise
    return result


def _approve(ctx: AppContext, params: dict[str, Any], flag: bool) -> tuple[str, ...]:
    """The items only the user may approve (issue 27): --approve, or a yes typed at the terminal; else none (the
    start then refuses, naming them and the flag)."""
    texts = approval_texts(ctx, params)
    if not texts or flag:
        return texts
    if not sys.stdin.isatty():
        return ()
    print("These load code or write outside the run's tree:", file=sys.stderr)
    for line in approvals_needed(ctx, params):
        print(f"  {line}", file=sys.stderr)
    answer = input("Start training with exactly these values? [y/N] ").strip().lower()
    return texts if answer in ("y", "yes") else ()


SWANLAB_MISSING = ("SwanLab is not configured: set SWANLAB_HOST and SWANLAB_API_KEY (or SWANLAB_MODE=local / "
                   "disabled), or pass --swanlab-mode local|disabled")


def _swanlab_unanswerable(ctx: AppContext, args: argparse.Namespace) -> bool:
    """SwanLab must be asked, and there is nobody to ask (no terminal) and no --swanlab-mode answering it."""
    return (sessions.swanlab_question_asked(ctx) and args.swanlab_mode not in ("local", "disabled")
            and not sys.stdin.isatty())  # fmt: skip


async def _ask_swanlab(ctx: AppContext, args: argparse.Namespace, sid: str) -> None:
    if args.swanlab_mode in ("local", "disabled"):
        await sessions.configure_swanlab(ctx, mode=args.swanlab_mode, session_id=sid)
        return
    if not sys.stdin.isatty():
        raise UserInputError(SWANLAB_MISSING)
    print("SwanLab 监控配置 / SwanLab monitoring:", file=sys.stderr)
    host = input("  Host (empty = SwanLab cloud): ").strip() or None
    key = getpass.getpass("  API Key: ").strip() or None
    await sessions.configure_swanlab(ctx, mode="cloud", host=host, api_key=key, session_id=sid)
