"""Runs as a service: start (preflight, freeze, spawn the supervisor), progress, errors, stop.

Shared by the MCP tools and the CLI. Every read also heals: a run whose supervisor died gets
a new one, which reattaches to the running attempt.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from typing import Any

import anyio
from pydantic import BaseModel

from verl_async_dapo import policy
from verl_async_dapo import swanlab as swanlab_cfg
from verl_async_dapo.answers import ContainerAnswer, FeaturesAnswer, ProxyAnswer, SwanlabAnswer
from verl_async_dapo.categories import CATEGORY_INFO, ErrorCategory
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import ParamError, UserInputError
from verl_async_dapo.flow import Question, check_start_allowed
from verl_async_dapo.formats import from_whole_line, iso_time
from verl_async_dapo.launching import draft_spec, plan_for
from verl_async_dapo.logs.classify import classify_tail
from verl_async_dapo.logs.progress import parse_progress
from verl_async_dapo.preflight import PreflightReport, detect_verl_version, run_preflight
from verl_async_dapo.preflight_memory import MemoryFix
from verl_async_dapo.prelaunch import validate_overrides
from verl_async_dapo.run_lock import LOCK_FD_ENV, lock_path, supervisor_alive, try_lock
from verl_async_dapo.runspec import RunSpec
from verl_async_dapo.sessions import RUN_TO_SESSION_STATE, preconfigured_swanlab
from verl_async_dapo.settings import TrainingSettings, settings_with_values
from verl_async_dapo.store import ACTIVE_RUN_STATUSES, RunRow, StoreBusy, StoreError, new_id
from verl_async_dapo.targets.base import JobHandle, TargetError
from verl_async_dapo.targets.registry import get_target
from verl_async_dapo.verl import PlanError
from verl_async_dapo.watchman.view import stall_state
from verl_async_dapo.wording import Face, Say, Term, Text, either, render, tool

logger = logging.getLogger(__name__)

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
    memory_fix_applied: dict[str, Any] | None = None  # what apply_memory_fix changed before the launch
    memory_estimate: dict[str, Any] | None = None  # preflight's estimate and fit (None without GPUs seen)


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


async def preflight(target_name: str, settings: TrainingSettings, *, allow_no_gpus: bool = False) -> PreflightReport:
    """The checks before a launch, against the target named ``target_name`` (the faces' way to preflight)."""
    return await run_preflight(get_target(target_name), settings, allow_no_gpus=allow_no_gpus)


ALLOW_NO_GPUS_ENV = "VERL_ASYNC_DAPO_ALLOW_NO_GPUS"  # the server-wide form of allow_no_gpus (a CPU-only stand-in)


def no_gpus_allowed(ctx: AppContext, explicit: bool = False) -> bool:
    """0 GPUs is refused unless the user said so: per session (allow_no_gpus / --allow-no-gpus) or server-wide."""
    return explicit or ctx.env.get(ALLOW_NO_GPUS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _lines(report: PreflightReport) -> Term:
    return either("\n".join(report.lines(Face.MCP)), "\n".join(report.lines(Face.CLI)))


async def start_training(
    ctx: AppContext, params: dict[str, Any], *, skip_preflight: bool = False, session_id: str | None = None,
    face: Face = Face.MCP,
    apply_memory_fix: bool = False,
) -> StartResult:
    """Preflight, freeze the session into a run, start its supervisor; returns at once.

    Every problem found before the launch is reported in one refusal: the preflight's errors together with a plan
    that cannot be built (e.g. a tensor-parallel size that does not divide the GPUs), so a user fixes them in one go
    instead of meeting them one per attempt.

    ``apply_memory_fix``: the user agreed to preflight's memory fix (a lower rollout share, memory features);
    it is applied and preflight runs again with it, so what starts is what was checked.
    """
    sid = session_id or ctx.store.current_session()
    if sid is None:
        raise UserInputError(Say("no session yet: {how}", how=Term(mcp="call list_containers, then select_container",
                                                               cli=tool("start_training").cli)))  # fmt: skip
    answers = ctx.store.answers(sid)
    run = ctx.store.run_for_session(sid)
    check_start_allowed({Question(k): v for k, v in answers.items()}, preconfigured_swanlab(ctx) is not None,
                        RUN_TO_SESSION_STATE[run.status] if run else None)  # fmt: skip
    settings = settings_with(ctx, params)
    container = ContainerAnswer.model_validate(answers[Question.CONTAINER.value])
    target = get_target(container.name)
    features = FeaturesAnswer.model_validate(answers[Question.FEATURES.value])
    report: PreflightReport | None = None
    applied: dict[str, Any] | None = None
    if not skip_preflight:
        allow = no_gpus_allowed(ctx, container.allow_no_gpus)
        report = await run_preflight(target, settings, features.choice(), allow_no_gpus=allow)
        fix = report.memory.fix if report.memory else None
        if apply_memory_fix and fix:
            settings, features = apply_fix(settings, features, fix)
            applied = fix.to_dict()
            report = await run_preflight(target, settings, features.choice(), allow_no_gpus=allow)
    version = settings.verl_version or (report.verl_version if report else None)
    if not version and report is None:  # --skip-preflight skips the checks, not the version read
        try:
            version = await detect_verl_version(target, settings)
        except TargetError as exc:
            raise UserInputError(f"could not read the verl version in {container.name}: {exc}") from None
    if not version:
        raise UserInputError("could not detect the verl version in the target; give it (e.g. 0.9.1)", ("verl_version",))
    run_id = new_id("run")
    spec = draft_spec(target=container.name, target_kind=container.kind, settings=settings, verl_version=version,
                      features=features, proxy=ProxyAnswer.model_validate(answers[Question.PROXY.value]),
                      swanlab=_swanlab_answer(ctx, answers), run_id=run_id)  # fmt: skip
    plan = None
    plan_problem: PlanError | None = None
    try:  # the supervisor builds this same plan: refuse an unplannable run here, before it exists
        plan, _ = plan_for(ctx, spec, spec.first_attempt_config(), with_secrets=False)
    except PlanError as exc:
        plan_problem = exc
    if report is not None and not report.ok:  # every problem found before the launch, in one refusal
        plan_line = f"\n[error] plan: {plan_problem}" if plan_problem else ""
        raise UserInputError(Say("preflight failed, nothing was started:\n{lines}{plan}", lines=_lines(report),
                                 plan=plan_line), plan_problem.params if plan_problem else ())  # fmt: skip
    if plan_problem is not None or plan is None:
        raise UserInputError(f"cannot plan this run, nothing was started: {plan_problem}",
                             plan_problem.params if plan_problem else ())  # fmt: skip
    busy = ctx.store.active_runs_on(container.name)
    if busy and not container.allow_shared_gpus:
        raise UserInputError(Say("{name} is busy with run {run}; stop it first ({stop}) or choose another target",
                                 name=container.name, run=busy[0], stop=tool("stop_training")))  # fmt: skip
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
    effective = spec.first_attempt_config().features.effective
    memory = report.memory.to_dict() if report and report.memory else None
    return StartResult(
        run_id=run_id, status=ctx.store.run(run_id).status, target=container.name,  # type: ignore[union-attr]
        mode=settings.mode.value, framework=settings.framework.value, verl_version=version,
        features=[f.value for f in effective], swanlab_url=url, swanlab_note=render(_link_note(ctx, spec, url), face),
        preflight=report.lines() if report else [], monitor_commands=monitor_commands(spec),
        memory_fix_applied=applied, memory_estimate=memory,
    )  # fmt: skip


def apply_fix(settings: TrainingSettings, features: FeaturesAnswer, fix: MemoryFix) -> tuple[TrainingSettings,
                                                                                               FeaturesAnswer]:
    """Preflight's memory fix on the run's settings and features. Added features become explicit choices (the
    user agreed to them); a feature the user turned off is never in a fix (preflight does not propose it)."""
    if fix.gpu_memory_utilization is not None:
        settings = settings.model_copy(update={"gpu_memory_utilization": fix.gpu_memory_utilization})
    if fix.add_features:
        features = FeaturesAnswer(enabled=tuple(sorted({*features.enabled, *fix.add_features})),
                                  disabled=features.disabled)  # fmt: skip
    return settings, features


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


def _link_note(ctx: AppContext, spec: RunSpec, url: str | None) -> Text | None:
    if spec.swanlab is None or spec.swanlab.mode == "disabled":
        return "SwanLab is disabled for this run"
    if url:
        return None
    if spec.swanlab.mode == "local":
        cfg = swanlab_cfg.run_link(
            swanlab_cfg.SwanlabConfig(mode=swanlab_cfg.SwanlabMode.LOCAL, log_dir=spec.swanlab.log_dir,
                                      source="session"), None)  # fmt: skip
        return f"local mode: view it with `{cfg}` inside the target"
    return Say("the SwanLab link appears once verl has started (usually within a minute): {how}",
               how=Term(mcp="call get_progress", cli="`verl-async-dapo status` shows it"))  # fmt: skip


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
HEAL_WAIT_SECONDS = 0.5  # a read-only tool's own writes (the restart event) wait no longer for another's lock
RESTART_WINDOW_SECONDS = 600.0


def heal(ctx: AppContext, run: RunRow) -> bool:
    """``_heal``, best effort: a read-only tool answers even while another process holds the store's lock (the
    supervisor's own retry and the next call heal it then; issue 20). True when it started a new supervisor."""
    try:
        with ctx.store.waiting(HEAL_WAIT_SECONDS):
            return _heal(ctx, run)
    except StoreBusy as exc:
        logger.warning("could not check run %s's supervisor: %s", run.id, exc)
        return False


def _heal(ctx: AppContext, run: RunRow) -> bool:
    """A run marked active whose supervisor is gone gets a new one (which reattaches).

    A supervisor that keeps dying (our bug, or a broken environment) is not restarted forever: after
    MAX_SUPERVISOR_RESTARTS in RESTART_WINDOW_SECONDS the run is marked failed with where to look.
    """
    if run.status not in ACTIVE_RUN_STATUSES:
        if ctx.store.outbox_pending(run.id) and not supervisor_alive(ctx, run.id):
            spawn_supervisor(ctx, run.id)  # it only delivers the ended run's pending notifications, then exits
        return False
    if supervisor_alive(ctx, run.id):
        return False
    since = time.time() - RESTART_WINDOW_SECONDS
    recent = [e for e in ctx.store.events(run.id, limit=10_000) if e.kind == "supervisor_restarted" and e.ts >= since]
    if len(recent) >= MAX_SUPERVISOR_RESTARTS:
        log_file = ctx.run_dir(run.id) / "supervisor.log"
        ctx.store.update_run(run.id, status="failed", ended_at=time.time(),
                             final_reason=f"the supervisor died {len(recent)} times in {RESTART_WINDOW_SECONDS:.0f} s",
                             suggestions=[f"read {log_file}", "the training job may still run: stop it in the target",
                                          "report the supervisor error as a bug"])  # fmt: skip
        ctx.store.add_event("error", "run_failed", "supervisor crash loop; run marked failed", run_id=run.id)
        return False
    if spawn_supervisor(ctx, run.id):
        ctx.store.add_event("warning", "supervisor_restarted", "supervisor was gone; started a new one",
                            run_id=run.id)  # fmt: skip
        return True
    return False


def resolve_run(ctx: AppContext, run_id: str | None) -> RunRow:
    if run_id is not None:
        if not run_id.startswith("run_") or len(run_id) > 64:
            raise UserInputError(Say("{rid!r} is not a run id (run_…); {how}", rid=run_id[:40],
                                     how=Term(mcp="get_progress without run_id shows the latest run's id",
                                              cli="`verl-async-dapo runs` lists them")))  # fmt: skip
        row = ctx.store.run(run_id)
        if row is None:
            raise UserInputError(Say("unknown run {rid!r}; {how}", rid=run_id,
                                     how=Term(mcp="get_progress without run_id shows the latest run's id",
                                              cli="`verl-async-dapo runs` lists them")))  # fmt: skip
        return row
    sid = ctx.store.current_session()
    row = ctx.store.run_for_session(sid) if sid else None
    row = row or ctx.store.latest_run()
    if row is None:
        raise UserInputError(Say("no run yet: {how}", how=Term(mcp="answer the questions, then call start_training",
                                                           cli="start one with " + tool("start_training").cli)))  # fmt: skip
    return row


async def get_progress(ctx: AppContext, run_id: str | None = None) -> dict[str, Any]:
    run = resolve_run(ctx, run_id)
    restarted = heal(ctx, run)
    attempts = ctx.store.attempts(run.id)
    progress = dict(run.progress or {})
    stale = run.progress_at is None or time.time() - run.progress_at > STALE_PROGRESS_SECONDS
    if attempts and progress.get("attempt") not in (None, attempts[-1].n):
        progress, stale = {}, True  # the snapshot is the previous attempt's: right after a relaunch
    if run.status in ACTIVE_RUN_STATUSES and stale and attempts and attempts[-1].job:
        fresh = await _progress_from_tail(JobHandle(**attempts[-1].job))
        progress = merge_tail_progress(progress, fresh) if fresh else progress
    current = attempts[-1] if attempts else None
    total = progress.get("total_steps") or RunSpec.model_validate(run.spec).training_settings().train_steps
    step = progress.get("step")
    percent = round(100.0 * step / total, 1) if step is not None and total else None
    status = run.status
    since = progress.get("phase_since")
    active = status in ACTIVE_RUN_STATUSES
    # Right after a restart the attempt may have ended while no supervisor watched, and the new one has not recorded
    # it yet. Never show that as running (issue 20): the job's own files say whether it still runs.
    watched = restarted and status in ACTIVE_RUN_STATUSES and current is not None and current.status == "running"
    if watched and current is not None and current.job and await _job_ended(JobHandle(**current.job)):
        status = "finishing"
    stall = stall_state(ctx.store.events(run.id, limit=10_000), current.n if current else None,
                        status in ACTIVE_RUN_STATUSES, time.time())  # fmt: skip
    return {
        "run_id": run.id, "status": status, "attempt": current.n if current else 0,
        "stalled": bool(stall and stall["stalled"]), "stalled_for_seconds": stall["stalled_for_seconds"] if stall else None,
        "step": step, "total_steps": total, "percent": percent, "eta_seconds": progress.get("eta_seconds"),
        "eta_basis": progress.get("eta_basis"), "seconds_per_step": progress.get("seconds_per_step"),
        "phase": progress.get("phase"),
        "phase_seconds": round(max(0.0, time.time() - since), 1) if active and since is not None else None,
        "features": current.config.get("effective", []) if current else [],
        "metrics": progress.get("metrics", {}), "metrics_step": progress.get("metrics_step"),
        "resumed_from_step": progress.get("resumed_from_step"), "resume_check": progress.get("resume_check"),
        "swanlab_url": run.swanlab_url,
        "as_of": iso_time(run.progress_at), "final_reason": run.final_reason, "suggestions": run.suggestions,
    }  # fmt: skip


async def log_tail(ctx: AppContext, run_id: str | None, max_bytes: int) -> tuple[RunRow, bytes | None]:
    """At most the last ``max_bytes`` of the run's current attempt log, from a whole line on (None before any
    attempt started)."""
    run = resolve_run(ctx, run_id)
    attempts = ctx.store.attempts(run.id)
    job = attempts[-1].job if attempts else None
    if job is None:
        return run, None
    handle = JobHandle(**job)
    # One byte more than shown: it tells whether the window already starts right after a newline.
    return run, from_whole_line(await get_target(handle.target).read_tail(handle.log_path, max_bytes + 1), max_bytes)


async def _job_ended(handle: JobHandle) -> bool:
    try:
        return not (await get_target(handle.target).job_status(handle)).running
    except TargetError:  # unknown: say what the store says
        return False


def merge_tail_progress(stored: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """A tail re-read (the supervisor's snapshot is stale: a silent phase, e.g. vLLM compiling) knows no arrival
    times: keep the supervisor's phase start while the phase is the same, and its resume check."""
    merged = dict(fresh)
    if stored.get("phase") is not None and stored.get("phase") == fresh.get("phase"):
        merged["phase_since"] = stored.get("phase_since")
    merged["resume_check"] = stored.get("resume_check")
    return merged


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
    lost = {e.data.get("attempt"): e.message for e in ctx.store.events(run.id, limit=10_000)
            if e.kind == "resume_lost" and e.data}  # fmt: skip
    attempts = ctx.store.attempts(run.id)
    for attempt in attempts:
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
            "explanation": info.explanation if info else None,
            "fix": policy.fix_text(ErrorCategory(error["category"]), error.get("kind")) if error else None,
            "supervisor_action": (attempt.decision or {}).get("reason"),
            "changes_next_attempt": (attempt.decision or {}).get("changes", []),
            "resume_check": _resume_words(attempt.n, attempts, lost, run.progress or {}),
        })  # fmt: skip
    attempts = ctx.store.attempts(run.id)
    stall = stall_state(ctx.store.events(run.id, limit=10_000), attempts[-1].n if attempts else None,
                        run.status in ACTIVE_RUN_STATUSES, time.time())  # fmt: skip
    return {"run_id": run.id, "status": run.status, "attempts": items, "final_reason": run.final_reason,
            "suggestions": run.suggestions, "stall": stall}  # fmt: skip


# How much of the current attempt's log check_errors reads for non-fatal findings.
WARNINGS_TAIL_BYTES = 1 << 20


async def check_errors_live(ctx: AppContext, run_id: str | None = None) -> dict[str, Any]:
    """check_errors plus what the current attempt's log shows that does not stop training
    (e.g. the tracker rejecting metric uploads mid-run): those never become an attempt's error."""
    report = check_errors(ctx, run_id)
    report["warnings"] = await _nonfatal_findings(ctx, report["run_id"])
    return report


async def _nonfatal_findings(ctx: AppContext, run_id: str) -> list[dict[str, Any]]:
    attempts = ctx.store.attempts(run_id)
    if not attempts or attempts[-1].job is None:
        return []
    handle = JobHandle(**attempts[-1].job)
    try:
        tail = await get_target(handle.target).read_tail(handle.log_path, WARNINGS_TAIL_BYTES)
    except TargetError:  # the log is unreadable now (container gone): the attempts still answer
        return []
    found = classify_tail(tail.decode("utf-8", errors="replace"))
    return [{"attempt": attempts[-1].n, "category": f.category.value, "kind": f.kind, "count": f.count,
             "message": ctx.scrub(f.message), "explanation": f.explanation, "fix": f.fix}
            for f in found.findings if not f.fatal]  # fmt: skip

def _resume_words(n: int, attempts: list[Any], lost: dict[Any, str], progress: dict[str, Any]) -> str | None:
    """How attempt n resumed: the loss verl's log showed, else what the check before it found, else its progress."""
    if n in lost:
        return lost[n]
    before = (attempts[n - 2].decision or {}).get("checkpoint") if n > 1 else None
    if before and before.get("note"):
        return str(before["note"])
    return progress.get("resume_check") if progress.get("attempt") == n else None


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


def run_to_stop(ctx: AppContext, run_id: str | None) -> RunRow:
    """The run a stop without an id means: the only active one. Several active: refused, naming them."""
    if run_id is not None:
        return resolve_run(ctx, run_id)
    active = [r for r in ctx.store.runs(200) if r.status in ACTIVE_RUN_STATUSES]
    if len(active) > 1:
        raise UserInputError(Say("{n} runs are active ({ids}); name the one to stop: {how}", n=len(active),
                                 ids=", ".join(f"{r.id} on {r.target}" for r in active),
                                 how=Term(mcp="stop_training with run_id", cli="`verl-async-dapo stop RUN_ID`")))  # fmt: skip
    return active[0] if active else resolve_run(ctx, None)


def list_runs(ctx: AppContext, limit: int = 20) -> list[dict[str, Any]]:
    rows = ctx.store.runs(limit)
    for row in rows:
        heal(ctx, row)
    now = time.time()
    # ISO 8601 (UTC) for people and tools alike; the duration runs to now while a run is active.
    return [{"run_id": r.id, "status": r.status, "target": r.target, "started_at": iso_time(r.created_at),
             "ended_at": iso_time(r.ended_at), "duration_seconds": round((r.ended_at or now) - r.created_at, 1),
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
    ctx.store.reopen_run(run.id)
    spawn_supervisor(ctx, run.id)
    next_n = attempts[-1].n + 1 if attempts else 1
    return {"run_id": run.id, "status": "starting", "attempt": next_n,
            "message": f"attempt {next_n} resumes from the last checkpoint of {run.id}; get_progress follows it"}  # fmt: skip
