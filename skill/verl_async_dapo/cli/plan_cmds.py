"""The CLI's commands that look before a launch: plan, classify, preflight."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

from verl_async_dapo.cli.common import EXIT_FAIL, EXIT_OK, _ctx, _print_json, scrub


def cmd_plan(args: argparse.Namespace) -> int:
    from verl_async_dapo.cli.params import training_params
    from verl_async_dapo.exceptions import PlanError
    from verl_async_dapo.plans.planning import plan_from_cli
    from verl_async_dapo.settings import param_hint

    try:
        plan = plan_from_cli(mode=args.mode, framework=args.framework, verl_version=args.verl_version,
                             features=args.features, oom_step=args.oom_step, params=training_params(args),
                             model_config=args.model_config, gpu_memory_gib=args.gpu_memory_gib)  # fmt: skip
    except PlanError as exc:  # the settings cannot be planned: the user's to fix, not a traceback
        print(f"error: {exc}{param_hint(exc.params, 'cli')}", file=sys.stderr)
        return EXIT_FAIL
    _print_json(plan)
    return EXIT_OK


def cmd_classify(args: argparse.Namespace) -> int:
    from verl_async_dapo.logs.classify import CLASSIFY_WINDOW_BYTES, classify, window_text

    with open(args.file, "rb") as fh:  # the window the supervisor classifies, so both name the same error
        fh.seek(0, 2)
        fh.seek(max(0, fh.tell() - CLASSIFY_WINDOW_BYTES))
        text = window_text(fh.read())
    # The secrets we hold are masked too, as in the MCP face; and what the log says is shown without bidi,
    # zero-width or control characters (a log line with U+202E reordered what the terminal showed: issue 27).
    result = _shown(classify(scrub(text)).to_json())
    if args.json:
        _print_json(result)
    else:
        primary = result["primary"]
        print("no error found" if primary is None else f"{primary['category']} (line {primary['line']}): "
              f"{primary.get('explanation', '')}\nfix: {primary.get('fix', '')}\n---\n{primary['excerpt']}")  # fmt: skip
    return EXIT_OK


def _shown(value: Any, key: str = "") -> Any:
    """Every string of a classification as it may be printed: cleaned, excerpts keeping their lines."""
    from verl_async_dapo.untrusted import clean

    if isinstance(value, dict):
        return {k: _shown(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v, key) for v in value]
    if isinstance(value, str):
        return clean(value, 1 << 20, one_line=False) if key == "excerpt" else clean(value, 4000)
    return value


def cmd_preflight(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.cli.params import training_params
    from verl_async_dapo.runs import no_gpus_allowed, preflight
    from verl_async_dapo.settings import settings_with_values
    from verl_async_dapo.wording import Face

    ctx = _ctx()
    settings = settings_with_values(training_params(args))
    allow = no_gpus_allowed(ctx, args.allow_no_gpus)
    report = anyio.run(functools.partial(preflight, args.container, settings, allow_no_gpus=allow, ctx=ctx))
    if args.json:
        _print_json(report.to_dict(Face.CLI))
    else:
        print("\n".join(report.lines(Face.CLI)))
    return EXIT_OK if report.ok else EXIT_FAIL
