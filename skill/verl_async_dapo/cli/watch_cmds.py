"""The CLI's commands that watch: status, errors, runs, containers."""

from __future__ import annotations

import argparse
import sys

from verl_async_dapo.cli.common import EXIT_FAIL, EXIT_OK, _ctx, _print_json
from verl_async_dapo.status import RunStatus


def cmd_status(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.cli.status_view import follow_status, render_status
    from verl_async_dapo.runs import get_progress

    ctx = _ctx()
    if args.follow:
        return anyio.run(follow_status, ctx, args.run_id, args.interval)
    progress = anyio.run(get_progress, ctx, args.run_id).model_dump()
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
    return EXIT_OK if progress["status"] != RunStatus.FAILED else EXIT_FAIL


def cmd_errors(args: argparse.Namespace) -> int:
    import anyio

    from verl_async_dapo.cli.status_view import render_errors
    from verl_async_dapo.runs import check_errors_live

    report = anyio.run(check_errors_live, _ctx(), args.run_id).model_dump()
    if args.json:
        _print_json(report)
    else:
        print(render_errors(report))
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
