"""The index rows of explicit facts (`memories` of kind `fact` and `profile`).

What a fact is and how it changes is `daemon.memory.facts` (the log is the truth); this
module holds the statements that touch a fact's row beyond the memory index's own writes
(`daemon.store.memories`): a fact said again, and how often each fact was recalled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class FactUse:
    """How often a fact was shown by recall (automatic or asked), and when last."""

    uid: str
    uses: int
    last_used: str | None  # ISO time, as stored; None: never


class FactsRepo:
    """Statements on the `memories` rows of explicit facts."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def confirm(self, uid: str, at: datetime) -> None:
        """Note that fact `uid` was said again at `at`: `confirmed_at` only moves forward."""
        when = _iso(at)
        await self.db.execute(
            "UPDATE memories SET confirmed_at = ? WHERE uid = ? "
            "AND (confirmed_at IS NULL OR confirmed_at < ?)",
            (when, uid, when),
        )

    async def uses(self) -> list[FactUse]:
        """Every fact's recall count and last use (on a database from before uses were counted
        the columns are missing and this raises the database's error)."""
        rows = await self.db.fetchall(
            "SELECT uid, uses, last_used FROM memories WHERE kind IN ('fact', 'profile')"
        )
        return [
            FactUse(
                uid=str(r[0]), uses=int(r[1] or 0), last_used=None if r[2] is None else str(r[2])
            )
            for r in rows
        ]


def _iso(when: datetime) -> str:
    """A time the way the index stores it (UTC, microseconds: `daemon.memory.rows.iso`), so
    stored times compare as strings."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat(timespec="microseconds")
