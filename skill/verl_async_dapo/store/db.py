"""The state store's SQLite connections: one per thread, bounded waits, "busy, retry" answers.

A lock held by another process (issue 20: a 40 s write transaction froze every tool, and a 45 s one made
the supervisor exit) costs a bounded wait: one connection per thread (so the MCP server's worker threads
read while another waits), each wait at most ``busy_timeout`` seconds, then ``StoreBusy`` and nothing
changed. Reads under WAL do not wait for a writer at all. A caller that must not give up (the supervisor)
passes ``busy_retry_seconds``: busy operations are retried with backoff that long. The DB file and its
``-wal`` / ``-shm`` siblings are made owner-only (0600) whatever the umask.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from verl_async_dapo.exceptions import StoreBusy, StoreError


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _busy(exc: sqlite3.Error, waited: float) -> StoreBusy:
    return StoreBusy(f"the state store is busy: another process has held its lock for over {waited:.0f} s "
                     f"({exc}); nothing was changed. Retry in a few seconds")  # fmt: skip


def _private(path: Path) -> None:
    """Owner-only (0600); a file that does not exist yet (a -wal not created) is skipped."""
    with suppress(FileNotFoundError):
        os.chmod(path, 0o600)


class Database:
    """A SQLite file opened the way the state store needs it; subclasses add ``_prepare`` (the migrations)."""

    def __init__(self, path: Path, *, busy_timeout: float = 5.0, busy_retry_seconds: float = 0.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.busy_retry_seconds = busy_retry_seconds
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()
        try:
            from verl_async_dapo.secret_store import ensure_private_dir

            ensure_private_dir(path.parent)  # 0700 whatever the umask (issue 20), for the dirs it creates
            self._retrying(self._prepare)
        except StoreError:
            raise
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the state store at {path}: {exc}") from exc

    @property
    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (sqlite3 connections are not meant to be shared across threads)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            if fresh:  # owner-only whatever the umask (issue 20): the DB and its -wal/-shm siblings
                _private(self.path)
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            for sibling in (self.path.with_name(self.path.name + "-wal"), self.path.with_name(self.path.name + "-shm")):
                _private(sibling)
        except BaseException:
            conn.close()
            raise
        with self._opened_lock:
            self._opened.append(conn)
        return conn

    def _retrying(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``; a busy store is retried with backoff for ``busy_retry_seconds``, then ``StoreBusy``."""
        start = time.monotonic()
        delay = 0.05
        while True:
            try:
                return fn(*args)
            except (StoreBusy, sqlite3.OperationalError) as exc:
                if isinstance(exc, sqlite3.OperationalError) and not _is_busy(exc):
                    raise
                waited = time.monotonic() - start + (self.busy_timeout if isinstance(exc, sqlite3.Error) else 0)
                if time.monotonic() - start >= self.busy_retry_seconds:
                    if isinstance(exc, StoreBusy):
                        raise
                    raise _busy(exc, waited) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2.0)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """A read: under WAL it does not wait for writers; a lock that blocks it anyway is ``StoreBusy``."""

        def run() -> list[Any]:
            return self._conn.execute(sql, params).fetchall()

        try:
            result: list[Any] = self._retrying(run)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the state store at {self.path}: {exc}") from exc
        return result

    @contextmanager
    def waiting(self, seconds: float) -> Iterator[None]:
        """This thread's lock waits bounded by ``seconds`` inside the block (for best-effort writes)."""
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout={int(seconds * 1000)}")
        try:
            yield
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")

    def close(self) -> None:
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self._local = threading.local()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic change; BEGIN IMMEDIATE takes the write lock up front (no upgrade deadlocks)."""

        def begin() -> None:
            self._conn.execute("BEGIN IMMEDIATE")

        try:
            self._retrying(begin)
        except StoreBusy:
            raise
        except sqlite3.OperationalError as exc:
            raise StoreError(f"state store busy or unwritable: {exc}") from exc
        try:
            yield self._conn
        except BaseException as exc:
            self._rollback()
            if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                raise _busy(exc, self.busy_timeout) from exc
            if isinstance(exc, sqlite3.OperationalError):  # disk full, I/O error, read-only file, …
                raise StoreError(f"could not save state ({exc}); nothing was changed") from exc
            raise
        try:
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            if _is_busy(exc):
                raise _busy(exc, self.busy_timeout) from exc
            raise StoreError(f"could not save state ({exc}); nothing was changed") from exc

    def _rollback(self) -> None:
        # After some errors (SQLITE_FULL, SQLITE_IOERR) SQLite has already rolled back: nothing left to undo.
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _prepare(self) -> None:
        """Run once at open (under the busy retry)."""
