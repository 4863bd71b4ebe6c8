"""The CLI's commands that start and stop training: start, stop, resume, supervise (internal)."""

from __future__ import annotations

import argparse
import sys

from verl_async_dapo.cli.common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, CliUsageError, _ctx, _print_json

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
        from verl_async_dapo.cli.common import invoked_as

        command = invoked_as()  # off PATH right after the install: the commands as they can be typed
        shown = [command + c.removeprefix("verl-async-dapo") if c.startswith("verl-async-dapo ") else c
                 for c in result.monitor_commands]  # fmt: skip
        print("monitor:\n  " + "\n  ".join(shown), flush=True)
    if args.wait:  # the summary first (run id, link), then follow until the run ends
        from verl_async_dapo.cli.status_view import follow_status

        return anyio.run(follow_status, ctx, result.run_id, 2.0)
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


def cmd_resume(args: argparse.Namespace) -> int:
    from verl_async_dapo.runs import resume_run

    result = resume_run(_ctx(), args.run_id, force=args.force)
    _print_json(result) if args.json else print(f"{result['run_id']}: {result['message']}")
    return EXIT_OK


def cmd_supervise(args: argparse.Namespace) -> int:
    from verl_async_dapo.supervisor.supervise import main

    return main(args.run_id)
