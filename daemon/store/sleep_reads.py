"""What the night reads from the memory index (`memories`): the dream's material and the chunks
written since a generation, for counting the sessions that mention a fact.

What the dream does with its material is `daemon.sleep.dreams`; how mentions are weighed is
`daemon.sleep.mentions`. This module only reads the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database

# Facts told since the last sleep; summaries of sessions active or summarised since; and for
# sessions with no summary yet (the trunk being put to sleep: wake-up summarises it after
# the dreams), their single-message chunks since.
_MATERIAL = """
SELECT uid, kind, title, text, origin, created_at FROM memories m
WHERE m.retired_at IS NULL AND (
    (m.kind IN ('fact', 'profile') AND (CAST(:since AS TEXT) IS NULL OR m.created_at >= :since))
 OR (m.kind = 'summary' AND (CAST(:since AS TEXT) IS NULL OR m.created_at >= :since
     OR m.session_id IN (SELECT session_id FROM memories WHERE kind = 'chunk' AND created_at >= :since)
     OR m.session_id IN (SELECT id FROM sessions WHERE summarised_at >= :since)))
 OR (m.kind = 'chunk' AND lower(m.uid) NOT LIKE '%-w' AND (CAST(:since AS TEXT) IS NULL OR m.created_at >= :since)
     AND m.session_id NOT IN (SELECT session_id FROM memories WHERE kind = 'summary' AND session_id IS NOT NULL)))
ORDER BY m.created_at DESC, m.uid DESC LIMIT :limit
"""


@dataclass(frozen=True, kw_only=True)
class MaterialRow:
    """A memory a dream may read."""

    uid: str
    kind: str
    title: str
    text: str
    origin: str
    created_at: str


@dataclass(frozen=True, kw_only=True)
class SessionChunk:
    """A live chunk's session and text."""

    session_id: str
    text: str


class SleepReads:
    """Reads of `memories` for the night's dreams and pin scoring."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def dream_material(self, since: str | None, *, limit: int = 400) -> list[MaterialRow]:
        """Newest first, at most `limit`: the live facts and profile lines made since `since`;
        the summaries made since, or of a session that has chunks since or was summarised
        since; and the single-message chunks since of sessions with no summary yet (all of
        them when `since` is None)."""
        rows = await self.db.fetchall(_MATERIAL, {"since": since, "limit": limit})
        return [
            MaterialRow(
                uid=str(r["uid"]),
                kind=str(r["kind"]),
                title=str(r["title"] or ""),
                text=str(r["text"]),
                origin=str(r["origin"]),
                created_at=str(r["created_at"]),
            )
            for r in rows
        ]

    async def top_version(self) -> int:
        """The index's newest generation (0: nothing indexed)."""
        row = await self.db.fetchone("SELECT coalesce(max(version), 0) FROM memories")
        return int(row[0]) if row else 0

    async def chunks_since(self, version: int) -> list[SessionChunk]:
        """The live chunks of a session written after generation `version`."""
        rows = await self.db.fetchall(
            "SELECT session_id, text FROM memories WHERE kind = 'chunk' AND retired_at IS NULL "
            "AND version > ? AND session_id IS NOT NULL",
            (version,),
        )
        return [SessionChunk(session_id=str(r[0]), text=str(r[1])) for r in rows]
