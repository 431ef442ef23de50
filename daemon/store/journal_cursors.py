"""Where the journal has read each trunk transcript to (`journal_cursors`).

A cursor only moves forward: the upsert keeps the larger offset of the stored one and the new
one, written per dialect (SQLite's two-argument `MAX`, PostgreSQL's `GREATEST`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database

_CURSOR = (
    "SELECT s.id, s.transcript_path, COALESCE(c.byte_offset, 0) FROM sessions s"
    " LEFT JOIN journal_cursors c ON c.session_id = s.id"
)
_ADVANCE = (
    "INSERT INTO journal_cursors(session_id, byte_offset, entry_id, updated_at) VALUES (?,?,?,?)"
    " ON CONFLICT(session_id) DO UPDATE SET byte_offset = {larger}(journal_cursors.byte_offset,"
    " excluded.byte_offset), entry_id = COALESCE(excluded.entry_id, journal_cursors.entry_id),"
    " updated_at = excluded.updated_at"
)
_ADVANCE_SQLITE = _ADVANCE.format(larger="MAX")
_ADVANCE_POSTGRES = _ADVANCE.format(larger="GREATEST")


@dataclass(frozen=True, kw_only=True)
class Cursor:
    """A trunk session's transcript and how far the journal has read it (bytes)."""

    session_id: str
    transcript_path: str
    offset: int


class JournalCursorsRepo:
    """The `journal_cursors` table, read beside the trunk sessions it follows."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def trunk_sessions(self, *, ended_since: datetime) -> list[Cursor]:
        """Trunk sessions still open or ended at `ended_since` or later, oldest first."""
        rows = await self.db.fetchall(
            f"{_CURSOR} WHERE s.kind = 'trunk' AND (s.ended_at IS NULL OR s.ended_at >= ?)"
            " ORDER BY s.started_at",
            (ended_since.isoformat(),),
        )
        return [Cursor(session_id=i, transcript_path=p, offset=int(o)) for i, p, o in rows]

    async def trunk_session(self, session_id: str) -> Cursor | None:
        """The trunk session's cursor (offset 0 before any entry); None for another kind."""
        row = await self.db.fetchone(
            f"{_CURSOR} WHERE s.id = ? AND s.kind = 'trunk'", (session_id,)
        )
        return (
            Cursor(session_id=row[0], transcript_path=row[1], offset=int(row[2])) if row else None
        )

    async def offset(self, session_id: str) -> int | None:
        """The stored offset (None: no entry yet)."""
        row = await self.db.fetchone(
            "SELECT byte_offset FROM journal_cursors WHERE session_id = ?", (session_id,)
        )
        return int(row[0]) if row is not None else None

    async def advance(
        self, session_id: str, offset: int, *, entry_id: str | None, at: datetime
    ) -> None:
        """Move the cursor to `offset` unless it is already further; keep the last entry's id
        when this move names none."""
        sql = _ADVANCE_POSTGRES if self.db.is_postgres else _ADVANCE_SQLITE
        await self.db.execute(sql, (session_id, offset, entry_id, at.isoformat()))
