"""What memory search reads of the `memories` table: texts, whole rows and row ids.

Search ranks by row id (the matrix's and the lexical index's key) and reads the rows it keeps
here; the writes to the table are the index's (`daemon.memory.writer`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class MemoryText:
    """A memory's title and text, by row id."""

    rowid: int
    uid: str
    title: str
    text: str


@dataclass(frozen=True, kw_only=True)
class MemoryParts:
    """A memory's row id and the messages it was cut from."""

    rowid: int
    uid: str
    message_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class StoredMemory:
    """One `memories` row as stored (times ISO text, tags space-separated, meta JSON text)."""

    rowid: int
    uid: str
    kind: str
    text: str
    title: str
    tags: str
    importance: float
    origin: str
    created_at: str
    valid_from: str | None
    retired_at: str | None
    supersedes: str | None
    superseded_by: str | None
    session_id: str | None
    message_ids: tuple[str, ...]
    source: str
    explicit: bool
    meta: str
    # How it has been used (migration 0014): a read-only view of an older home has none.
    last_used: str | None = None
    uses: int = 0
    confirmed_at: str | None = None


def _stored(row: Any) -> StoredMemory:
    names = set(row.keys())
    return StoredMemory(
        rowid=int(row["rid"]),
        uid=row["uid"],
        kind=row["kind"],
        text=row["text"],
        title=row["title"] or "",
        tags=row["tags"] or "",
        importance=float(row["importance"]),
        origin=row["origin"],
        created_at=row["created_at"],
        valid_from=row["valid_from"],
        retired_at=row["retired_at"],
        supersedes=row["supersedes"],
        superseded_by=row["superseded_by"],
        session_id=row["session_id"],
        message_ids=tuple(json.loads(row["message_ids"] or "[]")),
        source=row["source"] or "",
        explicit=bool(row["explicit"]),
        meta=row["meta"] or "{}",
        last_used=row["last_used"] if "last_used" in names else None,
        uses=int(row["uses"] or 0) if "uses" in names else 0,
        confirmed_at=row["confirmed_at"] if "confirmed_at" in names else None,
    )


class MemoryReads:
    """Reads of `memories` by row id or uid, for search (retired rows included: the caller's
    ranking already chose which rows it wants)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def texts(self, rowids: Collection[int]) -> list[MemoryText]:
        """Title and text of each of `rowids` that exists (in no particular order)."""
        rows = await self.db.fetch_in(
            "SELECT rowid, uid, title, text FROM memories WHERE rowid IN ({})", list(rowids)
        )
        return [
            MemoryText(rowid=int(r[0]), uid=r[1], title=r[2] or "", text=r[3] or "") for r in rows
        ]

    async def rows(self, rowids: Sequence[int]) -> dict[int, StoredMemory]:
        """The whole rows of `rowids` that exist, by row id."""
        rows = await self.db.fetch_in(
            "SELECT rowid AS rid, * FROM memories WHERE rowid IN ({})", list(rowids)
        )
        return {int(r["rid"]): _stored(r) for r in rows}

    async def rowid(self, uid: str) -> int | None:
        """The row id of memory `uid` (None: no such memory)."""
        row = await self.db.fetchone("SELECT rowid FROM memories WHERE uid = ?", (uid,))
        return int(row[0]) if row else None

    async def parts(self, uids: Collection[str]) -> dict[str, MemoryParts]:
        """Row id and message ids of each of `uids` that exists, by uid."""
        rows = await self.db.fetch_in(
            "SELECT rowid, uid, message_ids FROM memories WHERE uid IN ({})", sorted(uids)
        )
        return {
            r[1]: MemoryParts(
                rowid=int(r[0]), uid=r[1], message_ids=tuple(json.loads(r[2] or "[]"))
            )
            for r in rows
        }

    async def texts_of(self, uids: Collection[str]) -> dict[str, MemoryText]:
        """Title and text of each of `uids` that exists, by uid."""
        rows = await self.db.fetch_in(
            "SELECT rowid, uid, title, text FROM memories WHERE uid IN ({})", sorted(uids)
        )
        return {
            r[1]: MemoryText(rowid=int(r[0]), uid=r[1], title=r[2] or "", text=r[3] or "")
            for r in rows
        }
