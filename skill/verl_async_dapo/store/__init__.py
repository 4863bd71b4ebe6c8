"""SQLite state shared by the MCP server, the CLI and the supervisors: the only module speaking SQL.

WAL mode lets the server and a supervisor read and write at once; every change is one
``BEGIN IMMEDIATE`` transaction, so a process killed at any instant leaves either the whole
change or none of it. The schema is versioned with ``PRAGMA user_version`` and migrated
forward only. Events are append-only (triggers refuse UPDATE and DELETE). No secret is ever
written here: answers hold references into the secret store instead.
Connections, bounded waits and busy retries: ``store.db``; the schema's migrations: ``store.schema``.
"""

from __future__ import annotations

import dataclasses
import json
import secrets as _secrets
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from verl_async_dapo.exceptions import StoreError, TerminalStateError
from verl_async_dapo.records import AttemptConfigRecord, AttemptError, JobHandle, SupervisorDecision
from verl_async_dapo.runspec import RunSpec
from verl_async_dapo.status import (
    ACTIVE_RUN_STATUSES,
    ATTEMPT_INITIAL,
    RUN_INITIAL,
    RUN_REOPENABLE,
    AttemptStatus,
    RunStatus,
    check_transition,
)
from verl_async_dapo.store.outbox import OutboxRow, OutboxStore
from verl_async_dapo.store.schema import _MIGRATIONS, SCHEMA_VERSION, _split_sql

__all__ = ["AttemptRow", "EventRow", "OutboxRow", "RunRow", "Store", "new_id"]


@dataclass(frozen=True)
class RunRow:
    id: str
    session_id: str
    created_at: float
    updated_at: float
    status: RunStatus
    target: str
    spec: RunSpec  # stored as its JSON (model_dump), read back validated
    supervisor_pid: int | None
    heartbeat_at: float | None
    progress: dict[str, Any] | None
    progress_at: float | None
    swanlab_url: str | None
    final_reason: str | None
    suggestions: list[str]
    ended_at: float | None
    stop_requested: bool


@dataclass(frozen=True)
class AttemptRow:
    run_id: str
    n: int
    status: AttemptStatus
    config: AttemptConfigRecord  # stored as the fields that were set: the JSON keeps its shape
    overrides: list[str]
    override_diff: list[str]
    reason: str
    job: dict[str, Any] | None
    exit_code: int | None
    error: dict[str, Any] | None
    decision: dict[str, Any] | None
    started_at: float
    ended_at: float | None

    @property
    def handle(self) -> JobHandle | None:
        """``job`` as its record (None until the attempt's job was started)."""
        return None if self.job is None else JobHandle(**self.job)

    @property
    def attempt_error(self) -> AttemptError | None:
        """``error`` as its record (None: the attempt recorded no error)."""
        return None if self.error is None else AttemptError.model_validate(self.error)

    @property
    def supervisor_decision(self) -> SupervisorDecision | None:
        """``decision`` as its record (None before the supervisor decided anything about this attempt)."""
        return None if self.decision is None else SupervisorDecision.model_validate(self.decision)


@dataclass(frozen=True)
class EventRow:
    id: int
    ts: float
    session_id: str | None
    run_id: str | None
    level: str
    kind: str
    message: str
    data: dict[str, Any] | None


def new_id(prefix: str) -> str:
    """Unguessable ids: 128 random bits."""
    return f"{prefix}_{_secrets.token_urlsafe(16)}"


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# The run statuses that are not terminal, as SQL parameters (the statuses themselves live in status.py).
_ACTIVE_IN = f"({','.join('?' * len(ACTIVE_RUN_STATUSES))})"


