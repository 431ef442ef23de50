"""What memory search reads of the `memories` table: texts, whole rows and row ids.

A whole row is the index's `MemoryRow` (`daemon.store.memories`), read the same way.

Search ranks by row id (the matrix's and the lexical index's key) and reads the rows it keeps
here; the writes to the table are the index's (`daemon.memory.writer`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemon.store.memories import MemoryRow, _memory_rows

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

    async def rows(self, rowids: Sequence[int]) -> dict[int, MemoryRow]:
        """The whole rows of `rowids` that exist, by row id."""
        rows = await self.db.fetch_in("SELECT * FROM memories WHERE rowid IN ({})", list(rowids))
        return {row.rowid: row for row in _memory_rows(rows)}

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
