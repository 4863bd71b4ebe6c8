"""Start a run: preflight, freeze the session into a run, spawn its supervisor."""

from __future__ import annotations

import time
from typing import Any

import anyio
from pydantic import BaseModel

from verl_async_dapo import swanlab as swanlab_cfg
from verl_async_dapo.answers import ContainerAnswer, FeaturesAnswer, ProxyAnswer, SwanlabAnswer
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import PlanError, StoreError, TargetError, UserInputError
from verl_async_dapo.features import parse_user_features
from verl_async_dapo.flow import Question, check_start_allowed
from verl_async_dapo.plans import approvals
from verl_async_dapo.plans.launching import draft_spec, plan_for
from verl_async_dapo.plans.planning import DEFAULT_PLAN_VERSION, features_answer, preview
from verl_async_dapo.plans.preflight import Check, CheckStatus, PreflightReport, detect_verl_version, run_preflight
from verl_async_dapo.plans.preflight_memory import MemoryFix
from verl_async_dapo.plans.prelaunch import validate_overrides
from verl_async_dapo.runs.supervision import spawn_supervisor
from verl_async_dapo.runspec import RunSpec
from verl_async_dapo.sessions import RUN_TO_SESSION_STATE, preconfigured_swanlab
from verl_async_dapo.settings import TrainingSettings, settings_with_values
from verl_async_dapo.status import ACTIVE_RUN_STATUSES
from verl_async_dapo.store import new_id
from verl_async_dapo.targets.registry import get_target
from verl_async_dapo.wording import Face, Say, Term, Text, either, render, tool

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


def approvals_needed(ctx: AppContext, params: dict[str, Any]) -> list[str]:
    """What start_training with ``params`` would need the user to approve (the lines for the form)."""
    return approvals.pending(settings_with_values(params), params)


def approval_texts(ctx: AppContext, params: dict[str, Any]) -> tuple[str, ...]:
    """The items of ``approvals_needed`` as start_training's ``approved`` takes them."""
    return approvals.texts(settings_with_values(params), params)


def check_approvals(ctx: AppContext, params: dict[str, Any], approved: tuple[str, ...]) -> None:
    """start_training's approval gate on its own (the CLI asks before it opens a session)."""
    approvals.check(settings_with_values(params), params, approved)


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


async def preflight(target_name: str, settings: TrainingSettings, *, allow_no_gpus: bool = False,
                    ctx: AppContext | None = None) -> PreflightReport:  # fmt: skip
    """The checks before a launch, against the target named ``target_name`` (the faces' way to preflight); with
    ``ctx``, the SwanLab configuration of its environment / config file is checked too (one report, issue 28)."""
    report = await run_preflight(get_target(target_name), settings, allow_no_gpus=allow_no_gpus)
    first = report.checks[0] if report.checks else None
    if first is not None and first.name == "target" and first.status is CheckStatus.ERROR:
        report.checks[0] = await _missing_target(target_name) or first
    if ctx is not None:
        line = await swanlab_check(ctx)
        if line is not None:
            report.checks.append(line)
    return report


async def _missing_target(name: str) -> Check | None:
    """A target that does not exist, said with the ones that do and how to make it (issue 28: `preflight --container
    jins` answered only "not found"). None when the target exists (it failed for another reason)."""
    from verl_async_dapo.targets.registry import list_targets

    if name == "host" or name.startswith("ray:"):
        return None
    targets = await list_targets()
    names = [t.name for t in targets]
    if name in names:
        return None
    docker_note = next((t.note for t in targets if t.name == "host" and t.note), None)  # Docker unreachable
    create = Term(mcp=f'select_container with create={{"name": "{name}", "image": IMAGE, "gpus": "all"}}',
                  cli=f"docker run -d --name {name} --gpus all --ipc=host --network host -v HOST_VERL:/verl IMAGE "
                      "sleep infinity (IMAGE e.g. verlai/verl:vllm011.latest)")  # fmt: skip
    pick = Term(mcp="select_container with one of them", cli="--container with one of them")
    unreachable = f" (Docker did not answer: {docker_note})" if docker_note else ""
    return Check("target", CheckStatus.ERROR,
                 f"no container named {name!r}{unreachable}; existing targets: {', '.join(names)}",
                 Say("{pick}, or create it: {create}", pick=pick, create=create))  # fmt: skip


