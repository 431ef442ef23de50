"""Session summaries in the sessions index: which sessions wait for one, and the mark a summary leaves.

What a summary says and how it is written is `daemon.memory.summariser`; the summary file is
the truth, and `sessions` keeps where it is, when it was made and how many of the session's
messages it covers (`summarised_upto`), so a session is summarised again only once it has
grown past what its summary covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class SummaryState:
    """A session as a summary reads it."""

    kind: str
    transcript_path: str
    started_at: str
    summary_path: str | None
    summarised_upto: int


@dataclass(frozen=True, kw_only=True)
class DialogueRow:
    """One message of the person or the agent, in the session's order."""

    seq: int
    msg_id: str
    ts: str
    role: str  # user | assistant
    speaker: str  # '' when none was recorded
    content: str


class SummariesRepo:
    """The summary columns of `sessions`, and the messages a summary is written from."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def unsummarised(self) -> list[str]:
        """Trunk and fork sessions with more messages than their summary covers, oldest first."""
        rows = await self.db.fetchall(
            "SELECT s.id FROM sessions s WHERE s.kind IN ('trunk', 'fork') AND "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) > s.summarised_upto "
            "ORDER BY s.started_at"
        )
        return [str(r[0]) for r in rows]

    async def state(self, session_id: str) -> SummaryState | None:
        row = await self.db.fetchone(
            "SELECT kind, transcript_path, started_at, summary_path, summarised_upto "
            "FROM sessions WHERE id = ?",
            (session_id,),
        )
        if row is None:
            return None
        return SummaryState(
            kind=str(row[0]),
            transcript_path=str(row[1]),
            started_at=str(row[2]),
            summary_path=str(row[3]) if row[3] else None,
            summarised_upto=int(row[4] or 0),
        )

    async def dialogue(self, session_id: str) -> list[DialogueRow]:
        """The session's messages of the person and the agent (no tool results), in order."""
        rows = await self.db.fetchall(
            "SELECT seq, msg_id, ts, role, COALESCE(speaker, ''), content FROM messages "
            "WHERE session_id = ? AND role IN ('user', 'assistant') ORDER BY seq",
            (session_id,),
        )
        return [
            DialogueRow(
                seq=int(r[0]),
                msg_id=str(r[1]),
                ts=str(r[2]),
                role=str(r[3]),
                speaker=str(r[4]),
                content=str(r[5]),
            )
            for r in rows
        ]

    async def summarised(
        self, session_id: str, *, path: str, at: str, upto: int, title: str | None
    ) -> None:
        """Mark the session summarised by the file `path` at `at`, covering `upto` messages; a
        session with no title yet takes `title`."""
        await self.db.execute(
            "UPDATE sessions SET summary_path = ?, summarised_at = ?, summarised_upto = ?, "
            "title = COALESCE(title, ?) WHERE id = ?",
            (path, at, upto, title, session_id),
        )

    async def restored(self, session_id: str, *, path: str, at: str, covered: int) -> None:
        """After a reindex: the session's summary file found again. Its time is kept when one
        is recorded, and what it covers never goes back."""
        await self.db.execute(
            "UPDATE sessions SET summary_path = ?, summarised_at = COALESCE(summarised_at, ?), "
            "summarised_upto = MAX(summarised_upto, ?) WHERE id = ?",
            (path, at, covered, session_id),
        )

    async def kinds(self) -> dict[str, str]:
        """Every session's kind, by id."""
        rows = await self.db.fetchall("SELECT id, kind FROM sessions")
        return {str(r[0]): str(r[1]) for r in rows}
