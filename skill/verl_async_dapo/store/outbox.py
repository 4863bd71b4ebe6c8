"""The notification outbox's SQL (a part of the state store, kept apart to keep store.py readable).

One row per (event, sink): written before the send and marked after it (notify/outbox.py), so a supervisor
killed mid-send and restarted sends what is still pending and never what a service has already answered.
The table is migration 3 in store.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from verl_async_dapo.status import DeliveryStatus
from verl_async_dapo.store.db import Database

__all__ = ["OutboxRow", "OutboxStore"]


@dataclass(frozen=True)
class OutboxRow:
    event_id: int
    sink: str
    run_id: str | None
    status: DeliveryStatus
    tries: int
    next_at: float
    sent_at: float | None
    answer: str | None

    @classmethod
    def of(cls, row: tuple) -> OutboxRow:  # type: ignore[type-arg]
        event_id, sink, run_id, status, *rest = row
        return cls(event_id, sink, run_id, DeliveryStatus(status), *rest)


class OutboxStore(Database):
    """The outbox part of ``Store`` (its base): reads and transactions as ``store.db.Database`` bounds them."""

    def outbox_enqueue(self, event_id: int, run_id: str | None, sinks: list[str]) -> int:
        """One pending row per sink for this event; a row that exists already (sent or not) is left alone."""
        now = time.time()
        with self.transaction() as conn:
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO notify_outbox (event_id, sink, run_id, next_at) VALUES (?,?,?,?)",
                [(event_id, sink, run_id, now) for sink in sinks],
            )
            return conn.total_changes - before

    def outbox_due(self, run_id: str | None, now: float, limit: int = 50) -> list[OutboxRow]:
        rows = self._query(
            """SELECT event_id, sink, run_id, status, tries, next_at, sent_at, answer FROM notify_outbox
               WHERE run_id IS ? AND status=? AND next_at<=? ORDER BY event_id, sink LIMIT ?""",
            (run_id, DeliveryStatus.PENDING.value, now, limit),
        )
        return [OutboxRow.of(r) for r in rows]

    def outbox_rows(self, run_id: str | None = None) -> list[OutboxRow]:
        sql = "SELECT event_id, sink, run_id, status, tries, next_at, sent_at, answer FROM notify_outbox"
        rows = (self._query(sql + " ORDER BY event_id, sink") if run_id is None
                else self._query(sql + " WHERE run_id=? ORDER BY event_id, sink", (run_id,)))  # fmt: skip
        return [OutboxRow.of(r) for r in rows]

    def outbox_pending(self, run_id: str | None) -> int:
        rows = self._query("SELECT COUNT(*) FROM notify_outbox WHERE run_id IS ? AND status=?",
                           (run_id, DeliveryStatus.PENDING.value))  # fmt: skip
        return int(rows[0][0])

    def outbox_mark(self, event_id: int, sink: str, *, status: DeliveryStatus, tries: int, next_at: float,
                    answer: str) -> None:  # fmt: skip
        """After a send: sent (answered), pending again with a later next_at, or failed (gave up)."""
        sent_at = time.time() if status is DeliveryStatus.SENT else None
        with self.transaction() as conn:
            conn.execute(
                """UPDATE notify_outbox SET status=?, tries=?, next_at=?, sent_at=?, answer=?
                   WHERE event_id=? AND sink=?""",
                (DeliveryStatus(status).value, tries, next_at, sent_at, answer[:500], event_id, sink),
            )
