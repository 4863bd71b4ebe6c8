"""The question flow: order, refusals naming the next question, revision, freezing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl_async_dapo.exceptions import FlowError
from verl_async_dapo.flow import (
    QUESTION_ORDER,
    Question,
    SessionState,
    check_answer_allowed,
    check_start_allowed,
    next_question,
    next_step_text,
    session_state,
)


def test_order_is_container_proxy_features_swanlab() -> None:
    answered: dict[Question, object] = {}
    seen = []
    while (q := next_question(answered, swanlab_preconfigured=False)) is not None:
        seen.append(q)
        answered[q] = "x"
    assert seen == [Question.CONTAINER, Question.PROXY, Question.FEATURES, Question.SWANLAB]
    assert session_state(answered, False) is SessionState.READY


def test_swanlab_skipped_when_preconfigured() -> None:
    answered = {Question.CONTAINER: 1, Question.PROXY: 1, Question.FEATURES: 1}
    assert next_question(answered, swanlab_preconfigured=True) is None
    assert next_question(answered, swanlab_preconfigured=False) is Question.SWANLAB
    check_answer_allowed(Question.SWANLAB, answered, True)  # may still override the preconfigured one


@pytest.mark.parametrize(
    ("question", "expected_hint"),
    [
        (Question.PROXY, "list_containers"),
        (Question.FEATURES, "list_containers"),
        (Question.SWANLAB, "list_containers"),
    ],
)
def test_out_of_order_names_the_next_question(question: Question, expected_hint: str) -> None:
    with pytest.raises(FlowError) as info:
        check_answer_allowed(question, {}, False)
    assert expected_hint in str(info.value)
    assert "choose a container first" in str(info.value)


def test_skipping_proxy_names_set_proxy() -> None:
    with pytest.raises(FlowError, match="set_proxy"):
        check_answer_allowed(Question.FEATURES, {Question.CONTAINER: 1}, False)
    with pytest.raises(FlowError, match="set_proxy"):
        check_start_allowed({Question.CONTAINER: 1}, True)


def test_running_and_finished_sessions_are_frozen() -> None:
    full = dict.fromkeys(QUESTION_ORDER, 1)
    with pytest.raises(FlowError, match="frozen"):
        check_answer_allowed(Question.PROXY, full, False, SessionState.RUNNING)
    with pytest.raises(FlowError, match="new session"):
        check_answer_allowed(Question.PROXY, full, False, SessionState.FAILED)
    with pytest.raises(FlowError):
        check_start_allowed(full, False, SessionState.RUNNING)
    assert "get_progress" in next_step_text(full, False, SessionState.RUNNING)


actions = st.lists(
    st.one_of(st.sampled_from(list(Question)), st.just("start")),
    max_size=12,
)


@given(actions=actions, preconfigured=st.booleans())
def test_no_call_sequence_starts_without_all_answers(actions: list, preconfigured: bool) -> None:
    """Model: apply each allowed call; a start only succeeds with every required answer given in order."""
    answered: dict[Question, int] = {}
    order_seen: list[Question] = []
    started = False
    for action in actions:
        if action == "start":
            try:
                check_start_allowed(answered, preconfigured, SessionState.RUNNING if started else None)
            except FlowError:
                continue
            required = [q for q in QUESTION_ORDER if not (preconfigured and q is Question.SWANLAB)]
            assert all(q in answered for q in required)
            # The first answers must have been given in the fixed order.
            firsts = [q for i, q in enumerate(order_seen) if q not in order_seen[:i]]
            assert [q for q in firsts if q in required] == required
            started = True
            continue
        try:
            check_answer_allowed(action, answered, preconfigured, SessionState.RUNNING if started else None)
        except FlowError:
            assert started or action not in answered  # revising an answer is always allowed before start
            continue
        assert not started
        answered[action] = answered.get(action, 0) + 1  # a revision replaces the answer
        order_seen.append(action)
    assert session_state(answered, preconfigured, SessionState.RUNNING if started else None) in SessionState
