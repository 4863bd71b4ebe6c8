"""Runs of one state dir supervised in this process against an ``InProcessTarget`` (tests/harness/inprocess.py):
the four answers through the session services, the run through the run service (``skip_preflight``: the stand-in
tree has no GPU to check), then the product's ``Supervisor`` with that target, to the run's end. The services'
requests for a supervisor process (start, resume, heal) are recorded instead (``no_spawn``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from harness.inprocess import InProcessTarget
from verl_async_dapo.context import AppContext


def write_control(tree: Path, control: Mapping[str, Any]) -> None:
    """The stand-in's failure injection (tests/standin/entry/standin_control.py) for the trainers of ``tree``."""
    (tree / "standin_control.json").write_text(json.dumps(dict(control)), encoding="utf-8")


@dataclass
class InProcessRuns:
    """Runs of one state dir, supervised in this process against an ``InProcessTarget`` of ``tree``.

    The services never spawn a supervisor process here: ``no_spawn`` (the fixture installs it) records the runs
    they would have spawned one for, and the test supervises them with ``supervise``.
    """

    ctx: AppContext
    tree: Path
    target: InProcessTarget
    spawned: list[str] = field(default_factory=list)

    def no_spawn(self, monkeypatch: Any) -> None:
        """Every face's way to start a supervisor process (start, resume, heal) records the run instead."""
        from verl_async_dapo.runs import control, start, supervision

        def record(ctx: AppContext, run_id: str) -> bool:
            self.spawned.append(run_id)
            return True

        for module in (start, control, supervision):
            monkeypatch.setattr(module, "spawn_supervisor", record)

    async def start(self, features: Sequence[str] = ("default",), **params: Any) -> str:
        """The four answers (host, no proxy, ``features``, SwanLab disabled), then ``start_training`` as the
        faces call it with ``skip_preflight`` (the tree has no GPU to check); returns the run id. The run
        parameters not given here come from the environment (VERL_HOME…), as a user configures them."""
        from verl_async_dapo import sessions
        from verl_async_dapo.runs import start as run_start

        if self.ctx.store.current_session() is None or self._session_ended():
            await sessions.select_container(self.ctx, name="host")
            sessions.set_proxy(self.ctx)
            sessions.choose_features(self.ctx, list(features))
            await sessions.configure_swanlab(self.ctx, mode="disabled")
        result = await run_start.start_training(self.ctx, dict(params), skip_preflight=True)
        assert self.spawned[-1:] == [result.run_id], self.spawned
        return result.run_id

    def _session_ended(self) -> bool:
        sid = self.ctx.store.current_session()
        return sid is not None and self.ctx.store.run_for_session(sid) is not None

    def errors(self, run_id: str) -> list[dict[str, Any]]:
        """check_errors' attempts, as the faces show them."""
        from verl_async_dapo import runs

        return [dict(a) for a in runs.check_errors(self.ctx, run_id).model_dump()["attempts"]]

    async def progress(self, run_id: str) -> dict[str, Any]:
        """get_progress, as the faces show it (``status --json``)."""
        from verl_async_dapo import runs

        return dict((await runs.get_progress(self.ctx, run_id)).model_dump())

    def explain(self, run_id: str) -> str:
        """The run and its attempts as stored, and each attempt's log tail: what a failing assertion shows."""
        run = self.ctx.store.run(run_id)
        lines = [f"run {run_id}: {run.status if run else None} ({run.final_reason if run else ''})"]
        for a in self.ctx.store.attempts(run_id):
            lines.append(f"attempt {a.n}: {a.status} exit={a.exit_code} error={a.attempt_error} "
                         f"decision={a.supervisor_decision}")  # fmt: skip
            if a.job:
                with contextlib.suppress(OSError):
                    lines.append("  log: ..." + Path(a.job["log_path"]).read_text(errors="replace")[-1500:])
        return "\n".join(lines)

    async def supervise(self, run_id: str, *, timeout: float = 60.0) -> str:
        """The product's Supervisor for ``run_id`` with this target, to the run's end; returns its final status."""
        from verl_async_dapo.supervisor import Supervisor

        with anyio.fail_after(timeout):
            return str(await Supervisor(self.ctx, run_id, target=self.target).run())
