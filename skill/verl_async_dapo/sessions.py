"""The question flow as a service: the four answers, validated, ordered and persisted.

The MCP tools and the CLI call these functions and only translate their results and errors.
Every function validates everything before it writes anything, so bad input changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel

from verl_async_dapo import swanlab as swanlab_cfg
from verl_async_dapo.answers import (
    ContainerAnswer,
    FeaturesAnswer,
    ProxyAnswer,
    SwanlabAnswer,
    has_credentials,
    mask_url,
    normalise_no_proxy,
    normalise_proxy_value,
)
from verl_async_dapo.container_review import (
    MountsNeedConfirmation,
    confirmation_refusal,
    creation_review,
)
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import FeatureError, FlowError, SwanlabConfigError, TargetError, UserInputError
from verl_async_dapo.features import FeatureSet
from verl_async_dapo.flow import (
    PROMPTS,
    Question,
    SessionState,
    check_answer_allowed,
    next_question,
    next_step_text,
    session_state,
    swanlab_asked,
    swanlab_key_wanted,
)
from verl_async_dapo.status import RunStatus
from verl_async_dapo.targets.base import ContainerInfo, CreateSpec
from verl_async_dapo.targets.registry import create_container, find_target_info
from verl_async_dapo.targets.registry import list_targets as list_all_targets
from verl_async_dapo.wording import Say, Term, flag, tool


class SessionView(BaseModel):
    session_id: str | None
    state: str
    next_question: str | None
    next_step: str
    prompt_zh: str | None = None
    prompt_en: str | None = None
    answers: dict[str, Any]
    swanlab_preconfigured: bool
    swanlab_source: str | None = None
    run_id: str | None = None
    latest_run_id: str | None = None  # the newest run of any session, e.g. one that just finished
    features: list[str] | None = None  # the effective features of the first attempt, once question 3 is answered
    # The run's current attempt: its effective overrides and where each value came from (recipe / feature /
    # oom_ladder / user), so an agent resuming a conversation sees what is really running.
    run_attempt: int | None = None
    run_overrides: list[str] = []
    run_override_sources: dict[str, str] = {}


RUN_TO_SESSION_STATE = {
    RunStatus.STARTING: SessionState.RUNNING,
    RunStatus.RUNNING: SessionState.RUNNING,
    RunStatus.RETRYING: SessionState.RUNNING,
    RunStatus.SUCCEEDED: SessionState.SUCCEEDED,
    RunStatus.FAILED: SessionState.FAILED,
    RunStatus.STOPPED: SessionState.STOPPED,
}


def preconfigured_swanlab(ctx: AppContext) -> swanlab_cfg.SwanlabConfig | None:
    """SwanLab from the environment or the config file (env wins); None = the user must be asked."""
    try:
        return swanlab_cfg.resolve_configured(ctx.env, ctx.swanlab_config_file)
    except SwanlabConfigError as exc:
        raise UserInputError(str(exc)) from exc


def _answered(ctx: AppContext, session_id: str) -> dict[Question, Any]:
    return {Question(k): v for k, v in ctx.store.answers(session_id).items()}


def _run_state(ctx: AppContext, session_id: str) -> tuple[SessionState | None, str | None]:
    run = ctx.store.run_for_session(session_id)
    if run is None:
        return None, None
    return RUN_TO_SESSION_STATE[run.status], run.id


def view(ctx: AppContext, session_id: str | None = None) -> SessionView:
    """The session's answers so far and what to do next (the current session by default)."""
    configured = preconfigured_swanlab(ctx)
    sid = session_id or ctx.store.current_session()
    if sid is None:
        return SessionView(
            session_id=None, state=SessionState.ASK_CONTAINER.value, next_question=Question.CONTAINER.value,
            next_step=PROMPTS[Question.CONTAINER].hint, prompt_zh=PROMPTS[Question.CONTAINER].prompt_zh,
            prompt_en=PROMPTS[Question.CONTAINER].prompt_en, answers={},
            swanlab_preconfigured=configured is not None, swanlab_source=configured.source if configured else None,
            latest_run_id=_latest_run_id(ctx),
        )  # fmt: skip
    if not ctx.store.session_exists(sid):
        raise UserInputError(Say("unknown session {sid!r}; {how}", sid=sid[:40],
                                 how=Term(mcp="call get_session without an id for the current one",
                                          cli="`verl-async-dapo runs` lists the runs")))  # fmt: skip
    answered = _answered(ctx, sid)
    run_state, run_id = _run_state(ctx, sid)
    pending = None if run_state else next_question(answered, configured is not None)
    return SessionView(
        session_id=sid,
        state=session_state(answered, configured is not None, run_state).value,
        next_question=pending.value if pending else None,
        next_step=next_step_text(answered, configured is not None, run_state),
        prompt_zh=PROMPTS[pending].prompt_zh if pending else None,
        prompt_en=PROMPTS[pending].prompt_en if pending else None,
        answers={q.value: v for q, v in answered.items()},
        swanlab_preconfigured=configured is not None,
        swanlab_source=configured.source if configured else None,
        run_id=run_id,
        latest_run_id=_latest_run_id(ctx),
        features=_effective_features(answered.get(Question.FEATURES)),
        **_current_attempt(ctx, run_id),
    )


