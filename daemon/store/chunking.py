"""What chunking reads and marks: a session's messages, and how far they are chunked.

`memory_chunked` holds, per session, the last message seq cut into chunk memories; the
messages and the session are read from the sessions index. What a chunk is, and the writes
of the chunks themselves, are the memory system's (`daemon.memory.chunks`, the index).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class ChunkedSession:
    """What chunking needs of a session."""

    id: str
    kind: str  # trunk | fork | imported
    transcript_path: str
    title: str | None


@dataclass(frozen=True, kw_only=True)
class SessionMessage:
    """One indexed message of a session."""

    msg_id: str
    seq: int
    ts: str  # ISO time, as stored
    role: str  # user | assistant | tool
    speaker: str | None
    content: str


class ChunkingRepo:
    """The `memory_chunked` marks, and the reads of `sessions` and `messages` chunking does."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def session(self, session_id: str) -> ChunkedSession | None:
        row = await self.db.fetchone(
            "SELECT kind, transcript_path, title FROM sessions WHERE id = ?", (session_id,)
        )
        if row is None:
            return None
        return ChunkedSession(
            id=session_id, kind=row[0], transcript_path=row[1] or "", title=row[2]
        )

    async def chunked_upto(self, session_id: str) -> int | None:
        """The last message seq of the session already chunked (None: none yet)."""
        row = await self.db.fetchone(
            "SELECT upto_seq FROM memory_chunked WHERE session_id = ?", (session_id,)
        )
        return int(row[0]) if row else None

    async def mark_chunked(self, session_id: str, upto_seq: int) -> None:
        """The session's messages up to `upto_seq` are chunked."""
        await self.db.execute(
            "INSERT INTO memory_chunked(session_id, upto_seq) VALUES (?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET upto_seq = excluded.upto_seq",
            (session_id, upto_seq),
        )

    async def seqs(self, session_id: str) -> list[int]:
        """The seqs of the session's indexed messages, in order."""
        rows = await self.db.fetchall(
            "SELECT seq FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return [int(r[0]) for r in rows]

    async def messages_from(self, session_id: str, seq: int) -> list[SessionMessage]:
        """The session's messages from `seq` on, in order."""
        rows = await self.db.fetchall(
            "SELECT msg_id, seq, ts, role, speaker, content FROM messages "
            "WHERE session_id = ? AND seq >= ? ORDER BY seq",
            (session_id, seq),
        )
        return [
            SessionMessage(
                msg_id=r[0], seq=int(r[1]), ts=r[2], role=r[3], speaker=r[4], content=r[5]
            )
            for r in rows
        ]

    async def existing(self, uids: Sequence[str]) -> int:
        """How many of `uids` are memories in the index already."""
        rows = await self.db.fetch_in("SELECT uid FROM memories WHERE uid IN ({})", list(uids))
        return len(rows)
