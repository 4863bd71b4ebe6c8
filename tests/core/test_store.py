"""The SQLite store: transactions, append-only events, migrations, two processes, SIGKILL safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.records import run_spec
from verl_async_dapo.exceptions import StoreError
from verl_async_dapo.store import SCHEMA_VERSION, Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def test_wal_schema_version_and_ids(store: Store) -> None:
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    ids = {store.create_session() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) > 20 for i in ids)


def test_answers_revise_and_freeze(store: Store) -> None:
    sid = store.create_session()
    assert store.set_answer(sid, "container", {"name": "a"}) == 1
    assert store.set_answer(sid, "container", {"name": "b"}) == 2
    assert store.answers(sid) == {"container": {"name": "b"}}
    store.create_run(sid, "b", run_spec("b"))
    with pytest.raises(StoreError, match="frozen"):
        store.set_answer(sid, "proxy", {})
    assert store.answers(sid) == {"container": {"name": "b"}}  # refused change left nothing behind


def test_one_run_per_session(store: Store) -> None:
    sid = store.create_session()
    store.create_run(sid, "t", run_spec("t"))
    with pytest.raises(StoreError, match="already started"):
        store.create_run(sid, "t", run_spec("t"))


def test_current_session_is_latest_unfinished(store: Store) -> None:
    first = store.create_session()
    run = store.create_run(first, "t", run_spec("t"))
    assert store.current_session() == first  # running counts as unfinished
    second = store.create_session()
    assert store.current_session() == second
    store.update_run(run, status="succeeded")
    assert store.current_session() == second


def test_events_are_append_only(store: Store) -> None:
    store.add_event("error", "x", "boom")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store._conn.execute("UPDATE events SET message='changed'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store._conn.execute("DELETE FROM events")
    assert [e.message for e in store.events()] == ["boom"]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        Store(path)


def test_migration_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    s = Store(path)
    sid = s.create_session()
    s.close()
    again = Store(path)
    assert again.session_exists(sid)
    again.close()


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from verl_async_dapo.store import Store
    s = Store(Path(sys.argv[1]))
    sid = s.create_session()
    print(sid, flush=True)
    i = 0
    while True:
        i += 1
        with s.transaction() as conn:
            conn.execute("INSERT INTO events (ts, session_id, level, kind, message) VALUES (?,?,?,?,?)",
                         (time.time(), sid, "info", "pair", f"a{i}"))
            time.sleep(0.002)  # widen the window between the two halves of the change
            conn.execute("INSERT INTO events (ts, session_id, level, kind, message) VALUES (?,?,?,?,?)",
                         (time.time(), sid, "info", "pair", f"b{i}"))
        s.set_answer(sid, "proxy", {"n": i})
    """
)


@pytest.mark.parametrize("delay", [0.05, 0.13, 0.31])
def test_sigkill_mid_transaction_leaves_store_consistent(tmp_path: Path, delay: float) -> None:
    path = tmp_path / "state.db"
    Store(path).close()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    sid = proc.stdout.readline().strip()  # type: ignore[union-attr]
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    s = Store(path)
    assert s.integrity_ok()
    pairs = [e.message for e in s.events(limit=10**9) if e.kind == "pair"]
    a = {m[1:] for m in pairs if m.startswith("a")}
    b = {m[1:] for m in pairs if m.startswith("b")}
    assert a == b  # every committed change is whole: no half of a transaction survives
    answer = s.answers(sid).get("proxy")
    if answer is not None:
        assert int(answer["n"]) >= max((int(x) for x in a), default=0) - 1  # committed answers are kept
    s.close()


def test_two_processes_write_at_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = Store(path)
    sid = s.create_session()
    code = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from verl_async_dapo.store import Store
        s = Store(Path(sys.argv[1]))
        for i in range(200):
            s.add_event("info", "w", sys.argv[2] + str(i), session_id=sys.argv[3])
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), tag, sid]) for tag in ("x", "y")]
    for i in range(200):
        s.set_answer(sid, "features", {"i": i})
    assert all(p.wait(timeout=60) == 0 for p in procs)
    messages = [e.message for e in s.events(limit=1000) if e.kind == "w"]
    assert len(messages) == 400
    assert s.answers(sid)["features"] == {"i": 199}
    s.close()


