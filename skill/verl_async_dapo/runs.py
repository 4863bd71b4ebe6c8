"""Runs as a service: start (preflight, freeze, spawn the supervisor), progress, errors, stop.

Shared by the MCP tools and the CLI. Every read also heals: a run whose supervisor died gets
a new one, which reattaches to the running attempt.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import anyio
from pydantic import BaseModel

from verl_async_dapo import swanlab as swanlab_cfg
from verl_async_dapo.answers import ContainerAnswer, FeaturesAnswer, ProxyAnswer, SwanlabAnswer
from verl_async_dapo.app import AppContext
from verl_async_dapo.categories import CATEGORY_INFO, ErrorCategory
from verl_async_dapo.flow import Question, check_start_allowed
from verl_async_dapo.launching import draft_spec, plan_for, plan_with
from verl_async_dapo.logs.progress import parse_progress
from verl_async_dapo.preflight import PreflightReport, run_preflight
from verl_async_dapo.prelaunch import validate_overrides
from verl_async_dapo.run_lock import LOCK_FD_ENV, lock_path, supervisor_alive, try_lock
from verl_async_dapo.runspec import RunSpec
from verl_async_dapo.sessions import RUN_TO_SESSION_STATE, UserInputError, preconfigured_swanlab
from verl_async_dapo.settings import ParamError, TrainingSettings, settings_with_values
from verl_async_dapo.store import ACTIVE_RUN_STATUSES, RunRow, StoreError, new_id
from verl_async_dapo.targets.base import JobHandle, TargetError
from verl_async_dapo.targets.registry import get_target
from verl_async_dapo.verl import PlanError

STALE_PROGRESS_SECONDS = 30.0
LINK_WAIT_SECONDS = 3.0


class StartResult(BaseModel):
    run_id: str
    status: str
    target: str
    mode: str
    framework: str
    verl_version: str
    features: list[str]
    swanlab_url: str | None
    swanlab_note: str | None
    preflight: list[str]
    monitor_commands: list[str]


def settings_with(ctx: AppContext | None, overrides: dict[str, Any]) -> TrainingSettings:
    """Environment parameters with the caller's explicit values on top, validated together."""
    try:
        return settings_with_values(overrides)
    except ParamError as exc:
        raise UserInputError(str(exc), exc.params) from None


def _swanlab_answer(ctx: AppContext, answers: dict[str, Any]) -> SwanlabAnswer | None:
    """The session's SwanLab answer, or the preconfigured one frozen into the run (key → secret store)."""
    if Question.SWANLAB.value in answers:
        return SwanlabAnswer.model_validate(answers[Question.SWANLAB.value])
    configured = preconfigured_swanlab(ctx)
    if configured is None:
        return None
    key_ref = ctx.secrets.put(configured.api_key.get_secret_value(), label="swanlab") if configured.api_key else None
    return SwanlabAnswer(mode=configured.mode.value, host=configured.host, key_ref=key_ref,
                         log_dir=configured.log_dir, source=configured.source)  # fmt: skip


