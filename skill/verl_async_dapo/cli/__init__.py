"""The human CLI: ``verl-async-dapo <command>``. Thin: parses arguments, calls the services, prints.

Heavy imports (docker, mcp, swanlab) happen inside the commands that need them, so ``--help``
and ``plan`` stay fast.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from verl_async_dapo.exceptions import UserInputError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _ctx() -> Any:
    from verl_async_dapo.context import AppContext

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
    if args.transport == "stdio" and sys.stdin.isatty():  # a person ran it in a terminal: say what it waits for
        print("verl-async-dapo: MCP server on stdio, waiting for an MCP client on stdin (an agent starts this "
              "command itself: claude mcp add verl-async-dapo -- verl-async-dapo serve). Ctrl-C quits; the CLI's "
              "other commands (--help) are for people.", file=sys.stderr, flush=True)  # fmt: skip
    with _gc_paused():
        from verl_async_dapo.server import serve

    serve(transport=args.transport, host=args.host, port=args.port)
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from verl_async_dapo.cli.params import training_params
    from verl_async_dapo.planning import plan_from_cli
    from verl_async_dapo.settings import param_hint
    from verl_async_dapo.verl import PlanError

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

    from verl_async_dapo.cli.params import training_params
    from verl_async_dapo.runs import no_gpus_allowed, preflight, settings_with
    from verl_async_dapo.wording import Face

    ctx = _ctx()
    settings = settings_with(ctx, training_params(args))
    allow = no_gpus_allowed(ctx, args.allow_no_gpus)
    report = anyio.run(functools.partial(preflight, args.container, settings, allow_no_gpus=allow))
    if args.json:
        _print_json(report.to_dict(Face.CLI))
    else:
        print("\n".join(report.lines(Face.CLI)))
    return EXIT_OK if report.ok else EXIT_FAIL


PROXY_HELP = (
    "proxy URL for the training process. No password here: the command line is visible to every user in ps. "
    "Put a password in HTTP_PROXY / HTTPS_PROXY in the environment instead, or give http://USER@host:port and "
    "type the password at the prompt"
)


def _proxy_flag(value: str | None, flag: str) -> str | None:
    """A proxy URL from the command line: refused with a password in it (ps shows it to every user, issue 20);
    with a user and no password, the password is asked for at the terminal (not echoed)."""
    if not value:
        return value
    from urllib.parse import quote, urlsplit, urlunsplit

    parts = urlsplit(value)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return value
    if ":" in userinfo:
        raise CliUsageError(f"{flag}: a password on the command line is visible to every user of this machine (ps); "
                            f"set it in the environment (HTTP_PROXY / HTTPS_PROXY) or give {flag} "
                            f"{parts.scheme}://USER@{hostport} and type the password at the prompt. "
                            "Consider changing that password")  # fmt: skip
    if not sys.stdin.isatty():
        return value  # http://TOKEN@proxy: a token as the user name (masked everywhere we show it)
    import getpass

    password = getpass.getpass(f"password for proxy user {userinfo} at {hostport} (empty: none): ")
    if not password:
        return value
    netloc = f"{userinfo}:{quote(password, safe='')}@{hostport}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class CliUsageError(UserInputError):
    """A command line we refuse before doing anything; the message says what to do instead."""


def cmd_start(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.cli.quickstart import start_from_cli

    args.http_proxy = _proxy_flag(args.http_proxy, "--http-proxy")
    args.https_proxy = _proxy_flag(args.https_proxy, "--https-proxy")
    ctx = _ctx()
    result = anyio.run(start_from_cli, ctx, args)
    if args.json:
        _print_json(result.model_dump())
    else:
        print(f"run id:   {result.run_id}\nstatus:   {result.status}\ntarget:   {result.target} "
              f"({result.mode}, {result.framework}, verl {result.verl_version})\n"
              f"features: {', '.join(result.features)}\nSwanLab:  {result.swanlab_url or result.swanlab_note}")  # fmt: skip
        if result.memory_fix_applied:
            print(f"memory fix applied: {result.memory_fix_applied}")
        print("monitor:\n  " + "\n  ".join(result.monitor_commands), flush=True)
    if args.wait:  # the summary first (run id, link), then follow until the run ends
        from verl_async_dapo.cli.status_view import follow_status

        return anyio.run(follow_status, ctx, result.run_id, 2.0)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.cli.status_view import follow_status, render_status
    from verl_async_dapo.runs import get_progress

    ctx = _ctx()
    if args.follow:
        return anyio.run(follow_status, ctx, args.run_id, args.interval)
    progress = anyio.run(get_progress, ctx, args.run_id)
    if args.plot:
        from verl_async_dapo.run_charts import progress_chart

        png, note = anyio.run(progress_chart, ctx, progress["run_id"])
        if png is None:
            print(f"error: no chart: {note}", file=sys.stderr)
            return EXIT_FAIL
        with open(args.plot, "wb") as fh:
            fh.write(png)
        print(f"chart: {args.plot} ({note})", file=sys.stderr)
    if args.json:
        _print_json(progress)
    else:
        print(render_status(progress))
    return EXIT_OK if progress["status"] != "failed" else EXIT_FAIL


def cmd_errors(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.cli.status_view import render_errors
    from verl_async_dapo.runs import check_errors_live

    report = anyio.run(check_errors_live, _ctx(), args.run_id)
    if args.json:
        _print_json(report)
    else:
        print(render_errors(report))
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.runs import run_to_stop, stop_training

    ctx = _ctx()
    run = run_to_stop(ctx, args.run_id)  # several active runs and no id: refused, listing them
    if not run.status.is_terminal() and not args.yes:
        if not sys.stdin.isatty():
            if args.run_id is None:  # a script must say which run it means, or that it means the only one
                print(f"error: stopping needs confirmation: name the run (verl-async-dapo stop {run.id}) or pass "
                      "--yes", file=sys.stderr)  # fmt: skip
                return EXIT_USAGE
        elif input(f"Stop training run {run.id} on {run.target} ({run.status})? Checkpoints already saved are kept. "
                   "[y/N] ").strip().lower() not in ("y", "yes"):  # fmt: skip
            print(f"not stopped: {run.id} keeps training", file=sys.stderr)
            return EXIT_FAIL
    result = anyio.run(stop_training, ctx, run.id)
    _print_json(result) if args.json else print(f"{result['run_id']}: {result['status']}")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    from verl_async_dapo.cli.status_view import render_runs
    from verl_async_dapo.runs import list_runs

    rows = list_runs(_ctx(), args.limit)
    if args.json:
        _print_json(rows)
    else:
        print(render_runs(rows))
    return EXIT_OK


def cmd_containers(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.cli.status_view import render_targets
    from verl_async_dapo.sessions import list_targets

    targets = anyio.run(list_targets)
    rows = [{"name": t.name, "kind": t.kind.value, "state": t.state, "image": t.image, "gpus": t.gpus,
             "note": t.note} for t in targets]  # fmt: skip
    if args.json:
        _print_json(rows)
    elif args.names:
        print("\n".join(r["name"] for r in rows))
    else:
        print(render_targets(rows))
    return EXIT_OK


def cmd_notify(args: argparse.Namespace) -> int:
    """Secrets never come from argv: a sink's URL (and secret) are read from the terminal without echo, or
    from stdin (first line the URL, second the signing secret) when it is not a terminal."""
    import anyio

    from verl_async_dapo.notify.service import configure

    url = secret = None
    if args.add and args.add != "desktop":
        url, secret = _read_sink_secrets(args.add)
    report = anyio.run(lambda: configure(_ctx(), kind=args.add, url=url, secret=secret, events=args.events,
                                         every_n_steps=args.every_n_steps, remove=args.remove, test=not args.no_test))  # fmt: skip
    if args.json:
        _print_json(report.model_dump())
        return EXIT_OK
    print(report.note)
    for sink in report.sinks:
        verdict = "" if not sink.tested else f": {'accepted' if sink.accepted else 'REFUSED'} — {sink.answer}"
        print(f"  {sink.setting}{verdict}")
    print(
        f"events: {', '.join(report.events)}"
        + (f" (every {report.every_n_steps} steps)" if report.every_n_steps else "")
    )
    return EXIT_OK if all(s.accepted is not False for s in report.sinks) else EXIT_FAIL


def _read_sink_secrets(kind: str) -> tuple[str | None, str | None]:
    import getpass

    from verl_async_dapo.notify.formats import SIGNED_KINDS

    signed = kind in {k.value for k in SIGNED_KINDS}
    if sys.stdin.isatty():
        url = getpass.getpass(f"{kind} webhook URL (not echoed): ").strip()
        secret = getpass.getpass("signing secret (empty = none): ").strip() if signed else ""
    else:
        lines = sys.stdin.read().splitlines()
        url = lines[0].strip() if lines else ""
        secret = lines[1].strip() if len(lines) > 1 and signed else ""
    return url or None, secret or None


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

    p = sub.add_parser("notify", help="notifications: show, test, add or remove a sink (webhook, slack, feishu, …)")
    p.add_argument(
        "--add",
        choices=["webhook", "slack", "feishu", "dingtalk", "wecom", "desktop"],
        help="add (or replace) a sink: its URL/secret are read without echo (or from stdin), tested, saved",
    )
    p.add_argument("--remove", choices=["webhook", "slack", "feishu", "dingtalk", "wecom", "desktop"])
    p.add_argument("--events", help="errors (default), plus succeeded and/or progress, or all")
    p.add_argument("--every-n-steps", type=int, help="a progress notification every N steps (opt-in)")
    p.add_argument("--no-test", action="store_true", help="do not send test messages to the configured sinks")
    _add_json(p)
    p.set_defaults(func=cmd_notify)

    p = sub.add_parser("supervise")  # internal: started detached by start; no help = not listed
    p.add_argument("run_id")
    p.set_defaults(func=cmd_supervise)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    from verl_async_dapo.errors import user_facing_error
    from verl_async_dapo.wording import Face

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
        message = user_facing_error(exc, Face.CLI)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return EXIT_FAIL
