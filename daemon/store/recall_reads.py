"""What recall reads besides its searches: the changed facts, the generation, sessions.

The fact store's changes (superseded facts, and facts whose statement named the value they
replaced) are found here for the correction marks and the "since changed" labels; the recall
tool reads a session's messages and its summary's path here. The writes are the index's and
the session store's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database

# Facts that were superseded or supersede another (the correction chain).
_SUPERSEDED = (
    "SELECT rowid FROM memories WHERE kind IN ('fact', 'profile') "
    "AND (superseded_by IS NOT NULL OR supersedes IS NOT NULL) ORDER BY rowid"
)
# The same, and the facts whose statement named the value they replaced (meta "replaced").
_CHANGED = (
    "SELECT rowid FROM memories WHERE kind IN ('fact', 'profile') "
    "AND (superseded_by IS NOT NULL OR supersedes IS NOT NULL "
    "OR lower(meta) LIKE '%\"replaced\"%') "
    "ORDER BY rowid"
)


@dataclass(frozen=True, kw_only=True)
class SessionRef:
    """A session as recall cites it."""

    id: str
    summary_path: str | None
    started_at: str


@dataclass(frozen=True, kw_only=True)
class SessionMessage:
    """One message of a session's transcript, in order."""

    seq: int
    msg_id: str
    ts: str
    role: str
    content: str


class RecallReads:
    """Reads of `memories`, `kv`, `sessions` and `messages` for recall (automatic and the tool)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def superseded_rowids(self) -> list[int]:
        """The row ids of the facts in a chain of corrections (superseded by another, or
        superseding one), in the order they were written (their rows: `MemoryReads.rows`)."""
        return [int(r[0]) for r in await self.db.fetchall(_SUPERSEDED)]

    async def changed_rowids(self) -> list[int]:
        """`superseded_rowids` and the facts whose statement named the value they replaced."""
        return [int(r[0]) for r in await self.db.fetchall(_CHANGED)]

    async def generation(self) -> int:
        """The memory index's write generation (0 before the first write)."""
        row = await self.db.fetchone("SELECT value FROM kv WHERE key = 'memory.generation'")
        return int(row[0]) if row else 0

    async def has_memories(self) -> bool:
        """Whether the store has a `memories` table (a bare home may not yet)."""
        row = await self.db.fetchone(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memories'"
        )
        return row is not None

    async def summary_path(self, session_id: str) -> str | None:
        """The path of the session's summary file (None when unknown or not summarised)."""
        row = await self.db.fetchone(
            "SELECT summary_path FROM sessions WHERE id = ?", (session_id,)
        )
        return str(row[0]) if row and row[0] else None

    async def find_session(self, ref: str, name: str) -> SessionRef | None:
        """The session whose id is `ref` or `name` (without "session-"), or whose summary file is
        named `name`.md; None when none is."""
        row = await self.db.fetchone(
            "SELECT id, summary_path, started_at FROM sessions "
            "WHERE id = ? OR id = ? OR lower(summary_path) LIKE lower(?) LIMIT 1",
            (ref, name.removeprefix("session-"), f"%/{name}.md"),
        )
        if row is None:
            return None
        return SessionRef(id=str(row[0]), summary_path=row[1], started_at=str(row[2]))

    async def messages(self, session_id: str) -> list[SessionMessage]:
        """The session's messages in order."""
        rows = await self.db.fetchall(
            "SELECT seq, msg_id, ts, role, content FROM messages WHERE session_id = ? ORDER BY seq",
            (session_id,),
        )
        return [
            SessionMessage(
                seq=int(r[0]), msg_id=str(r[1]), ts=str(r[2]), role=str(r[3]), content=str(r[4])
            )
            for r in rows
        ]

    async def message_count(self, session_id: str) -> int:
        """How many messages the session has."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)
        )
        return int(row[0]) if row else 0
