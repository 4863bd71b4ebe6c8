"""The human CLI: ``verl-async-dapo <command>``. Thin: parses arguments, calls the services, prints.

Heavy imports (docker, mcp, swanlab) happen inside the commands that need them, so ``--help``
and ``plan`` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from verl_async_dapo.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    CliUsageError,
    _ctx,
    _gc_paused,
    _print_json,
    invoked_as,
)
from verl_async_dapo.cli.notify_cmds import _read_sink_secrets, cmd_notify
from verl_async_dapo.cli.plan_cmds import cmd_classify, cmd_plan, cmd_preflight
from verl_async_dapo.cli.train_cmds import PROXY_HELP, _proxy_flag, cmd_resume, cmd_start, cmd_stop, cmd_supervise
from verl_async_dapo.cli.watch_cmds import cmd_containers, cmd_errors, cmd_runs, cmd_status

__all__ = [  # the names callers use as this module's attributes (moved, not renamed)
    "EXIT_FAIL",
    "EXIT_OK",
    "EXIT_USAGE",
    "PROXY_HELP",
    "CliUsageError",
    "_ctx",
    "_gc_paused",
    "_print_json",
    "_proxy_flag",
    "_read_sink_secrets",
    "cmd_classify",
    "cmd_containers",
    "cmd_errors",
    "cmd_notify",
    "cmd_plan",
    "cmd_preflight",
    "cmd_resume",
    "cmd_runs",
    "cmd_start",
    "cmd_status",
    "cmd_stop",
    "cmd_supervise",
]


def serve_banner(command: str) -> str:
    return (f"verl-async-dapo: MCP server on stdio, waiting for an MCP client on stdin (an agent starts this command "
            f"itself: claude mcp add verl-async-dapo -- {command} serve). Ctrl-C quits; the CLI's other commands "
            "(--help) are for people.")  # fmt: skip


def cmd_serve(args: argparse.Namespace) -> int:
    if args.transport == "stdio" and sys.stdin.isatty():  # a person ran it in a terminal: say what it waits for
        print(serve_banner(invoked_as()), file=sys.stderr, flush=True)
    with _gc_paused():
        from verl_async_dapo.server import serve

    serve(transport=args.transport, host=args.host, port=args.port)
    return EXIT_OK


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _add_no_gpus(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-no-gpus", action="store_true",
                   help="accept a target with no visible GPU (training needs GPUs; for CPU-only tests). "
                        "Server-wide: VERL_ASYNC_DAPO_ALLOW_NO_GPUS=1")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    from verl_async_dapo.cli.params import add_training_flags

    parser = argparse.ArgumentParser(prog="verl-async-dapo", description="Launch and supervise verl DAPO training.")
    # metavar: the usage line lists no choices, so the internal `supervise` (added without help) stays unlisted.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    p.add_argument("--model-config", metavar="FILE", help="the model's config.json for the memory estimate "
                   "(default: MODEL_PATH/config.json when readable here)")  # fmt: skip
    p.add_argument("--gpu-memory-gib", type=float, help="GPU memory per GPU (CUDA's total, e.g. 139.8 for an H200) "
                   "for the per-GPU peak including the rollout share")  # fmt: skip
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
    _add_no_gpus(p)
    add_training_flags(p)
    _add_json(p)
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("start", help="answer the questions from flags/env and start training")
    p.add_argument("--container", required=True, help="existing container name, or 'host'")
    p.add_argument("--mode", choices=["dapo", "one_step_off_policy"])
    p.add_argument("--framework", choices=["fsdp", "megatron"])
    p.add_argument("--features", help="explicit features (default: USER_FEATURES / ENABLE_OFFLOAD)")
    p.add_argument("--http-proxy", help=PROXY_HELP)
    p.add_argument("--https-proxy", help=PROXY_HELP)
    p.add_argument("--no-proxy")
    p.add_argument("--swanlab-mode", choices=["cloud", "local", "disabled"])
    p.add_argument("--skip-preflight", action="store_true")
    p.add_argument("--apply-memory-fix", action="store_true",
                   help="apply preflight's GPU-memory fix (lower rollout share, memory features), then start")
    p.add_argument("--allow-shared-gpus", action="store_true")
    p.add_argument("--approve", action="store_true",
                   help="approve the overrides/parameters that load code (reward function, custom classes, "
                        "external libs, trust_remote_code) or write outside VERL_HOME; a terminal asks instead")
    _add_no_gpus(p)
    p.add_argument("--wait", action="store_true", help="block until the run ends (exit 0 only if it succeeded)")
    add_training_flags(p)
    _add_json(p)
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("status", help="progress of a run (default: the current/latest)")
    p.add_argument("run_id", nargs="?")
    p.add_argument("--follow", action="store_true", help="a live progress bar until the run ends")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--plot", metavar="FILE", help="also write a PNG of the run's curves (one line per attempt)")
    _add_json(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("errors", help="classified errors per attempt and what the supervisor did")
    p.add_argument("run_id", nargs="?")
    _add_json(p)
    p.set_defaults(func=cmd_errors)

    p = sub.add_parser("stop", help="stop a run (asks first in a terminal; several active runs need the run id)")
    p.add_argument("run_id", nargs="?", help="default: the only active run")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    _add_json(p)
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("resume", help="continue a failed or stopped run from its last checkpoint (a new attempt)")
    p.add_argument("run_id", nargs="?")
    p.add_argument("--force", action="store_true", help="resume a run that failed for a reason its frozen answers "
                   "hold (SwanLab key, a missing file, a config error) once the cause is fixed outside them")  # fmt: skip
    _add_json(p)
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("runs", help="list runs: status, target, start time, duration, attempts")
    p.add_argument("--limit", type=int, default=20)
    _add_json(p)
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("containers", help="the targets training can run on: host, containers, Ray clusters")
    p.add_argument("--names", action="store_true", help="names only, one per line")
    _add_json(p)
    p.set_defaults(func=cmd_containers)

    p = sub.add_parser("notify", help="notifications: show (sends nothing), add, remove or --test a sink (webhook, "
                       "slack, feishu, …)")
    p.add_argument(
        "--add",
        choices=["webhook", "slack", "feishu", "dingtalk", "wecom", "desktop"],
        help="add (or replace) a sink: its URL/secret are read without echo (or from stdin), tested, saved",
    )
    p.add_argument("--remove", choices=["webhook", "slack", "feishu", "dingtalk", "wecom", "desktop"])
    p.add_argument("--sink", choices=["webhook", "slack", "feishu", "dingtalk", "wecom", "desktop"],
                   help="the saved sink that --events / --every-n-steps / --test apply to (its URL is kept)")
    p.add_argument("--events", help="errors (default), plus succeeded and/or progress, or all; with --add or "
                   "--sink: that sink's own filter, else the default")
    p.add_argument("--every-n-steps", type=int, help="a progress notification every N steps (opt-in)")
    p.add_argument("--test", action="store_true", help="send a test message (to the added sink, or to --sink, "
                   "else to every configured sink); without it nothing is sent")
    _add_json(p)
    p.set_defaults(func=cmd_notify)

    p = sub.add_parser("supervise")  # internal: started detached by start; no help = not listed
    p.add_argument("run_id")
    p.set_defaults(func=cmd_supervise)
    return parser


# The commands that read the run parameters from the environment (the scripts call start and preflight).
ENV_READING_COMMANDS = frozenset({"start", "preflight", "plan", "resume", "serve"})


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    from verl_async_dapo.cli.common import scrub
    from verl_async_dapo.errors import scrubbed_user_error
    from verl_async_dapo.wording import Face

    if args.command in ENV_READING_COMMANDS:  # a misspelt variable is named, not silently ignored (issue 28)
        import os

        from verl_async_dapo.env_names import unknown_variables

        for warning in unknown_variables(os.environ):
            print(f"warning: {warning}", file=sys.stderr)
    try:
        code = func(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `status | head`: the reader has what it wanted. No traceback, no "Exception ignored" at exit.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as coreutils report it
    except CliUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        message = scrubbed_user_error(exc, scrub, Face.CLI)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return EXIT_FAIL
