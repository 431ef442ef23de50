"""Sleep's fact mining over the index: the messages not mined yet (`fact_mining` is how far
each session was read) and the facts' recall counts, which promotion by use weighs.

What is mined from a message and when a fact is pinned is `daemon.sleep.mine` (the pins
themselves are `daemon.store.pins`); this module reads and writes the rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemon.store.transactions import begin_write, on_postgres

if TYPE_CHECKING:
    from daemon.store.db import Database

_UNMINED = """
SELECT s.id AS session_id, s.kind, s.transcript_path, m.msg_id, m.seq, m.ts, m.role, m.content,
       m.turn_id
FROM messages m JOIN sessions s ON s.id = m.session_id
LEFT JOIN fact_mining c ON c.session_id = m.session_id
WHERE s.kind IN ('trunk', 'fork') AND m.seq > coalesce(c.upto_seq, -1)
ORDER BY m.ts, m.session_id, m.seq LIMIT :limit
"""
# A cursor only moves forward: the larger of the stored and the new place, per dialect
# (SQLite's two-argument `max`, PostgreSQL's `GREATEST`).
_ADVANCE = (
    "INSERT INTO fact_mining(session_id, upto_seq, mined_at) VALUES (?,?,?) "
    "ON CONFLICT(session_id) DO UPDATE SET "
    "upto_seq = {larger}(fact_mining.upto_seq, excluded.upto_seq), mined_at = excluded.mined_at"
)
_ADVANCE_SQLITE = _ADVANCE.format(larger="max")
_ADVANCE_POSTGRES = _ADVANCE.format(larger="GREATEST")


@dataclass(frozen=True, kw_only=True)
class UnminedMessage:
    """A message of a trunk or fork session past its session's mining cursor."""

    session_id: str
    kind: str  # the session's: trunk | fork
    transcript_path: str
    msg_id: str
    seq: int
    ts: str
    role: str
    content: str
    turn_id: str | None


class FactMiningRepo:
    """The mining cursors (`fact_mining`) and the facts' uses."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def unmined(self, limit: int) -> list[UnminedMessage]:
        """The oldest `limit` messages not mined yet, by time, then session and order."""
        rows = await self.db.fetchall(_UNMINED, {"limit": limit})
        return [
            UnminedMessage(
                session_id=str(r["session_id"]),
                kind=str(r["kind"]),
                transcript_path=str(r["transcript_path"]),
                msg_id=str(r["msg_id"]),
                seq=int(r["seq"]),
                ts=str(r["ts"]),
                role=str(r["role"]),
                content=str(r["content"]),
                turn_id=str(r["turn_id"]) if r["turn_id"] else None,
            )
            for r in rows
        ]

    async def advance(self, upto: Mapping[str, int], *, at: str) -> None:
        """Move each session's cursor to its message number in `upto` (never back), in one
        transaction."""
        values = [(sid, seq, at) for sid, seq in upto.items()]

        def advance(conn: sqlite3.Connection) -> None:
            begin_write(conn)
            try:
                conn.executemany(
                    _ADVANCE_POSTGRES if on_postgres(conn) else _ADVANCE_SQLITE, values
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self.db.run(advance)

    async def fact_uses(self) -> dict[str, int]:
        """How often each live fact (and profile line) was recalled, by its uid."""
        rows = await self.db.fetchall(
            "SELECT uid, uses FROM memories WHERE kind IN ('fact', 'profile') "
            "AND retired_at IS NULL"
        )
        return {str(r[0]): int(r[1] or 0) for r in rows}
