"""Run and attempt statuses (status.py) and the store's rules for them: only the changes the transition table allows
(no way out of a terminal status but resume's reopen), ``ended_at`` stamped on the way in (after Ray's
JobInfo/put_status); and no status spelled as a string literal outside status.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.records import run_spec
from verl_async_dapo.exceptions import IllegalTransitionError, StoreError, TerminalStateError
from verl_async_dapo.records import AttemptConfigRecord
from verl_async_dapo.status import (
    ACTIVE_RUN_STATUSES,
    ATTEMPT_TRANSITIONS,
    RUN_REOPENABLE,
    RUN_TRANSITIONS,
    AttemptStatus,
    DeliveryStatus,
    RunStatus,
)
from verl_async_dapo.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "state.db")


def _run(store: Store) -> str:
    return store.create_run(store.create_session(), "host", run_spec("host"))


def test_terminal_statuses() -> None:
    assert {s for s in RunStatus if s.is_terminal()} == {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED}
    assert ACTIVE_RUN_STATUSES == ("starting", "running", "retrying")
    assert {s for s in AttemptStatus if not s.is_terminal()} == {AttemptStatus.LAUNCHING, AttemptStatus.RUNNING}
    assert f"{RunStatus.FAILED}" == str(RunStatus.FAILED) == "failed" == RunStatus.FAILED  # messages stay plain


def test_rows_carry_the_enums(store: Store) -> None:
    run_id = _run(store)
    store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
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
    store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
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


# --- the transition table ----------------------------------------------------------------------------------------


def test_the_tables_cover_every_status_and_terminal_means_no_way_out() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus) and set(ATTEMPT_TRANSITIONS) == set(AttemptStatus)
    assert {s for s, nexts in RUN_TRANSITIONS.items() if not nexts} == {s for s in RunStatus if s.is_terminal()}
    assert {s for s, nexts in ATTEMPT_TRANSITIONS.items() if not nexts} == {s for s in AttemptStatus if s.is_terminal()}
    assert RunStatus.STARTING not in RUN_TRANSITIONS[RunStatus.RUNNING]  # back to starting: by resume only
    assert AttemptStatus.REJECTED not in ATTEMPT_TRANSITIONS[AttemptStatus.RUNNING]  # rejected: before it started


@pytest.mark.parametrize("current", list(RunStatus))
@pytest.mark.parametrize("new", list(RunStatus))
def test_the_store_follows_the_run_table_for_every_pair(store: Store, current: RunStatus, new: RunStatus) -> None:
    run_id = _run(store)
    with store.transaction() as conn:  # put the row into ``current`` directly: the table is what is under test
        conn.execute("UPDATE runs SET status=? WHERE id=?", (current.value, run_id))
    if new is current or new in RUN_TRANSITIONS[current]:
        store.update_run(run_id, status=new)
        assert store.run(run_id).status is new  # type: ignore[union-attr]
    else:
        with pytest.raises(TerminalStateError if current.is_terminal() else IllegalTransitionError):
            store.update_run(run_id, status=new)
        assert store.run(run_id).status is current  # type: ignore[union-attr]


@pytest.mark.parametrize("current", list(AttemptStatus))
@pytest.mark.parametrize("new", list(AttemptStatus))
def test_the_store_follows_the_attempt_table_for_every_pair(store: Store, current: AttemptStatus,
                                                            new: AttemptStatus) -> None:  # fmt: skip
    run_id = _run(store)
    store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
    with store.transaction() as conn:
        conn.execute("UPDATE attempts SET status=? WHERE run_id=? AND n=1", (current.value, run_id))
    if new is current or new in ATTEMPT_TRANSITIONS[current]:
        store.update_attempt(run_id, 1, status=new)
        assert store.attempts(run_id)[0].status is new
    else:
        with pytest.raises(IllegalTransitionError):
            store.update_attempt(run_id, 1, status=new)
        assert store.attempts(run_id)[0].status is current


def test_an_illegal_change_between_active_statuses_is_refused(store: Store) -> None:
    # Before the table only leaving a terminal status was refused: running → starting went through.
    run_id = _run(store)
    store.update_run(run_id, status=RunStatus.RUNNING)
    with pytest.raises(IllegalTransitionError, match="is running: it cannot become starting"):
        store.update_run(run_id, status=RunStatus.STARTING)
    store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
    store.update_attempt(run_id, 1, status=AttemptStatus.RUNNING)
    for new in (AttemptStatus.LAUNCHING, AttemptStatus.REJECTED, AttemptStatus.ABANDONED):
        with pytest.raises(IllegalTransitionError, match=f"cannot become {new.value}"):
            store.update_attempt(run_id, 1, status=new)
    assert not issubclass(IllegalTransitionError, StoreError)  # never retried as a busy store would be


def test_reopen_is_the_one_way_out_of_a_terminal_status(store: Store) -> None:
    for ended in RunStatus:
        if not ended.is_terminal():
            continue
        run_id = _run(store)
        store.end_run(run_id, ended)
        if ended in RUN_REOPENABLE:
            store.reopen_run(run_id)
            assert store.run(run_id).status is RunStatus.STARTING  # type: ignore[union-attr]
        else:
            with pytest.raises(TerminalStateError, match="only a failed or stopped run"):
                store.reopen_run(run_id)


# --- no status literal outside status.py -------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2] / "skill" / "verl_async_dapo"
STATUS_WORDS = {s.value for s in (*RunStatus, *AttemptStatus, *DeliveryStatus)}
# Other vocabularies that share these words, each with its own values: Docker's and Ray's states (targets/,
# server/menu.py: the container menu), the event opt-ins (notify/config.py, notify/events.py: "succeeded" is a
# kind of event one may ask for), and the schema's migrations (history: a column default as it was created).
FOREIGN_VOCABULARY = ("targets/", "server/menu.py", "notify/config.py", "notify/events.py", "store/schema.py")


def status_literals(root: Path) -> list[str]:
    """String constants that spell a run or attempt status, outside status.py: in code (a comparison, an argument,
    a set of them, a ``"status"`` value) or quoted in SQL. Not flagged: docstrings, the members of other enums
    spelled the same (SessionState, Phase), and a dict value under another key (``"message": "stopped"``)."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "status.py" or rel.startswith(FOREIGN_VOCABULARY):
            continue
        tree = ast.parse(path.read_text())
        exempt: set[int] = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                exempt.add(id(body[0].value))  # a docstring
            if isinstance(node, ast.ClassDef) and any("Enum" in ast.unparse(b) or "State" in ast.unparse(b)
                                                      for b in node.bases):  # fmt: skip
                exempt.update(id(s.value) for s in node.body if isinstance(s, ast.Assign))
            if isinstance(node, ast.Dict):
                exempt.update(id(v) for k, v in zip(node.keys, node.values, strict=True)
                              if not (isinstance(k, ast.Constant) and k.value == "status"))  # fmt: skip
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in exempt:
                continue
            text = node.value
            if text in STATUS_WORDS or any(f"'{w}'" in text for w in STATUS_WORDS):
                found.append(f"{rel}:{node.lineno}: {text[:60]!r}")
    return found


def test_no_status_literal_outside_status_py() -> None:
    found = status_literals(ROOT)
    assert found == [], "use RunStatus / AttemptStatus / DeliveryStatus (status.py):\n" + "\n".join(found)


@pytest.mark.parametrize("planted", [
    'store.end_run(run_id, "failed")',
    'ended = row.status == "retrying"',
    'DONE = frozenset({"succeeded", "stopped"})',
    'out = {"status": "starting"}',
    'sql = "SELECT id FROM runs WHERE status=\'running\'"',
])  # fmt: skip
def test_the_literal_check_names_a_planted_literal(tmp_path: Path, planted: str) -> None:
    import shutil

    copy = tmp_path / "verl_async_dapo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "runs" / "control.py"
    target.write_text(target.read_text() + f"\n\ndef _planted(store, run_id, row):\n    {planted}\n")
    assert any(hit.startswith("runs/control.py:") for hit in status_literals(copy)), planted