def _effective_features(answer: Any) -> list[str] | None:
    """What the user's choice comes to (their explicit ones + the default performance features they kept), so the
    agent can echo it instead of guessing how "default" or "no_flash_attn" resolve."""
    if answer is None:
        return None
    return [f.value for f in FeatureSet(explicit=FeaturesAnswer.model_validate(answer).choice()).effective]



def _current_attempt(ctx: AppContext, run_id: str | None) -> dict[str, Any]:
    attempts = ctx.store.attempts(run_id) if run_id else []
    if not attempts:
        return {}
    last = attempts[-1]
    return {"run_attempt": last.n, "run_overrides": list(last.overrides),
            "run_override_sources": dict(last.config.override_sources)}  # fmt: skip


def _latest_run_id(ctx: AppContext) -> str | None:
    latest = ctx.store.latest_run()
    return latest.id if latest else None


def swanlab_setting(ctx: AppContext, current: SessionView) -> tuple[str | None, str]:
    """(where it comes from, one line without the key): this session's answer wins over the environment and the
    config file, as it does at start."""
    answer = current.answers.get(Question.SWANLAB.value)
    if answer is not None:
        a = SwanlabAnswer.model_validate(answer)
        where = f" at {a.host or swanlab_cfg.PUBLIC_WEB_HOST}" if a.mode == "cloud" else ""
        key = "; key set" if a.key_ref else ""
        log_dir = f"; log dir {a.log_dir}" if a.log_dir else ""
        return "session", f"{a.mode}{where}{key}{log_dir} (from this session's answer)"
    configured = preconfigured_swanlab(ctx)
    if configured is not None:
        return configured.source, configured.describe()
    return None, ("not configured: pass host (a form asks for the key; api_key where the client has no forms), "
                  "or mode local / disabled")  # fmt: skip


def swanlab_question_open(ctx: AppContext) -> bool:
    """Whether configure_swanlab may be answered now (the three earlier questions are answered)."""
    current = view(ctx)
    return current.session_id is not None and current.next_question not in ("container", "proxy", "features")


def swanlab_question_asked(ctx: AppContext) -> bool:
    """Whether the SwanLab question is asked at all (flow.swanlab_asked: not when the environment or the config
    file configures it)."""
    return swanlab_asked(preconfigured_swanlab(ctx) is not None)


def swanlab_key_form_wanted(ctx: AppContext, mode: str | None, host: str | None, api_key: str | None) -> bool:
    """Whether configure_swanlab should ask the user for the key now: a cloud setting without a key
    (flow.swanlab_key_wanted) while the question may be answered."""
    return swanlab_key_wanted(mode, host, api_key) and swanlab_question_open(ctx)