def test_migration_from_schema_1_keeps_data_and_abandons_cleanly(tmp_path: Path) -> None:
    """A version-1 database (before abandoned sessions existed) migrates forward with its rows intact."""
    from verl_async_dapo import store as store_module

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in store_module._split_sql(store_module._MIGRATIONS[0]):
        conn.execute(statement)
    conn.execute("PRAGMA user_version=1")
    conn.execute("INSERT INTO sessions VALUES ('ses_old', 1.0, 1.0)")
    conn.close()
    s = Store(path)
    assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert s.current_session() == "ses_old"
    s.abandon_session("ses_old")
    assert s.current_session() is None
    assert s.session_exists("ses_old")
    s.close()


def test_abandon_is_a_no_op_once_a_run_exists(store: Store) -> None:
    sid = store.create_session()
    store.create_run(sid, "t", run_spec("t"))
    store.abandon_session(sid)
    assert store.current_session() == sid  # the running session stays current


# --- typed rows: the store owns the one codec, and the stored JSON keeps its shape ----------------------------------

# An attempt config as the untyped code wrote it (runspec.attempt_config_to_dict of attempt 2 after a GPU OOM, plus
# the plan's sources and notes; keys sorted as _dumps writes them): existing DBs must still read, and a typed write
# must give the same JSON.
OLD_CONFIG_JSON = (
    '{"effective": ["flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing", "offload"], '
    '"explicit_disabled": [], "explicit_enabled": [], "oom_appended": '
    '["offload"], "override_sources": {"actor_rollout_ref.actor.fsdp_config.param_offload": "oom_ladder"}, '
    '"plan_notes": [], "tweaks": {"rollout_enforce_eager": false, "rollout_gpu_memory_utilization": null, '
    '"rollout_max_num_seqs": null, "rollout_util_ceiling": null, "rollout_util_floor": null, '
    '"token_budget_scale": 1.0}}'
)


def test_rows_are_typed_records_and_the_stored_json_keeps_its_shape(store: Store) -> None:
    import json

    from verl_async_dapo.features import Feature
    from verl_async_dapo.records import AttemptConfigRecord
    from verl_async_dapo.runspec import RunSpec

    spec = run_spec("host", train_steps=6)
    run_id = store.create_run(store.create_session(), "host", spec)
    with store.transaction() as conn:  # an attempt row as the untyped store wrote it
        conn.execute("INSERT INTO attempts (run_id, n, status, config, overrides, override_diff, reason, started_at) "
                     "VALUES (?, 1, 'launching', ?, '[]', '[]', 'first', 0)", (run_id, OLD_CONFIG_JSON))  # fmt: skip
    row = store.run(run_id)
    attempt = store.attempts(run_id)[0]
    assert isinstance(row.spec, RunSpec) and row.spec == spec and row.spec.training_settings().train_steps == 6
    assert isinstance(attempt.config, AttemptConfigRecord)
    assert attempt.config.attempt_config().features.oom_appended == (Feature.OFFLOAD,)
    assert attempt.config.override_sources == {"actor_rollout_ref.actor.fsdp_config.param_offload": "oom_ladder"}

    store.add_attempt(run_id, 2, config=AttemptConfigRecord.of(attempt.config.attempt_config(),
                                                              override_sources=dict(attempt.config.override_sources),
                                                              plan_notes=[]),
                      overrides=[], override_diff=[], reason="again")  # fmt: skip
    stored = dict(store._query("SELECT n, config FROM attempts WHERE run_id=?", (run_id,)))
    assert json.loads(stored[2]) == json.loads(OLD_CONFIG_JSON)  # the same shape as before
    (spec_json,) = store._query("SELECT spec FROM runs WHERE id=?", (run_id,))[0]
    assert json.loads(spec_json) == spec.model_dump(mode="json")
    # An attempt whose plan failed records only the config: no plan keys appear that were never set.
    store.add_attempt(run_id, 3, config=AttemptConfigRecord.of(attempt.config.attempt_config()), overrides=[],
                      override_diff=[], reason="x")  # fmt: skip
    third = json.loads(store._query("SELECT config FROM attempts WHERE run_id=? AND n=3", (run_id,))[0][0])
    assert "override_sources" not in third and "plan_notes" not in third