async def start_training(
    ctx: AppContext, params: dict[str, Any], *, skip_preflight: bool = False, session_id: str | None = None
) -> StartResult:
    """Preflight, freeze the session into a run, start its supervisor; returns at once."""
    sid = session_id or ctx.store.current_session()
    if sid is None:
        raise UserInputError("no session yet: call list_containers, then select_container")
    answers = ctx.store.answers(sid)
    run = ctx.store.run_for_session(sid)
    check_start_allowed({Question(k): v for k, v in answers.items()}, preconfigured_swanlab(ctx) is not None,
                        RUN_TO_SESSION_STATE[run.status] if run else None)  # fmt: skip
    settings = settings_with(ctx, params)
    container = ContainerAnswer.model_validate(answers[Question.CONTAINER.value])
    target = get_target(container.name)
    if settings.verl_version:  # the plan's own checks need no target: refuse before preflight's round trips
        _check_plannable(ctx, settings, answers)
    report: PreflightReport | None = None
    if not skip_preflight:
        report = await run_preflight(target, settings)
        if not report.ok:
            raise UserInputError("preflight failed, nothing was started:\n" + "\n".join(report.lines()))
    version = settings.verl_version or (report.verl_version if report else None)
    if not version:
        raise UserInputError("could not detect the verl version in the target; give it (e.g. 0.9.1)", ("verl_version",))
    swanlab = _swanlab_answer(ctx, answers)
    busy = ctx.store.active_runs_on(container.name)
    if busy and not container.allow_shared_gpus:
        raise UserInputError(f"{container.name} is busy with run {busy[0]}; stop it first or choose another target")
    run_id = new_id("run")
    spec = draft_spec(target=container.name, target_kind=container.kind, settings=settings, verl_version=version,
                      features=FeaturesAnswer.model_validate(answers[Question.FEATURES.value]),
                      proxy=ProxyAnswer.model_validate(answers[Question.PROXY.value]), swanlab=swanlab,
                      run_id=run_id)  # fmt: skip
    try:  # the supervisor builds this same plan: refuse an unplannable run here, before it exists
        plan, _ = plan_for(ctx, spec, spec.first_attempt_config(), with_secrets=False)
    except PlanError as exc:
        raise UserInputError(f"cannot plan this run, nothing was started: {exc}", exc.params) from None
    if settings.extra_overrides and not skip_preflight:
        # The user's own keys are the likeliest to be stale or misspelt: verl's compose says so now, not later.
        checked = await validate_overrides(target, plan.entry.cwd, plan.entry.config_dir, plan.entry.config_name,
                                           plan.overrides)  # fmt: skip
        if not checked.ok:
            raise UserInputError(f"verl rejected the overrides, nothing was started:\n{checked.error}",
                                 ("extra_overrides",))  # fmt: skip
    try:
        ctx.store.create_run(sid, container.name, spec.model_dump(mode="json"), run_id=run_id)
    except StoreError as exc:
        raise UserInputError(str(exc)) from exc
    spawn_supervisor(ctx, run_id)
    # Only SwanLab cloud prints a run link; waiting for one in local/disabled mode would just delay the answer.
    url = await _wait_for_link(ctx, run_id) if spec.swanlab is not None and spec.swanlab.mode == "cloud" else None
    features = spec.first_attempt_config().features.effective
    return StartResult(
        run_id=run_id, status=ctx.store.run(run_id).status, target=container.name,  # type: ignore[union-attr]
        mode=settings.mode.value, framework=settings.framework.value, verl_version=version,
        features=[f.value for f in features], swanlab_url=url, swanlab_note=_link_note(ctx, spec, url),
        preflight=report.lines() if report else [], monitor_commands=monitor_commands(spec),
    )  # fmt: skip


def _check_plannable(ctx: AppContext, settings: TrainingSettings, answers: dict[str, Any]) -> None:
    spec = draft_spec(target="check", target_kind="host", settings=settings, verl_version=settings.verl_version or "",
                      features=FeaturesAnswer.model_validate(answers[Question.FEATURES.value]), proxy=ProxyAnswer(),
                      swanlab=None, run_id="run_check")  # fmt: skip
    try:
        plan_with(spec, spec.first_attempt_config(), None, {})
    except PlanError as exc:
        raise UserInputError(f"cannot plan this run, nothing was started: {exc}", exc.params) from None


def monitor_commands(spec: RunSpec) -> list[str]:
    """The original skill's commands (still valid: train.log points at the current attempt) + ours."""
    log = spec.stable_log_path()
    # docker: exec into the container; host and Ray (on the head node): the file is local.
    prefix = f"docker exec {spec.target} " if spec.target_kind == "docker" else ""
    return [
        "verl-async-dapo status --follow",
        "verl-async-dapo errors",
        f'{prefix}grep "Training Progress" {log} | tail -1',
        f"{prefix}tail -F {log}",
        f'{prefix}grep -E "Error|error|OOM|Exception" {log} | tail -10',
    ]