_SWANLAB_FIX = Term(mcp="fix SWANLAB_API_KEY / SWANLAB_HOST in the server's environment (or the SwanLab config file), "
                        "or set SWANLAB_MODE=local / disabled there",
                    cli="fix SWANLAB_API_KEY / SWANLAB_HOST, or set SWANLAB_MODE=local / disabled")  # fmt: skip


async def swanlab_check(ctx: AppContext) -> Check | None:
    """The preconfigured SwanLab (environment > config file) as a preflight line: the key is tried against its host
    the way the SDK logs in. The script path never did this: a wrong key failed the run 35 s in as `tracking`.
    None when nothing is preconfigured (the session's question 4 asks, and checks, then)."""
    try:
        cfg = preconfigured_swanlab(ctx)
    except UserInputError as exc:  # e.g. a placeholder key: the message never holds the key
        return Check("swanlab", CheckStatus.ERROR, ctx.scrub(str(exc)), _SWANLAB_FIX)
    if cfg is None:
        return None
    if cfg.mode is not swanlab_cfg.SwanlabMode.CLOUD:
        return Check("swanlab", CheckStatus.OK, f"SwanLab {cfg.mode.value} mode ({cfg.source})")
    result = await swanlab_cfg.check_key(cfg)
    where = cfg.host or "SwanLab cloud"
    if result.ok:
        return Check("swanlab", CheckStatus.OK, f"key accepted by {where} ({cfg.source})")
    status = CheckStatus.ERROR if result.status in ("wrong_key", "unreachable") else CheckStatus.WARNING
    return Check("swanlab", status, ctx.scrub(result.message), _SWANLAB_FIX)


ALLOW_NO_GPUS_ENV = "VERL_ASYNC_DAPO_ALLOW_NO_GPUS"  # the server-wide form of allow_no_gpus (a CPU-only stand-in)


