"""The sessions index (`sessions`, `messages`): what the daemon reads and writes about one
session.

A session's own writes (its row, its messages indexed from the transcript, the trunk's switch
link and end) and the reads the greeting, status and recall need live here; the importer's
writes still live with it (issue 36, `tests/test_architecture.py`'s list). The transcript is
the truth: every row here can be rebuilt from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class IndexedMessage:
    """A transcript message as the `messages` index holds it."""

    session_id: str
    msg_id: str
    seq: int  # its place in the session, from 1
    ts: str
    role: str  # user | assistant
    speaker: str | None
    content: str
    turn_id: str | None


class SessionsRepo:
    """The `sessions` and `messages` tables."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(
        self,
        session_id: str,
        *,
        kind: str,
        parent_id: str | None,
        transcript_path: str,
        started_at: str,
    ) -> None:
        """Index a session opened (a session already indexed keeps its row as it is)."""
        await self.db.execute(
            "INSERT INTO sessions(id, kind, parent_id, transcript_path, started_at)"
            " VALUES (?,?,?,?,?) ON CONFLICT(id) DO NOTHING",
            (session_id, kind, parent_id, transcript_path, started_at),
        )

    async def reopen(self, session_id: str) -> None:
        """Mark the session live again (its end cleared): the trunk resumed after a restart."""
        await self.db.execute("UPDATE sessions SET ended_at = NULL WHERE id = ?", (session_id,))

    async def mark_ended(self, session_id: str, at: str) -> bool:
        """Record when the session ended; False when the PostgreSQL server was away and the
        write was queued in the home (daemon.store.outage)."""
        return await self.db.write(
            "UPDATE sessions SET ended_at = ? WHERE id = ?", (at, session_id)
        )

    async def link_previous(self, session_id: str, *, previous_id: str, reason: str) -> None:
        """Record that `session_id` continues `previous_id`, switched to for `reason`."""
        await self.db.execute(
            "UPDATE sessions SET previous_id = ?, switch_reason = ? WHERE id = ?",
            (previous_id, reason, session_id),
        )

    async def last_seq(self, session_id: str) -> int:
        """The highest place of the session's indexed messages (0: none indexed)."""
        row = await self.db.fetchone(
            "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
        )
        return int(row[0]) if row else 0

    async def message_ids(self, session_id: str) -> set[str]:
        """The transcript ids of the session's indexed messages."""
        rows = await self.db.fetchall(
            "SELECT msg_id FROM messages WHERE session_id = ?", (session_id,)
        )
        return {str(r[0]) for r in rows}

    async def index_message(self, message: IndexedMessage) -> bool:
        """Index one message (a message already indexed keeps its row); False when the
        PostgreSQL server was away and the row was queued in the home, applied when it is back
        (the transcript, written first, holds the message either way)."""
        return await self.db.write(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, speaker, content, turn_id)"
            " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(session_id, msg_id) DO NOTHING",
            (
                message.session_id,
                message.msg_id,
                message.seq,
                message.ts,
                message.role,
                message.speaker,
                message.content,
                message.turn_id,
            ),
            session=message.session_id,
        )

    async def summary_path(self, session_id: str) -> str | None:
        """The session's summary file, once it has one (None: none yet, or no such session)."""
        row = await self.db.fetchone(
            "SELECT summary_path FROM sessions WHERE id = ?", (session_id,)
        )
        return str(row[0]) if row and row[0] else None

    async def last_message_ts(self, session_id: str) -> str | None:
        """When the session's last indexed message was written, as stored (None: none)."""
        row = await self.db.fetchone(
            "SELECT ts FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (session_id,)
        )
        return str(row[0]) if row is not None else None

    async def message_count(self, session_id: str) -> int:
        """How many of the session's messages are indexed."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)
        )
        return int(row[0]) if row else 0

    async def person_message(self, session_id: str, msg_id: str) -> str | None:
        """The text of the person's message `msg_id` in the session (None: no such message of
        theirs — an assistant's message is never returned)."""
        row = await self.db.fetchone(
            "SELECT content FROM messages WHERE session_id = ? AND msg_id = ? AND role = 'user'",
            (session_id, msg_id),
        )
        return str(row[0]) if row else None

    async def person_words(self, limit: int) -> list[PersonWord]:
        """The person's `limit` newest messages in trunk and imported sessions (a fork's
        brief is the agent's, never the person's), newest first, with their session's title
        and summary file."""
        rows = await self.db.fetchall(
            "SELECT m.ts, m.session_id, m.msg_id, m.content, s.title, s.summary_path"
            " FROM messages m JOIN sessions s ON s.id = m.session_id"
            " WHERE m.role = 'user' AND s.kind IN ('trunk', 'imported')"
            " ORDER BY m.ts DESC LIMIT ?",
            (limit,),
        )
        return [
            PersonWord(
                ts=str(r[0]),
                session_id=str(r[1]),
                msg_id=str(r[2]),
                content=str(r[3]),
                title=None if r[4] is None else str(r[4]),
                summary_path=None if r[5] is None else str(r[5]),
            )
            for r in rows
        ]


@dataclass(frozen=True, kw_only=True)
class PersonWord:
    """One message of the person's, as indexed, with its session's title and summary."""

    ts: str  # as stored (ISO 8601)
    session_id: str
    msg_id: str
    content: str
    title: str | None
    summary_path: str | None