class Store(OutboxStore):
    """The state store: sessions, answers, runs, attempts, events (connections and waits: ``store.db``)."""

    def _prepare(self) -> None:
        self._migrate()

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]  # busy: retried by the caller
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"state store {self.path} has schema {version}, newer than this program's {SCHEMA_VERSION}; "
                "upgrade verl-async-dapo"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.transaction() as conn:
                # executescript would COMMIT our transaction; run statements one by one instead.
                for statement in _split_sql(_MIGRATIONS[target - 1]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version={target}")

    # -- sessions and answers -------------------------------------------------------------

    def create_session(self) -> str:
        session_id = new_id("ses")
        now = time.time()
        with self.transaction() as conn:
            conn.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES (?, ?, ?)", (session_id, now, now))
            _event(conn, "info", "session_created", "session created", session_id=session_id)
        return session_id

    def abandon_session(self, session_id: str) -> None:
        """Give up a session that has no run (its answers stay for the record); no-op once it has one."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE sessions SET abandoned_at=? WHERE id=? AND NOT EXISTS (SELECT 1 FROM runs WHERE session_id=?)",
                (time.time(), session_id, session_id),
            )
            _event(conn, "info", "session_abandoned", "session abandoned before a run started", session_id=session_id)

    def session_exists(self, session_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM sessions WHERE id=?", (session_id,)))

    def current_session(self) -> str | None:
        """The latest session whose run has not finished (or that has no run yet)."""
        rows = self._query(
            f"""SELECT s.id FROM sessions s LEFT JOIN runs r ON r.session_id = s.id
               WHERE (r.id IS NULL AND s.abandoned_at IS NULL) OR r.status IN {_ACTIVE_IN}
               ORDER BY s.created_at DESC, s.rowid DESC LIMIT 1""",  # noqa: S608 (placeholders only)
            ACTIVE_RUN_STATUSES,
        )
        return rows[0][0] if rows else None

    def answers(self, session_id: str) -> dict[str, Any]:
        rows = self._query("SELECT question, value FROM answers WHERE session_id=?", (session_id,))
        return {question: json.loads(value) for question, value in rows}

    def set_answer(self, session_id: str, question: str, value: Any) -> int:
        """Record (or revise) an answer; refused once the session has a run. Returns the revision."""
        now = time.time()
        with self.transaction() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE session_id=?", (session_id,)).fetchone():
                raise StoreError("this session's answers are frozen into its run")
            conn.execute(
                """INSERT INTO answers (session_id, question, value, revision, answered_at) VALUES (?,?,?,1,?)
                   ON CONFLICT(session_id, question) DO UPDATE SET value=excluded.value,
                   revision=answers.revision+1, answered_at=excluded.answered_at""",
                (session_id, question, _dumps(value), now),
            )
            conn.execute("UPDATE sessions SET updated_at=? WHERE id=?", (now, session_id))
            revision = conn.execute(
                "SELECT revision FROM answers WHERE session_id=? AND question=?", (session_id, question)
            ).fetchone()[0]
        return int(revision)

    # -- runs -------------------------------------------------------------------------------

    def create_run(self, session_id: str, target: str, spec: RunSpec, *, run_id: str | None = None) -> str:
        """Freeze a session into a run; exactly one run per session even under concurrent calls."""
        run_id = run_id or new_id("run")
        now = time.time()
        with self.transaction() as conn:
            existing = conn.execute("SELECT id FROM runs WHERE session_id=?", (session_id,)).fetchone()
            if existing:
                raise StoreError(f"this session already started run {existing[0]}")
            conn.execute(
                """INSERT INTO runs (id, session_id, created_at, updated_at, status, target, spec)
                   VALUES (?,?,?,?,?,?,?)""",
                (run_id, session_id, now, now, RUN_INITIAL.value, target, _dumps(spec.model_dump(mode="json"))),
            )
            _event(conn, "info", "run_created", f"run {run_id} created", session_id=session_id, run_id=run_id)
        return run_id

    def active_runs_on(self, target: str) -> list[str]:
        rows = self._query(f"SELECT id FROM runs WHERE target=? AND status IN {_ACTIVE_IN}",  # noqa: S608
                           (target, *ACTIVE_RUN_STATUSES))  # fmt: skip
        return [r[0] for r in rows]

    def run(self, run_id: str) -> RunRow | None:
        rows = self._query("SELECT * FROM runs WHERE id=?", (run_id,))
        return _run_row(rows[0]) if rows else None

    def run_for_session(self, session_id: str) -> RunRow | None:
        rows = self._query("SELECT * FROM runs WHERE session_id=?", (session_id,))
        return _run_row(rows[0]) if rows else None

    def runs(self, limit: int = 50) -> list[RunRow]:
        rows = self._query("SELECT * FROM runs ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,))
        return [_run_row(r) for r in rows]

    def latest_run(self) -> RunRow | None:
        found = self.runs(limit=1)
        return found[0] if found else None

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Change a run's fields. A status change is checked against status.py's transition table (an illegal one
        raises IllegalTransitionError, leaving a terminal status TerminalStateError), and ``ended_at`` is stamped on
        entering a terminal status unless given."""
        allowed = {
            "status", "supervisor_pid", "heartbeat_at", "progress", "progress_at", "swanlab_url",
            "final_reason", "suggestions", "ended_at", "stop_requested",
        }  # fmt: skip
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"not run fields: {sorted(unknown)}")
        encoded = {k: _dumps(v) if k in {"progress", "suggestions"} and v is not None else v for k, v in fields.items()}
        encoded["updated_at"] = time.time()
        with self.transaction() as conn:
            if "status" in fields:
                row = conn.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()
                _check_transition(f"run {run_id}", RunStatus, row[0] if row else None, fields["status"], encoded)
            assignments = ", ".join(f"{k}=?" for k in encoded)
            conn.execute(f"UPDATE runs SET {assignments} WHERE id=?", (*encoded.values(), run_id))  # noqa: S608

    def end_run(self, run_id: str, status: RunStatus | str, *, final_reason: str | None = None,
                suggestions: list[str] | None = None) -> None:  # fmt: skip
        """Put a run into a terminal status (stamps ``ended_at``); refused for a run that already ended otherwise."""
        if not RunStatus(status).is_terminal():
            raise ValueError(f"{status} is not a terminal run status")
        fields: dict[str, Any] = {"status": RunStatus(status).value, "final_reason": final_reason}
        if suggestions is not None:
            fields["suggestions"] = suggestions
        self.update_run(run_id, **fields)

    def reopen_run(self, run_id: str) -> None:
        """The one way out of a terminal status: a failed or stopped run resumed by the user (runs.resume_run)
        goes back to ``starting``; its next attempt is a new one, the ended attempts stay as they were."""
        with self.transaction() as conn:
            row = conn.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()
            if row is None or RunStatus(row[0]) not in RUN_REOPENABLE:
                raise TerminalStateError(f"run {run_id} is {row[0] if row else 'unknown'}: only a failed or stopped "
                                         "run can be reopened")  # fmt: skip
            conn.execute(
                """UPDATE runs SET status=?, stop_requested=0, final_reason=NULL, suggestions=NULL,
                   ended_at=NULL, updated_at=? WHERE id=?""",
                (RUN_INITIAL.value, time.time(), run_id),
            )

    # -- attempts ---------------------------------------------------------------------------

    def add_attempt(self, run_id: str, n: int, *, config: AttemptConfigRecord, overrides: list[str],
                    override_diff: list[str], reason: str) -> None:  # fmt: skip
        with self.transaction() as conn:
            conn.execute(
                """INSERT INTO attempts (run_id, n, status, config, overrides, override_diff, reason, started_at)
                   VALUES (?,?,?,?,?,?,?,?)""",
                (run_id, n, ATTEMPT_INITIAL.value, _dumps(config.model_dump(mode="json", exclude_unset=True)), _dumps(overrides), _dumps(override_diff), reason, time.time()),
            )

    def update_attempt(self, run_id: str, n: int, **fields: Any) -> None:
        """Change an attempt's fields; a status change is checked like a run's (see update_run)."""
        allowed = {"status", "job", "exit_code", "error", "decision", "ended_at"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"not attempt fields: {sorted(unknown)}")
        if isinstance(fields.get("job"), JobHandle):
            fields["job"] = dataclasses.asdict(fields["job"])
        for name in ("decision", "error"):  # a record's set fields: its stored shape
            if isinstance(fields.get(name), SupervisorDecision | AttemptError):
                fields[name] = fields[name].model_dump(mode="json", exclude_unset=True)
        encoded = {
            k: _dumps(v) if k in {"job", "error", "decision"} and v is not None else v for k, v in fields.items()
        }
        with self.transaction() as conn:
            if "status" in fields:
                row = conn.execute("SELECT status FROM attempts WHERE run_id=? AND n=?", (run_id, n)).fetchone()
                _check_transition(f"attempt {n} of run {run_id}", AttemptStatus, row[0] if row else None,
                                  fields["status"], encoded)  # fmt: skip
            assignments = ", ".join(f"{k}=?" for k in encoded)
            conn.execute(f"UPDATE attempts SET {assignments} WHERE run_id=? AND n=?", (*encoded.values(), run_id, n))  # noqa: S608

    def end_attempt(self, run_id: str, n: int, status: AttemptStatus | str, **fields: Any) -> None:
        """Put an attempt into a terminal status (stamps ``ended_at``)."""
        if not AttemptStatus(status).is_terminal():
            raise ValueError(f"{status} is not a terminal attempt status")
        self.update_attempt(run_id, n, status=AttemptStatus(status).value, **fields)

    def attempts(self, run_id: str) -> list[AttemptRow]:
        rows = self._query("SELECT * FROM attempts WHERE run_id=? ORDER BY n", (run_id,))
        return [_attempt_row(r) for r in rows]

    # -- events -----------------------------------------------------------------------------

    def add_event(self, level: str, kind: str, message: str, *, session_id: str | None = None,
                  run_id: str | None = None, data: dict[str, Any] | None = None) -> int:  # fmt: skip
        """Append an event; returns its id."""
        with self.transaction() as conn:
            return _event(conn, level, kind, message, session_id=session_id, run_id=run_id, data=data)

    def events(self, run_id: str | None = None, *, after_id: int = 0, limit: int = 200) -> list[EventRow]:
        if run_id is None:
            rows = self._query("SELECT * FROM events WHERE id>? ORDER BY id LIMIT ?", (after_id, limit))
        else:
            rows = self._query(
                "SELECT * FROM events WHERE run_id=? AND id>? ORDER BY id LIMIT ?", (run_id, after_id, limit)
            )
        return [EventRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], _loads(r[7])) for r in rows]

    def last_event_id(self, before: float | None = None) -> int:
        """The newest event's id (of those recorded before ``before``, a time.time(), when given)."""
        if before is None:
            return int(self._query("SELECT COALESCE(MAX(id), 0) FROM events")[0][0])
        return int(self._query("SELECT COALESCE(MAX(id), 0) FROM events WHERE ts<?", (before,))[0][0])

    def event(self, event_id: int) -> EventRow | None:
        rows = self._query("SELECT * FROM events WHERE id=?", (event_id,))
        r = rows[0] if rows else None
        return None if r is None else EventRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], _loads(r[7]))

    def integrity_ok(self) -> bool:
        return bool(self._query("PRAGMA integrity_check")[0][0] == "ok")


