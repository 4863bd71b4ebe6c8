"""The state store's schema: its migrations, in order (``PRAGMA user_version`` counts them), and the splitter
that runs a migration statement by statement. Forward only; a migration is never edited once released.
"""

from __future__ import annotations

import sqlite3

_MIGRATIONS: tuple[str, ...] = (
    # 1: the initial schema.
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL
    );
    CREATE TABLE answers (
        session_id TEXT NOT NULL REFERENCES sessions(id), question TEXT NOT NULL,
        value TEXT NOT NULL, revision INTEGER NOT NULL DEFAULT 1, answered_at REAL NOT NULL,
        PRIMARY KEY (session_id, question)
    );
    CREATE TABLE runs (
        id TEXT PRIMARY KEY, session_id TEXT NOT NULL UNIQUE REFERENCES sessions(id),
        created_at REAL NOT NULL, updated_at REAL NOT NULL, status TEXT NOT NULL,
        target TEXT NOT NULL, spec TEXT NOT NULL,
        supervisor_pid INTEGER, heartbeat_at REAL,
        progress TEXT, progress_at REAL, swanlab_url TEXT,
        final_reason TEXT, suggestions TEXT, ended_at REAL,
        stop_requested INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_target_status ON runs(target, status);
    CREATE TABLE attempts (
        run_id TEXT NOT NULL REFERENCES runs(id), n INTEGER NOT NULL, status TEXT NOT NULL,
        config TEXT NOT NULL, overrides TEXT NOT NULL, override_diff TEXT NOT NULL,
        reason TEXT NOT NULL, job TEXT, exit_code INTEGER, error TEXT, decision TEXT,
        started_at REAL NOT NULL, ended_at REAL,
        PRIMARY KEY (run_id, n)
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, session_id TEXT, run_id TEXT,
        level TEXT NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL, data TEXT
    );
    CREATE INDEX events_run ON events(run_id, id);
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
    """,
    # 2: a session given up before its run started (e.g. `start` failed its preflight) is no longer current.
    """
    ALTER TABLE sessions ADD COLUMN abandoned_at REAL;
    """,
    # 3 (notification outbox): one row per (event, sink), written before the send and marked after it, so a
    # supervisor killed mid-send and restarted sends what is pending and never what was answered.
    """
    CREATE TABLE notify_outbox (
        event_id INTEGER NOT NULL REFERENCES events(id), sink TEXT NOT NULL, run_id TEXT,
        status TEXT NOT NULL DEFAULT 'pending', tries INTEGER NOT NULL DEFAULT 0,
        next_at REAL NOT NULL, sent_at REAL, answer TEXT,
        PRIMARY KEY (event_id, sink)
    );
    CREATE INDEX notify_outbox_due ON notify_outbox(run_id, status, next_at);
    """,
)
SCHEMA_VERSION = len(_MIGRATIONS)


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (which contain ';') whole."""
    statements: list[str] = []
    buffer: list[str] = []
    for line in script.strip().splitlines():
        buffer.append(line)
        joined = "\n".join(buffer).strip()
        if joined.endswith(";") and sqlite3.complete_statement(joined):
            statements.append(joined)
            buffer = []
    if "".join(buffer).strip():
        statements.append("\n".join(buffer))
    return statements
