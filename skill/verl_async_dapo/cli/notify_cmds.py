"""The CLI's notify command: show (nothing is sent), add (secrets read without echo), remove, and --test."""

from __future__ import annotations

import argparse
import sys

from verl_async_dapo.cli.common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, _ctx, _print_json


def cmd_notify(args: argparse.Namespace) -> int:
    """Secrets never come from argv: a sink's URL (and secret) are read from the terminal without echo, or
    from stdin (first line the URL, second the signing secret) when it is not a terminal."""
    import anyio

    from verl_async_dapo.notify.service import configure

    url = secret = None
    if args.add and args.sink:
        print("--add and --sink name the sink twice: use --add KIND for a new URL, --sink KIND for a saved sink",
              file=sys.stderr)
        return EXIT_USAGE
    if args.add and args.add != "desktop":
        url, secret = _read_sink_secrets(args.add)
    kind = args.add or args.sink
    report = anyio.run(lambda: configure(_ctx(), kind=kind, url=url, secret=secret, events=args.events,
                                         every_n_steps=args.every_n_steps, remove=args.remove, test=args.test))  # fmt: skip
    if args.json:
        _print_json(report.model_dump())
        return EXIT_OK
    print(report.note)
    for sink in report.sinks:
        verdict = "" if not sink.tested else f": {'accepted' if sink.accepted else 'REFUSED'} — {sink.answer}"
        print(f"  {sink.setting} [{', '.join(sink.events)}]{verdict}")
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