def _event(conn: sqlite3.Connection, level: str, kind: str, message: str, *, session_id: str | None = None,
           run_id: str | None = None, data: dict[str, Any] | None = None) -> int:  # fmt: skip
    cursor = conn.execute(
        "INSERT INTO events (ts, session_id, run_id, level, kind, message, data) VALUES (?,?,?,?,?,?,?)",
        (time.time(), session_id, run_id, level, kind, message, None if data is None else _dumps(data)),
    )
    return int(cursor.lastrowid or 0)


def _check_transition(what: str, kind: type[RunStatus] | type[AttemptStatus], current: str | None, new: Any,
                      encoded: dict[str, Any]) -> None:  # fmt: skip
    """Refuse a change status.py's table does not allow; stamp ``ended_at`` on entering a terminal status (into
    ``encoded``, the row's update)."""
    try:
        target = kind(new)
    except ValueError:
        raise ValueError(f"{new!r} is not a {kind.__name__}: one of {', '.join(s.value for s in kind)}") from None
    encoded["status"] = target.value
    if current is None:
        return  # no such row: the UPDATE changes nothing, as before
    was = kind(current)
    check_transition(what, was, target)
    if target is was:
        return  # the status it has: nothing is entered, ended_at stays as it is
    if target.is_terminal() and encoded.get("ended_at") is None:
        encoded["ended_at"] = time.time()


def _run_row(r: sqlite3.Row | tuple[Any, ...]) -> RunRow:
    return RunRow(
        id=r[0], session_id=r[1], created_at=r[2], updated_at=r[3], status=RunStatus(r[4]), target=r[5],
        spec=RunSpec.model_validate_json(r[6]), supervisor_pid=r[7], heartbeat_at=r[8], progress=_loads(r[9]),
        progress_at=r[10], swanlab_url=r[11], final_reason=r[12], suggestions=_loads(r[13]) or [],
        ended_at=r[14], stop_requested=bool(r[15]),
    )  # fmt: skip


def _attempt_row(r: sqlite3.Row | tuple[Any, ...]) -> AttemptRow:
    return AttemptRow(
        run_id=r[0], n=r[1], status=AttemptStatus(r[2]), config=AttemptConfigRecord.model_validate_json(r[3]), overrides=json.loads(r[4]),
        override_diff=json.loads(r[5]), reason=r[6], job=_loads(r[7]), exit_code=r[8],
        error=_loads(r[9]), decision=_loads(r[10]), started_at=r[11], ended_at=r[12],
    )  # fmt: skip
