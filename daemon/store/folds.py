"""The month folds (`memory_folds`): which day-level memories sleep folded into which month.

What a fold is, and the month files, are `daemon.memory.months` and sleep maintenance's; this
module reads the memories a fold may take and keeps the links.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.store.transactions import begin_write

if TYPE_CHECKING:
    from daemon.store.db import Database

_COLUMNS = "uid, kind, title, text, origin, created_at, session_id, source"

# Summaries, and chunks of sessions that never got a summary, not folded yet, still current.
_FOLDABLE = f"""
SELECT {_COLUMNS} FROM memories m
WHERE m.created_at < :cutoff AND m.retired_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM memory_folds f WHERE f.source_uid = m.uid)
  AND (m.kind = 'summary' OR (m.kind = 'chunk' AND m.session_id NOT IN (
        SELECT session_id FROM memories WHERE kind = 'summary' AND session_id IS NOT NULL)))
ORDER BY m.created_at, m.uid
"""


@dataclass(frozen=True, kw_only=True)
class FoldRow:
    """A memory as a month fold reads it (`created_at` ISO text, as stored)."""

    uid: str
    kind: str
    title: str
    text: str
    origin: str
    created_at: str
    session_id: str | None
    source: str


@dataclass(frozen=True)
class FoldLink:
    """Memory `source_uid` is folded into month memory `month_uid` (at `folded_at`, ISO)."""

    source_uid: str
    month_uid: str
    folded_at: str


def _row(r: Any) -> FoldRow:
    return FoldRow(
        uid=r[0],
        kind=r[1],
        title=r[2] or "",
        text=r[3],
        origin=r[4],
        created_at=r[5],
        session_id=r[6],
        source=r[7] or "",
    )


def _link(conn: Any, links: Sequence[FoldLink]) -> None:
    begin_write(conn)
    try:
        conn.executemany(
            "INSERT INTO memory_folds(source_uid, month_uid, folded_at) VALUES (?,?,?)"
            " ON CONFLICT DO NOTHING",
            [(k.source_uid, k.month_uid, k.folded_at) for k in links],
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class FoldsRepo:
    """`memory_folds`, and the reads of `memories` a fold makes."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def foldable(self, cutoff: str) -> list[FoldRow]:
        """Current summaries, and chunks of sessions with no summary, created before `cutoff`
        (ISO) and folded into no month yet; oldest first."""
        rows = await self.db.fetchall(_FOLDABLE, {"cutoff": cutoff})
        return [_row(r) for r in rows]

    async def folded_into(self, month_uid: str) -> list[str]:
        """The uids of the memories folded into month `month_uid`."""
        rows = await self.db.fetchall(
            "SELECT source_uid FROM memory_folds WHERE month_uid = ?", (month_uid,)
        )
        return [r[0] for r in rows]

    async def memories(self, uids: Sequence[str]) -> list[FoldRow]:
        """The memories `uids` that exist, retired or not."""
        rows = await self.db.fetch_in(
            f"SELECT {_COLUMNS} FROM memories WHERE uid IN ({{}})", list(uids)
        )
        return [_row(r) for r in rows]

    async def is_retired(self, uid: str) -> bool:
        """Whether memory `uid` exists and is retired."""
        row = await self.db.fetchone("SELECT retired_at FROM memories WHERE uid = ?", (uid,))
        return row is not None and row[0] is not None

    async def link(self, links: Sequence[FoldLink]) -> None:
        """Record `links` all in one transaction (a link already recorded is kept as it was)."""
        if links:
            await self.db.run(_link, list(links))