async def _wait_for_link(ctx: AppContext, run_id: str) -> str | None:
    deadline = time.monotonic() + LINK_WAIT_SECONDS
    while time.monotonic() < deadline:
        row = ctx.store.run(run_id)
        if row is None or row.swanlab_url or row.status not in ACTIVE_RUN_STATUSES:
            return row.swanlab_url if row else None
        await anyio.sleep(0.2)
    return None


def _link_note(ctx: AppContext, spec: RunSpec, url: str | None) -> str | None:
    if spec.swanlab is None or spec.swanlab.mode == "disabled":
        return "SwanLab is disabled for this run"
    if url:
        return None
    if spec.swanlab.mode == "local":
        cfg = swanlab_cfg.run_link(
            swanlab_cfg.SwanlabConfig(mode=swanlab_cfg.SwanlabMode.LOCAL, log_dir=spec.swanlab.log_dir,
                                      source="session"), None)  # fmt: skip
        return f"local mode: view it with `{cfg}` inside the target"
    return "the SwanLab link appears once verl has started (usually within a minute): call get_progress"


def spawn_supervisor(ctx: AppContext, run_id: str) -> bool:
    """Start a detached supervisor that outlives this process (its own session, no stdio).

    The run's lock is taken here and handed to the child as an inherited descriptor (a flock belongs to
    the open file, so the child holds it from its first instruction). Otherwise the run would look
    unsupervised until the child's Python had started, and a status call in that gap would spawn a
    second supervisor. Returns False, spawning nothing, when a live supervisor already holds the lock.
    """
    lock = try_lock(lock_path(ctx, run_id))
    if lock is None:
        return False
    with lock, (ctx.run_dir(run_id) / "supervisor.out").open("ab") as log_file:
        env = dict(ctx.env)  # the whole environment: RAY_AUTH_TOKEN(_PATH) reach the supervisor's Ray client too
        if env.get("RAY_AUTH_TOKEN_PATH"):  # the child runs in ctx.home: a relative path must still name the file
            env["RAY_AUTH_TOKEN_PATH"] = os.path.abspath(os.path.expanduser(env["RAY_AUTH_TOKEN_PATH"]))
        env["VERL_ASYNC_DAPO_HOME"] = str(ctx.home)
        env["VERL_ASYNC_DAPO_CONFIG_DIR"] = str(ctx.config_home)
        env[LOCK_FD_ENV] = str(lock.fileno())
        subprocess.Popen(
            [sys.executable, "-m", "verl_async_dapo", "supervise", run_id],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True, close_fds=True,
            pass_fds=(lock.fileno(),), env=env, cwd=str(ctx.home),
        )  # fmt: skip
    return True


MAX_SUPERVISOR_RESTARTS = 5
RESTART_WINDOW_SECONDS = 600.0


def heal(ctx: AppContext, run: RunRow) -> None:
    """A run marked active whose supervisor is gone gets a new one (which reattaches).

    A supervisor that keeps dying (our bug, or a broken environment) is not restarted forever: after
    MAX_SUPERVISOR_RESTARTS in RESTART_WINDOW_SECONDS the run is marked failed with where to look.
    """
    if run.status not in ACTIVE_RUN_STATUSES or supervisor_alive(ctx, run.id):
        return
    since = time.time() - RESTART_WINDOW_SECONDS
    recent = [e for e in ctx.store.events(run.id, limit=10_000) if e.kind == "supervisor_restarted" and e.ts >= since]
    if len(recent) >= MAX_SUPERVISOR_RESTARTS:
        log_file = ctx.run_dir(run.id) / "supervisor.log"
        ctx.store.update_run(run.id, status="failed", ended_at=time.time(),
                             final_reason=f"the supervisor died {len(recent)} times in {RESTART_WINDOW_SECONDS:.0f} s",
                             suggestions=[f"read {log_file}", "the training job may still run: stop it in the target",
                                          "report the supervisor error as a bug"])  # fmt: skip
        ctx.store.add_event("error", "run_failed", "supervisor crash loop; run marked failed", run_id=run.id)
        return
    if spawn_supervisor(ctx, run.id):
        ctx.store.add_event("warning", "supervisor_restarted", "supervisor was gone; started a new one",
                            run_id=run.id)  # fmt: skip


