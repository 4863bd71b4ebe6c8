"""The human CLI: ``verl-async-dapo <command>``. Thin: parses arguments, calls the services, prints.

Heavy imports (docker, mcp, swanlab) happen inside the commands that need them, so ``--help``
and ``plan`` stay fast.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _ctx() -> Any:
    from verl_async_dapo.app import AppContext

    return AppContext.from_environment()


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


def cmd_serve(args: argparse.Namespace) -> int:
    with _gc_paused():
        from verl_async_dapo.server import serve

    serve(transport=args.transport, host=args.host, port=args.port)
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from verl_async_dapo.cli_params import training_params
    from verl_async_dapo.planning import plan_from_cli
    from verl_async_dapo.settings import param_hint
    from verl_async_dapo.verl import PlanError

    try:
        plan = plan_from_cli(mode=args.mode, framework=args.framework, verl_version=args.verl_version,
                             features=args.features, oom_step=args.oom_step, params=training_params(args))  # fmt: skip
    except PlanError as exc:  # the settings cannot be planned: the user's to fix, not a traceback
        print(f"error: {exc}{param_hint(exc.params, 'cli')}", file=sys.stderr)
        return EXIT_FAIL
    _print_json(plan)
    return EXIT_OK


def cmd_classify(args: argparse.Namespace) -> int:
    from verl_async_dapo.logs.classify import classify
    from verl_async_dapo.redact import redact

    with open(args.file, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - (4 << 20)))  # the last 4 MiB hold the fatal error
        text = fh.read().decode("utf-8", errors="replace")
    result = classify(redact(text)).to_json()
    if args.json:
        _print_json(result)
    else:
        primary = result["primary"]
        print("no error found" if primary is None else f"{primary['category']} (line {primary['line']}): "
              f"{primary.get('explanation', '')}\nfix: {primary.get('fix', '')}\n---\n{primary['excerpt']}")  # fmt: skip
    return EXIT_OK


def cmd_preflight(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.cli_params import training_params
    from verl_async_dapo.preflight import run_preflight
    from verl_async_dapo.runs import settings_with
    from verl_async_dapo.targets.registry import get_target

    settings = settings_with(_ctx(), training_params(args))
    report = anyio.run(run_preflight, get_target(args.container), settings)
    if args.json:
        _print_json(report.to_dict())
    else:
        print("\n".join(report.lines()))
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_start(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.quickstart import start_from_cli

    ctx = _ctx()
    result = anyio.run(start_from_cli, ctx, args)
    if args.json:
        _print_json(result.model_dump())
    else:
        print(f"run id:   {result.run_id}\nstatus:   {result.status}\ntarget:   {result.target} "
              f"({result.mode}, {result.framework}, verl {result.verl_version})\n"
              f"features: {', '.join(result.features)}\nSwanLab:  {result.swanlab_url or result.swanlab_note}")  # fmt: skip
        print("monitor:\n  " + "\n  ".join(result.monitor_commands), flush=True)
    if args.wait:  # the summary first (run id, link), then follow until the run ends
        from verl_async_dapo.status_view import follow_status

        return anyio.run(follow_status, ctx, result.run_id, 2.0)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.runs import get_progress
    from verl_async_dapo.status_view import follow_status, render_status

    ctx = _ctx()
    if args.follow:
        return anyio.run(follow_status, ctx, args.run_id, args.interval)
    progress = anyio.run(get_progress, ctx, args.run_id)
    if args.json:
        _print_json(progress)
    else:
        print(render_status(progress))
    return EXIT_OK if progress["status"] != "failed" else EXIT_FAIL


def cmd_errors(args: argparse.Namespace) -> int:
    from verl_async_dapo.runs import check_errors
    from verl_async_dapo.status_view import render_errors

    report = check_errors(_ctx(), args.run_id)
    if args.json:
        _print_json(report)
    else:
        print(render_errors(report))
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.runs import stop_training

    result = anyio.run(stop_training, _ctx(), args.run_id)
    _print_json(result) if args.json else print(f"{result['run_id']}: {result['status']}")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    from verl_async_dapo.runs import list_runs

    rows = list_runs(_ctx(), args.limit)
    if args.json:
        _print_json(rows)
    else:
        for row in rows:
            print(f"{row['run_id']}  {row['status']:<10} {row['target']:<20} attempts={row['attempts']}")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    from verl_async_dapo.runs import resume_run

    result = resume_run(_ctx(), args.run_id)
    _print_json(result) if args.json else print(f"{result['run_id']}: {result['message']}")
    return EXIT_OK


def cmd_supervise(args: argparse.Namespace) -> int:
    from verl_async_dapo.supervisor import main

    return main(args.run_id)


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    from verl_async_dapo.cli_params import add_training_flags

    parser = argparse.ArgumentParser(prog="verl-async-dapo", description="Launch and supervise verl DAPO training.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    p.add_argument("--port", type=int, default=8765)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("plan", help="print the launch plan for the current environment (no side effects)")
    p.add_argument("--mode", choices=["dapo", "one_step_off_policy"])
    p.add_argument("--framework", choices=["fsdp", "megatron"])
    p.add_argument("--verl-version", help="e.g. 0.6.1 or 0.9.1 (default VERL_VERSION or 0.9.1)")
    p.add_argument("--features", help="explicit features, comma-separated ('default' allowed; no_<name> turns one off)")
    p.add_argument("--oom-step", type=int, default=0, help="plan after N GPU-OOM escalations")
    add_training_flags(p, with_version=False)
    _add_json(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("classify", help="classify the error in a training log")
    p.add_argument("file")
    _add_json(p)
    p.set_defaults(func=cmd_classify)

    p = sub.add_parser("preflight", help="check a container (or 'host') before training")
    p.add_argument("--container", required=True)
    p.add_argument("--mode", choices=["dapo", "one_step_off_policy"])
    p.add_argument("--framework", choices=["fsdp", "megatron"])
    add_training_flags(p)
    _add_json(p)
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("start", help="answer the questions from flags/env and start training")
    p.add_argument("--container", required=True, help="existing container name, or 'host'")
    p.add_argument("--mode", choices=["dapo", "one_step_off_policy"])
    p.add_argument("--framework", choices=["fsdp", "megatron"])
    p.add_argument("--features", help="explicit features (default: USER_FEATURES / ENABLE_OFFLOAD)")
    p.add_argument("--http-proxy")
    p.add_argument("--https-proxy")
    p.add_argument("--no-proxy")
    p.add_argument("--swanlab-mode", choices=["cloud", "local", "disabled"])
    p.add_argument("--skip-preflight", action="store_true")
    p.add_argument("--allow-shared-gpus", action="store_true")
    p.add_argument("--wait", action="store_true", help="block until the run ends (exit 0 only if it succeeded)")
    add_training_flags(p)
    _add_json(p)
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("status", help="progress of a run (default: the current/latest)")
    p.add_argument("run_id", nargs="?")
    p.add_argument("--follow", action="store_true", help="a live progress bar until the run ends")
    p.add_argument("--interval", type=float, default=2.0)
    _add_json(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("errors", help="classified errors per attempt and what the supervisor did")
    p.add_argument("run_id", nargs="?")
    _add_json(p)
    p.set_defaults(func=cmd_errors)

    p = sub.add_parser("stop", help="stop a run")
    p.add_argument("run_id", nargs="?")
    _add_json(p)
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("resume", help="continue a failed or stopped run from its last checkpoint (a new attempt)")
    p.add_argument("run_id", nargs="?")
    _add_json(p)
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("runs", help="list runs")
    p.add_argument("--limit", type=int, default=20)
    _add_json(p)
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("supervise", help=argparse.SUPPRESS)
    p.add_argument("run_id")
    p.set_defaults(func=cmd_supervise)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    from verl_async_dapo.errors import user_facing_error

    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = user_facing_error(exc, face="cli")
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return EXIT_FAIL
