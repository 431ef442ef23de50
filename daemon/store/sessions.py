"""The sessions index (`sessions`, `messages`): what the daemon reads about one session.

The reads the greeting, status and recall need have moved here; the trunk's and the importer's
writes still live with them (issue 36, `tests/test_architecture.py`'s list).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database


class SessionsRepo:
    """Reads of the `sessions` and `messages` tables."""

    def __init__(self, db: Database) -> None:
        self.db = db

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
