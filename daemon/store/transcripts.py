"""Transcripts recorded into the sessions index: an imported (or rebuilt) session and its messages.

`daemon.memory.importer` reads and validates the transcript files; this module writes what they
hold into `sessions` and `messages`, one transaction per session, keyed by message id so a run
cut short and run again adds each message once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.store.memories import in_transaction

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class TranscriptMessage:
    """One message of a transcript, as the messages table keeps it."""

    msg_id: str
    ts: str  # ISO, UTC
    role: str
    content: str
    speaker: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class TranscriptSession:
    """The session a transcript's messages belong to."""

    session_id: str
    kind: str  # imported | trunk | fork ...
    transcript_path: str
    started_at: str
    # Only an imported session is ended by its transcript (a live one ends itself).
    ended_at: str | None = None
    parent_id: str | None = None


def _record(conn: Any, session: TranscriptSession, messages: Sequence[TranscriptMessage]) -> int:
    conn.execute(
        "INSERT INTO sessions(id, kind, parent_id, transcript_path, started_at, ended_at) "
        "VALUES (?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET "
        "started_at = min(sessions.started_at, excluded.started_at), "
        "ended_at = CASE WHEN sessions.kind = 'imported' "
        "THEN max(coalesce(sessions.ended_at, ''), excluded.ended_at) ELSE sessions.ended_at END",
        (
            session.session_id,
            session.kind,
            session.parent_id,
            session.transcript_path,
            session.started_at,
            session.ended_at,
        ),
    )
    have = {
        str(r[0])
        for r in conn.execute(
            "SELECT msg_id FROM messages WHERE session_id = ?", (session.session_id,)
        ).fetchall()
    }
    # Numbered from 1, as the live session numbers its messages: a rebuilt index keeps every
    # chunk id (`chunk:<session>:<seq>`) that summaries, folds and citations already name.
    seq = int(
        conn.execute(
            "SELECT coalesce(max(seq), 0) FROM messages WHERE session_id = ?",
            (session.session_id,),
        ).fetchone()[0]
    )
    added = 0
    for m in messages:
        if m.msg_id in have:
            continue
        seq += 1
        have.add(m.msg_id)
        conn.execute(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, speaker, content, turn_id) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (session.session_id, m.msg_id, seq, m.ts, m.role, m.speaker, m.content, m.turn_id),
        )
        added += 1
    return added


class TranscriptsRepo:
    """Writes of a transcript's session and messages into `sessions` and `messages`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def record(
        self, session: TranscriptSession, messages: Sequence[TranscriptMessage]
    ) -> int:
        """Add the session (if new; an imported one's span widened to take the messages) and
        the messages it does not hold yet, numbered after its last; return how many were added.
        One transaction: on any error nothing is written."""
        added: int = await self.db.run(in_transaction, _record, session, list(messages))
        return added