def new_session(ctx: AppContext) -> str:
    """A new session for the question flow (the CLI's quick start answers it in one go)."""
    return ctx.store.create_session()


def abandon_session(ctx: AppContext, session_id: str) -> None:
    """Give up a session that started nothing, so it never becomes the "current" one an agent picks up."""
    ctx.store.abandon_session(session_id)


def _session_for(ctx: AppContext, question: Question, session_id: str | None = None) -> str:
    """The given (or current) session, checked that ``question`` may be answered now."""
    sid = session_id or ctx.store.current_session()
    if sid is not None and not ctx.store.session_exists(sid):
        raise UserInputError(f"unknown session {sid[:40]!r}")
    if sid is None:
        if question is Question.CONTAINER:
            return ctx.store.create_session()
        raise FlowError(PROMPTS[Question.CONTAINER].hint)
    run_state, _ = _run_state(ctx, sid)
    check_answer_allowed(question, _answered(ctx, sid), preconfigured_swanlab(ctx) is not None, run_state)
    return sid


async def list_targets() -> list[ContainerInfo]:
    """Question 1's choices: the host, the Docker containers and the configured Ray clusters (never raises for a
    missing Docker Engine: the host entry's note then says why)."""
    return await list_all_targets()


async def select_container(
    ctx: AppContext,
    name: str | None = None,
    create: CreateSpec | None = None,
    *,
    allow_shared_gpus: bool = False,
    user_confirmed: bool = False,
    allow_no_gpus: bool = False,
    session_id: str | None = None,
) -> SessionView:
    """Question 1: an existing container, the host, or a new container (``create``).

    A new container's mounts and privileges are reviewed first (``creation_review``): a mount that would hand out
    the host is refused; mounts outside the allow-list and privileges the user did not pre-approve need
    ``user_confirmed`` (the user said yes in a form; the model's word is not enough). Docker gets the mounts'
    resolved paths, as checked."""
    if (name is None) == (create is None):
        raise UserInputError("give either name (an existing container or 'host') or create (a new container)")
    granted: tuple[str, ...] = ()
    if create is not None:
        review = creation_review(ctx, create)
        if review.needs_yes and not user_confirmed:
            raise MountsNeedConfirmation(confirmation_refusal(review))
        create = dataclasses.replace(create, mounts=review.resolved_mounts)
        granted = tuple(p.value for p in review.privileges)
    sid = session_id or ctx.store.current_session()
    if sid is not None:
        run_state, _ = _run_state(ctx, sid)
        if run_state is SessionState.RUNNING and session_id is None:
            # The current session's answers are frozen into its running run: this answer opens a new session
            # (for another training), subject to the busy check below like any other.
            sid = None
        else:
            check_answer_allowed(Question.CONTAINER, _answered(ctx, sid), preconfigured_swanlab(ctx) is not None,
                                 run_state)  # fmt: skip
    if create is not None and create.gpus == "none" and not allow_no_gpus:  # refused before anything is created
        raise UserInputError(Say(
            "a container created with gpus='none' cannot train: verl needs GPUs. Create it with gpus 'all' (or device "
            "ids such as '0,1'), or pass {allow} only if the user explicitly wants a container without GPUs",
            allow=flag("allow_no_gpus", of="select_container")))  # fmt: skip
    try:
        if create is not None:
            info = await create_container(create)
            created = True
        else:
            assert name is not None
            info = await find_target_info(name)
            created = False
    except TargetError as exc:
        raise UserInputError(str(exc)) from exc
    busy = [r for r in ctx.store.active_runs_on(info.name)]
    if busy and not allow_shared_gpus:
        raise UserInputError(Say(
            "{name} is busy: run {run} is training there and holds its GPUs. Stop it with {stop}, choose another "
            "container, or pass {allow} if the user explicitly wants both",
            name=info.name, run=busy[0], stop=tool("stop_training"), allow=flag("allow_shared_gpus", of="select_container")))  # fmt: skip
    answer = ContainerAnswer(name=info.name, kind=info.kind.value, created=created, allow_shared_gpus=allow_shared_gpus,
                             allow_no_gpus=allow_no_gpus, privileges=granted)  # fmt: skip
    sid = sid or ctx.store.create_session()
    ctx.store.set_answer(sid, Question.CONTAINER.value, answer.model_dump())
    return view(ctx, sid)