def resolve_run(ctx: AppContext, run_id: str | None) -> RunRow:
    if run_id is not None:
        if not run_id.startswith("run_") or len(run_id) > 64:
            raise UserInputError(f"{run_id[:40]!r} is not a run id; call get_session or `verl-async-dapo runs`")
        row = ctx.store.run(run_id)
        if row is None:
            raise UserInputError(f"unknown run {run_id!r}; list runs with `verl-async-dapo runs`")
        return row
    sid = ctx.store.current_session()
    row = ctx.store.run_for_session(sid) if sid else None
    row = row or ctx.store.latest_run()
    if row is None:
        raise UserInputError("no run yet: answer the questions, then call start_training")
    return row


async def get_progress(ctx: AppContext, run_id: str | None = None) -> dict[str, Any]:
    run = resolve_run(ctx, run_id)
    heal(ctx, run)
    attempts = ctx.store.attempts(run.id)
    progress = dict(run.progress or {})
    stale = run.progress_at is None or time.time() - run.progress_at > STALE_PROGRESS_SECONDS
    if attempts and progress.get("attempt") not in (None, attempts[-1].n):
        progress, stale = {}, True  # the snapshot is the previous attempt's: right after a relaunch
    if run.status in ACTIVE_RUN_STATUSES and stale and attempts and attempts[-1].job:
        progress = await _progress_from_tail(JobHandle(**attempts[-1].job)) or progress
    current = attempts[-1] if attempts else None
    total = progress.get("total_steps") or RunSpec.model_validate(run.spec).training_settings().train_steps
    step = progress.get("step")
    percent = round(100.0 * step / total, 1) if step is not None and total else None
    status = run.status
    return {
        "run_id": run.id, "status": status, "attempt": current.n if current else 0,
        "step": step, "total_steps": total, "percent": percent, "eta_seconds": progress.get("eta_seconds"),
        "features": current.config.get("effective", []) if current else [],
        "metrics": progress.get("metrics", {}), "metrics_step": progress.get("metrics_step"),
        "resumed_from_step": progress.get("resumed_from_step"), "swanlab_url": run.swanlab_url,
        "as_of": run.progress_at, "final_reason": run.final_reason, "suggestions": run.suggestions,
    }  # fmt: skip


async def log_tail(ctx: AppContext, run_id: str | None, max_bytes: int) -> tuple[RunRow, bytes | None]:
    """The last ``max_bytes`` of the run's current attempt log (None before any attempt started)."""
    run = resolve_run(ctx, run_id)
    attempts = ctx.store.attempts(run.id)
    job = attempts[-1].job if attempts else None
    if job is None:
        return run, None
    handle = JobHandle(**job)
    return run, await get_target(handle.target).read_tail(handle.log_path, max_bytes)


async def _progress_from_tail(handle: JobHandle) -> dict[str, Any] | None:
    try:
        tail = await get_target(handle.target).read_tail(handle.log_path, 1 << 20)
    except TargetError:
        return None
    return parse_progress(tail.decode("utf-8", errors="replace")).to_dict()


def check_errors(ctx: AppContext, run_id: str | None = None) -> dict[str, Any]:
    run = resolve_run(ctx, run_id)
    heal(ctx, run)
    items = []
    for attempt in ctx.store.attempts(run.id):
        error = attempt.error
        info = CATEGORY_INFO[ErrorCategory(error["category"])] if error else None
        items.append({
            "attempt": attempt.n, "status": attempt.status, "exit_code": attempt.exit_code,
            "features": attempt.config.get("effective", []), "override_diff": attempt.override_diff,
            "overrides": attempt.overrides, "override_sources": attempt.config.get("override_sources", {}),
            "plan_notes": attempt.config.get("plan_notes", []),
            "reason_started": attempt.reason,
            "category": error["category"] if error else None, "kind": error.get("kind") if error else None,
            "excerpt": error.get("excerpt") if error else None,
            "explanation": info.explanation if info else None, "fix": info.fix if info else None,
            "supervisor_action": (attempt.decision or {}).get("reason"),
            "changes_next_attempt": (attempt.decision or {}).get("changes", []),
        })  # fmt: skip
    return {"run_id": run.id, "status": run.status, "attempts": items, "final_reason": run.final_reason,
            "suggestions": run.suggestions}  # fmt: skip