def no_gpus_allowed(ctx: AppContext, explicit: bool = False) -> bool:
    """0 GPUs is refused unless the user said so: per session (allow_no_gpus / --allow-no-gpus) or server-wide."""
    return explicit or ctx.env.get(ALLOW_NO_GPUS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


async def refuse_unplannable(target_name: str, settings: TrainingSettings, features: str | None, *,
                             skip_preflight: bool, allow_no_gpus: bool) -> None:  # fmt: skip
    """Refuse, before the CLI's quick start creates a session, what only the launch plan checks (e.g. ROLLOUT_TP
    not dividing ROLLOUT_GPUS): otherwise the detached supervisor fails on it after start returned. The one plan
    builder, against VERL_VERSION or the default profile (start re-plans with the version preflight detects); the
    target's own problems (preflight's non-ok lines) go into the same refusal."""
    choice = parse_user_features(features) if features else settings.feature_choice()
    try:
        preview(settings=settings, sources={}, features=features_answer(choice), proxy_values={}, swanlab=None,
                target=("check", "host"), verl_version=settings.verl_version or DEFAULT_PLAN_VERSION)  # fmt: skip
    except PlanError as problem:
        found = []
        if not skip_preflight:
            report = await preflight(target_name, settings, allow_no_gpus=allow_no_gpus)
            found = [line for line in report.lines(Face.CLI) if not line.startswith("[ok]")]
        raise UserInputError("\n".join([f"invalid training parameters: {problem}; nothing was started", *found]),
                             problem.params) from None


def _lines(report: PreflightReport) -> Term:
    return either("\n".join(report.lines(Face.MCP)), "\n".join(report.lines(Face.CLI)))


async def start_training(
    ctx: AppContext, params: dict[str, Any], *, skip_preflight: bool = False, session_id: str | None = None,
    face: Face = Face.MCP,
    apply_memory_fix: bool = False,
    approved: tuple[str, ...] = (),
) -> StartResult:
    """Preflight, freeze the session into a run, start its supervisor; returns at once.

    Every problem found before the launch is reported in one refusal: the preflight's errors together with a plan
    that cannot be built (e.g. a tensor-parallel size that does not divide the GPUs), so a user fixes them in one go
    instead of meeting them one per attempt.

    ``apply_memory_fix``: the user agreed to preflight's memory fix (a lower rollout share, memory features);
    it is applied and preflight runs again with it, so what starts is what was checked.

    ``approved``: the items the user approved (plans/approvals.py: overrides and parameters that load code or write
    outside the run's tree, as shown to them); anything else of that kind refuses the start.
    """
    settings = settings_with_values(params)
    approvals.check(settings, params, approved)  # before anything else: nothing of such a run is looked at
    sid = session_id or ctx.store.current_session()
    if sid is None:
        raise UserInputError(Say("no session yet: {how}", how=Term(mcp="call list_containers, then select_container",
                                                               cli=tool("start_training").cli)))  # fmt: skip
    answers = ctx.store.answers(sid)
    run = ctx.store.run_for_session(sid)
    check_start_allowed({Question(k): v for k, v in answers.items()}, preconfigured_swanlab(ctx) is not None,
                        RUN_TO_SESSION_STATE[run.status] if run else None)  # fmt: skip
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
    if report is not None and Question.SWANLAB.value not in answers:  # preconfigured: checked here, in the report
        line = await swanlab_check(ctx)
        if line is not None:
            report.checks.append(line)
    version = settings.verl_version or (report.verl_version if report else None)
    if report is not None and not report.ok and not version:  # the report first: it says why there is no version
        raise UserInputError(Say("preflight failed, nothing was started:\n{lines}", lines=_lines(report)))
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
    compose_error = None
    composable = report is not None and (report.ok or any(c.name == "hydra" and c.status is CheckStatus.OK
                                                          for c in report.checks))  # fmt: skip
    if plan is not None and settings.extra_overrides and composable:
        # The user's own keys are the likeliest to be stale or misspelt: verl's compose says so now, in the report.
        checked = await validate_overrides(target, plan.entry.cwd, plan.entry.config_dir, plan.entry.config_name,
                                           plan.overrides)  # fmt: skip
        compose_error = None if checked.ok else checked.error
    if report is not None and not report.ok:  # every problem found before the launch, in one refusal
        plan_line = f"\n[error] plan: {plan_problem}" if plan_problem else ""
        plan_line += f"\n[error] hydra compose: verl rejected the overrides: {compose_error}" if compose_error else ""
        raise UserInputError(Say("preflight failed, nothing was started:\n{lines}{plan}", lines=_lines(report),
                                 plan=plan_line), plan_problem.params if plan_problem else ())  # fmt: skip
    if plan_problem is not None or plan is None:
        raise UserInputError(f"cannot plan this run, nothing was started: {plan_problem}",
                             plan_problem.params if plan_problem else ())  # fmt: skip
    busy = ctx.store.active_runs_on(container.name)
    if busy and not container.allow_shared_gpus:
        raise UserInputError(Say("{name} is busy with run {run}; stop it first ({stop}) or choose another target",
                                 name=container.name, run=busy[0], stop=tool("stop_training")))  # fmt: skip
    if compose_error is not None:
        raise UserInputError(f"verl rejected the overrides, nothing was started:\n{compose_error}",
                             ("extra_overrides",))  # fmt: skip
    try:
        ctx.store.create_run(sid, container.name, spec, run_id=run_id)
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
        preflight=[ctx.scrub(line) for line in report.lines()] if report else [], monitor_commands=monitor_commands(spec),
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