def set_proxy(
    ctx: AppContext,
    http_proxy: str | None = None,
    https_proxy: str | None = None,
    no_proxy: str | None = None,
    *,
    session_id: str | None = None,
) -> SessionView:
    """Question 2: proxy URLs; all empty (or "无"/"none") = no proxy."""
    try:
        values = {
            "http_proxy": normalise_proxy_value(http_proxy, field="http_proxy"),
            "https_proxy": normalise_proxy_value(https_proxy, field="https_proxy"),
            "no_proxy": normalise_no_proxy(no_proxy),
        }
    except ValueError as exc:
        raise UserInputError(str(exc)) from exc
    sid = _session_for(ctx, Question.PROXY, session_id)
    secret_ref = None
    if any(has_credentials(v) for v in values.values()):
        secret_ref = ctx.secrets.put(_json({k: v for k, v in values.items() if v}), label="proxy")
    answer = ProxyAnswer(
        http_proxy=mask_url(values["http_proxy"]), https_proxy=mask_url(values["https_proxy"]),
        no_proxy=values["no_proxy"], secret_ref=secret_ref,
    )  # fmt: skip
    ctx.store.set_answer(sid, Question.PROXY.value, answer.model_dump())
    return view(ctx, sid)


def choose_features(ctx: AppContext, names: list[str], *, session_id: str | None = None) -> SessionView:
    """Question 3: explicit features; [] or ["default"] = the default performance features."""
    try:
        answer = FeaturesAnswer.from_names(names)
    except FeatureError as exc:
        raise UserInputError(str(exc)) from exc
    sid = _session_for(ctx, Question.FEATURES, session_id)
    ctx.store.set_answer(sid, Question.FEATURES.value, answer.model_dump())
    return view(ctx, sid)


async def configure_swanlab(
    ctx: AppContext,
    *,
    mode: str = "cloud",
    host: str | None = None,
    api_key: str | None = None,
    log_dir: str | None = None,
    save: bool = False,
    session_id: str | None = None,
) -> tuple[SessionView, swanlab_cfg.KeyCheck]:
    """Question 4: SwanLab host + key (checked against the host before it is accepted)."""
    sid = _session_for(ctx, Question.SWANLAB, session_id)  # order first: "choose a container first" wins
    try:
        cfg = swanlab_cfg.session_config(mode=mode, host=host, api_key=api_key, log_dir=log_dir)
    except (ValueError, SwanlabConfigError) as exc:
        raise UserInputError(ctx.scrub(str(exc))) from exc
    check = await swanlab_cfg.check_key(cfg)
    if check.status in ("wrong_key", "unreachable", "error"):
        raise UserInputError(f"SwanLab key check: {check.message}")
    key_ref = None
    if cfg.api_key is not None:
        key_ref = ctx.secrets.put(cfg.api_key.get_secret_value(), label="swanlab")
    if save:
        swanlab_cfg.save_config_file(cfg, ctx.swanlab_config_file)
    answer = SwanlabAnswer(
        mode=cfg.mode.value, host=cfg.host, key_ref=key_ref, log_dir=cfg.log_dir, source="session",
        key_check=check.status,
    )  # fmt: skip
    ctx.store.set_answer(sid, Question.SWANLAB.value, answer.model_dump())
    return view(ctx, sid), check


def _json(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True)