async def stop_training(ctx: AppContext, run_id: str | None = None, *, wait_seconds: float = 15.0) -> dict[str, Any]:
    run = resolve_run(ctx, run_id)
    if run.status not in ACTIVE_RUN_STATUSES:
        return {"run_id": run.id, "status": run.status, "message": f"run already {run.status}"}
    ctx.store.update_run(run.id, stop_requested=True)
    if not supervisor_alive(ctx, run.id):
        attempts = ctx.store.attempts(run.id)
        reason = "stopped on request"
        if attempts and attempts[-1].job:
            try:
                await get_target(run.target).stop_job(JobHandle(**attempts[-1].job))
            except TargetError as exc:  # e.g. its container was removed: the run must still be able to end
                reason = f"stopped on request; could not reach the job: {ctx.scrub(str(exc))}"
        if attempts and attempts[-1].status in ("launching", "running"):
            ctx.store.update_attempt(run.id, attempts[-1].n, status="stopped", ended_at=time.time())
        ctx.store.update_run(run.id, status="stopped", final_reason=reason, ended_at=time.time())
        ctx.store.add_event("info", "run_stopped", reason, run_id=run.id)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        row = ctx.store.run(run.id)
        if row is not None and row.status not in ACTIVE_RUN_STATUSES:
            return {"run_id": run.id, "status": row.status, "message": "stopped"}
        await anyio.sleep(0.3)
    return {"run_id": run.id, "status": "stopping", "message": "stop requested; the supervisor is ending the job"}


def list_runs(ctx: AppContext, limit: int = 20) -> list[dict[str, Any]]:
    rows = ctx.store.runs(limit)
    for row in rows:
        heal(ctx, row)
    return [{"run_id": r.id, "status": r.status, "target": r.target, "created_at": r.created_at,
             "attempts": len(ctx.store.attempts(r.id)), "swanlab_url": r.swanlab_url} for r in rows]  # fmt: skip


RESUMABLE_STATUSES = ("failed", "stopped")


def resume_run(ctx: AppContext, run_id: str | None = None) -> dict[str, Any]:
    """Continue a failed or stopped run as a new attempt of the same run: the same frozen answers and
    parameters, resuming from its last checkpoint (its checkpoint directory and ``resume_mode=auto`` do not
    change). The supervisor launches the attempt; this returns at once."""
    run = resolve_run(ctx, run_id)
    if run.status in ACTIVE_RUN_STATUSES:
        raise UserInputError(f"run {run.id} is {run.status}: it is still going, there is nothing to resume")
    if run.status not in RESUMABLE_STATUSES:
        raise UserInputError(f"run {run.id} {run.status}: only a failed or stopped run can be resumed; "
                             "start a new run for more training")  # fmt: skip
    busy = [other for other in ctx.store.active_runs_on(run.target) if other != run.id]
    if busy:
        raise UserInputError(f"{run.target} is busy with run {busy[0]}; stop it first, then resume {run.id}")
    attempts = ctx.store.attempts(run.id)
    # The event first: a supervisor that finds the run active but no event would judge the old attempt again.
    ctx.store.add_event("info", "run_resumed", f"resume requested after the run {run.status}", run_id=run.id,
                        data={"after_attempt": attempts[-1].n if attempts else 0})  # fmt: skip
    ctx.store.update_run(run.id, status="starting", stop_requested=False, final_reason=None, suggestions=None,
                         ended_at=None)  # fmt: skip
    spawn_supervisor(ctx, run.id)
    next_n = attempts[-1].n + 1 if attempts else 1
    return {"run_id": run.id, "status": "starting", "attempt": next_n,
            "message": f"attempt {next_n} resumes from the last checkpoint of {run.id}; get_progress follows it"}  # fmt: skip
