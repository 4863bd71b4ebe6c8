"""The question flow of one session: which question comes next and which calls are legal.

Pure. The order is fixed by the original skill: 1) container, 2) proxy, 3) features,
4) SwanLab (skipped when already configured by the environment or the config file). Then the
session is ready; starting training freezes the answers into a run; the run ends succeeded,
failed or stopped. An earlier answer may be revised any time before the start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from verl_async_dapo.exceptions import FlowError
from verl_async_dapo.wording import Say, Term, tool


class Question(str, Enum):
    CONTAINER = "container"
    PROXY = "proxy"
    FEATURES = "features"
    SWANLAB = "swanlab"


QUESTION_ORDER: tuple[Question, ...] = (Question.CONTAINER, Question.PROXY, Question.FEATURES, Question.SWANLAB)


class SessionState(str, Enum):
    ASK_CONTAINER = "ask_container"
    ASK_PROXY = "ask_proxy"
    ASK_FEATURES = "ask_features"
    ASK_SWANLAB = "ask_swanlab"
    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


FINISHED_STATES = frozenset({SessionState.SUCCEEDED, SessionState.FAILED, SessionState.STOPPED})
_ASK_STATE = {
    Question.CONTAINER: SessionState.ASK_CONTAINER,
    Question.PROXY: SessionState.ASK_PROXY,
    Question.FEATURES: SessionState.ASK_FEATURES,
    Question.SWANLAB: SessionState.ASK_SWANLAB,
}


@dataclass(frozen=True)
class QuestionPrompt:
    tool: str
    hint: str  # the imperative the refusal messages use: "choose a container first"
    prompt_zh: str  # the original skill's words
    prompt_en: str


PROMPTS: dict[Question, QuestionPrompt] = {
    Question.CONTAINER: QuestionPrompt(
        "list_containers",
        "choose a container first: call list_containers, then select_container",
        "检测到以下容器：…  请选择容器",
        "Which container should training run in (an existing one, the host, or a new one)?",
    ),
    Question.PROXY: QuestionPrompt(
        "set_proxy",
        "set the proxy next: call set_proxy (all empty = no proxy)",
        '请提供代理配置（如不需要请回复"无"）：http_proxy / https_proxy',
        'Proxy settings (reply "none" if not needed): http_proxy / https_proxy',
    ),
    Question.FEATURES: QuestionPrompt(
        "choose_features",
        'choose features next: call choose_features (["default"] for the defaults)',
        '是否有自定义特性需求？(回复"默认"使用默认配置)',
        'Any custom features? (reply "default" for the default configuration)',
    ),
    Question.SWANLAB: QuestionPrompt(
        "configure_swanlab",
        "configure SwanLab next: call configure_swanlab (host + API key, or mode local/disabled)",
        "SwanLab 监控配置：Host / API Key",
        "SwanLab monitoring: host and API key",
    ),
}


def swanlab_asked(swanlab_preconfigured: bool) -> bool:
    """The one SwanLab-skip rule (the session, the MCP face and the CLI's quick start all ask this): question 4 is
    asked only when neither the environment nor the config file configures SwanLab; when they do, an answer is
    still accepted and wins (check_answer_allowed)."""
    return not swanlab_preconfigured


def swanlab_key_wanted(mode: str | None, host: str | None, api_key: str | None) -> bool:
    """Whether a configure_swanlab call needs the user's API key asked for (in a form, so that it never passes
    through the model): a cloud setting without a key. A call with neither mode nor host only reports the setting
    (an environment or config-file SwanLab included), so it asks nothing."""
    return not api_key and (mode or "cloud") == "cloud" and (mode is not None or host is not None)


def required_questions(swanlab_preconfigured: bool) -> tuple[Question, ...]:
    if not swanlab_asked(swanlab_preconfigured):
        return tuple(q for q in QUESTION_ORDER if q is not Question.SWANLAB)
    return QUESTION_ORDER


def next_question(answered: Mapping[Question, object], swanlab_preconfigured: bool) -> Question | None:
    """The first required question without an answer, or None when the session is ready."""
    for question in required_questions(swanlab_preconfigured):
        if question not in answered:
            return question
    return None


def session_state(
    answered: Mapping[Question, object], swanlab_preconfigured: bool, run_state: SessionState | None = None
) -> SessionState:
    """Where the session stands; ``run_state`` (running/finished) wins once a run exists."""
    if run_state is not None:
        return run_state
    question = next_question(answered, swanlab_preconfigured)
    return SessionState.READY if question is None else _ASK_STATE[question]


def check_answer_allowed(
    question: Question,
    answered: Mapping[Question, object],
    swanlab_preconfigured: bool,
    run_state: SessionState | None = None,
) -> None:
    """Refuse answering ``question`` now, with a message naming the next step.

    Allowed: the next question, or revising one already answered, while no run exists.
    SwanLab may also be reconfigured when it was preconfigured (the user's answer then wins).
    """
    if run_state is not None:
        raise FlowError(_frozen_message(run_state))
    pending = next_question(answered, swanlab_preconfigured)
    if question in answered or question is pending:
        return
    if question is Question.SWANLAB and swanlab_preconfigured and pending is None:
        return
    order = QUESTION_ORDER.index(question)
    missing = [
        q for q in QUESTION_ORDER[:order] if q not in answered and q in required_questions(swanlab_preconfigured)
    ]
    first_missing = missing[0] if missing else pending
    assert first_missing is not None  # question is not answered and not pending, so something earlier is open
    raise FlowError(f"{question.value} is question {order + 1} of 4; {PROMPTS[first_missing].hint}")


def check_start_allowed(
    answered: Mapping[Question, object], swanlab_preconfigured: bool, run_state: SessionState | None = None
) -> None:
    if run_state is not None:
        raise FlowError(_frozen_message(run_state))
    pending = next_question(answered, swanlab_preconfigured)
    if pending is not None:
        raise FlowError(f"not ready to start: {PROMPTS[pending].hint}")


def _frozen_message(run_state: SessionState) -> Say:
    if run_state in FINISHED_STATES:
        return Say("this session's run has {state}; its answers are kept with the run. Start a new session: {new}",
                   state=run_state.value,
                   new=Term(mcp="call list_containers, then select_container", cli=tool("start_training").cli))  # fmt: skip
    return Say("training is already running for this session and its answers are frozen into the run; "
               "check it with {progress}, or stop it with {stop} before changing anything",
               progress=tool("get_progress"), stop=tool("stop_training"))  # fmt: skip


def next_step_text(
    answered: Mapping[Question, object], swanlab_preconfigured: bool, run_state: SessionState | None
) -> str:
    """One line for the agent: what to do now."""
    state = session_state(answered, swanlab_preconfigured, run_state)
    if state is SessionState.READY:
        return "all questions answered: call start_training"
    if state is SessionState.RUNNING:
        return "training is running: give the user the SwanLab link and stay silent; call get_progress when asked"
    if state in FINISHED_STATES:
        return str(_frozen_message(state))  # the session view is read by the agent
    pending = next_question(answered, swanlab_preconfigured)
    assert pending is not None
    return PROMPTS[pending].hint
