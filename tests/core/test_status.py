"""Run and attempt statuses (status.py) and the store's one rule for them: no way out of a terminal status, and
``ended_at`` stamped on the way in (after Ray's JobInfo/put_status)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_async_dapo.exceptions import StoreError, TerminalStateError
from verl_async_dapo.status import ACTIVE_RUN_STATUSES, AttemptStatus, RunStatus
from verl_async_dapo.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "state.db")


def _run(store: Store) -> str:
    return store.create_run(store.create_session(), "host", {"x": 1})


def test_terminal_statuses() -> None:
    assert {s for s in RunStatus if s.is_terminal()} == {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED}
    assert ACTIVE_RUN_STATUSES == ("starting", "running", "retrying")
    assert {s for s in AttemptStatus if not s.is_terminal()} == {AttemptStatus.LAUNCHING, AttemptStatus.RUNNING}
    assert f"{RunStatus.FAILED}" == str(RunStatus.FAILED) == "failed" == RunStatus.FAILED  # messages stay plain


def test_rows_carry_the_enums(store: Store) -> None:
    run_id = _run(store)
    store.add_attempt(run_id, 1, config={}, overrides=[], override_diff=[], reason="first")
    assert store.run(run_id).status is RunStatus.STARTING  # type: ignore[union-attr]
    assert store.attempts(run_id)[0].status is AttemptStatus.LAUNCHING


def test_entering_a_terminal_status_stamps_ended_at_and_leaving_it_is_refused(store: Store) -> None:
    run_id = _run(store)
    store.update_run(run_id, status="running")
    assert store.run(run_id).ended_at is None  # type: ignore[union-attr]
    store.end_run(run_id, RunStatus.FAILED, final_reason="gpu_oom", suggestions=["add offload"])
    row = store.run(run_id)
    assert row is not None and row.status is RunStatus.FAILED and row.ended_at is not None
    assert (row.final_reason, row.suggestions) == ("gpu_oom", ["add offload"])
    for status in ("running", "retrying", "succeeded"):
        with pytest.raises(TerminalStateError, match=f"already ended as failed; it cannot become {status}"):
            store.update_run(run_id, status=status)
    assert store.run(run_id).status is RunStatus.FAILED  # type: ignore[union-attr]
    store.update_run(run_id, status="failed", heartbeat_at=1.0)  # the same terminal status again is no change
    assert store.run(run_id).ended_at == row.ended_at  # type: ignore[union-attr]


def test_attempts_follow_the_same_rule(store: Store) -> None:
    run_id = _run(store)
    store.add_attempt(run_id, 1, config={}, overrides=[], override_diff=[], reason="first")
    store.update_attempt(run_id, 1, status="running", job={"job_dir": "/j"})
    store.end_attempt(run_id, 1, AttemptStatus.SUCCEEDED, exit_code=0)
    attempt = store.attempts(run_id)[0]
    assert attempt.status is AttemptStatus.SUCCEEDED and attempt.ended_at is not None and attempt.exit_code == 0
    with pytest.raises(TerminalStateError, match="attempt 1 of run"):
        store.update_attempt(run_id, 1, status="running")


def test_unknown_and_non_terminal_statuses_are_refused(store: Store) -> None:
    run_id = _run(store)
    with pytest.raises(ValueError, match="'finished' is not a RunStatus"):
        store.update_run(run_id, status="finished")
    with pytest.raises(ValueError, match="not a terminal run status"):
        store.end_run(run_id, "running")
    assert store.run(run_id).status is RunStatus.STARTING  # type: ignore[union-attr]


def test_a_terminal_state_error_is_not_a_transient_store_error() -> None:
    # Retrying the write can never succeed, so code that retries StoreError (busy DB) must not retry this.
    assert not issubclass(TerminalStateError, StoreError)


def test_only_the_store_stamps_ended_at() -> None:
    # A run or attempt ends through store.end_run / end_attempt, which stamp ended_at (issue 19: it was passed by
    # hand in a dozen places). Any `ended_at=` keyword outside the store is a way around that one rule.
    import ast

    root = Path(__file__).resolve().parents[2] / "skill" / "verl_async_dapo"
    found = [
        f"{path.relative_to(root)}:{node.lineno}"
        for path in root.rglob("*.py") if "store" not in path.relative_to(root).parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and any(k.arg == "ended_at" for k in node.keywords)
    ]  # fmt: skip
    assert found == []
