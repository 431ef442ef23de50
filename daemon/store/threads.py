"""The open threads (`threads`), and the messages the thread book reads them from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database

_COLUMNS = (
    "id, kind, text, session_id, opened_by, opened_at, due, status, resolved_at, resolved_by, note"
)


def _when(text: str) -> datetime:
    at = datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class Thread:
    """One open matter and where it came from."""

    id: str
    kind: str  # promise | question | plan
    text: str
    session_id: str
    opened_by: str  # the message that opened it
    opened_at: datetime
    due: date | None = None
    status: str = "open"  # open | resolved | expired
    resolved_at: datetime | None = None
    resolved_by: str | None = None
    note: str = ""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Thread:
        tid, kind, text, session, opened_by, opened_at, due, status, r_at, r_by, note = row
        return cls(
            id=str(tid),
            kind=str(kind),
            text=str(text),
            session_id=str(session),
            opened_by=str(opened_by),
            opened_at=_when(str(opened_at)),
            due=date.fromisoformat(str(due)) if due else None,
            status=str(status),
            resolved_at=_when(str(r_at)) if r_at else None,
            resolved_by=str(r_by) if r_by else None,
            note=str(note or ""),
        )

    def is_due(self, today: date) -> bool:
        """Whether it is due today or overdue."""
        return self.due is not None and self.due <= today


@dataclass(frozen=True, kw_only=True)
class Said:
    """One indexed message, as the thread book reads it."""

    msg_id: str
    ts: str
    role: str
    content: str

    @property
    def at(self) -> datetime:
        return _when(self.ts)


class ThreadsRepo:
    """The `threads` table, and the `messages` rows threads are opened and closed from."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def open_threads(self) -> list[Thread]:
        """Every open thread, oldest first (ties by id)."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM threads WHERE status = 'open' ORDER BY opened_at, id"
        )
        return [Thread.from_row(r) for r in rows]

    async def get(self, thread_id: str) -> Thread | None:
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM threads WHERE id = ?", (thread_id,))
        return Thread.from_row(row) if row else None

    async def add(self, thread: Thread) -> None:
        """Keep an open thread; the same message opening the same thread again is a no-op."""
        await self.db.execute(
            "INSERT INTO threads(id, kind, text, session_id, opened_by, opened_at, due, status)"
            " VALUES (?,?,?,?,?,?,?, 'open') ON CONFLICT(opened_by, kind, text) DO NOTHING",
            (
                thread.id,
                thread.kind,
                thread.text,
                thread.session_id,
                thread.opened_by,
                thread.opened_at.isoformat(),
                thread.due.isoformat() if thread.due else None,
            ),
        )

    async def close(
        self, thread_id: str, *, status: str, at: datetime, by: str | None, note: str
    ) -> bool:
        """Close an open thread as `status` (resolved | expired); False when it was not open."""
        row = await self.db.fetchone("SELECT status FROM threads WHERE id = ?", (thread_id,))
        if row is None or row[0] != "open":
            return False
        await self.db.execute(
            "UPDATE threads SET status = ?, resolved_at = ?, resolved_by = ?, note = ?"
            " WHERE id = ? AND status = 'open'",
            (status, at.isoformat(), by, note, thread_id),
        )
        return True

    async def turn_messages(self, session_id: str, turn_id: str) -> list[Said]:
        """A turn's messages (the person's and the agent's), in order."""
        rows = await self.db.fetchall(
            "SELECT msg_id, ts, role, content FROM messages"
            " WHERE session_id = ? AND turn_id = ? ORDER BY seq",
            (session_id, turn_id),
        )
        return [Said(msg_id=str(m), ts=str(t), role=str(r), content=str(c)) for m, t, r, c in rows]

    async def person_said_after(self, when: datetime) -> list[Said]:
        """The person's messages after `when`, in order."""
        rows = await self.db.fetchall(
            "SELECT msg_id, ts, content FROM messages WHERE role = 'user' AND ts > ?"
            " ORDER BY ts, seq",
            (when.isoformat(),),
        )
        return [Said(msg_id=str(m), ts=str(t), role="user", content=str(c)) for m, t, c in rows]
