"""Reading the text of memories in the order they were written, for what is derived from it
outside the search index (the store's vocabulary, `daemon.memory.related`)."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.store.db import Database


@dataclass(frozen=True)
class MemoryText:
    rowid: int
    text: str


async def texts_after(db: Database, rowid: int, limit: int) -> list[MemoryText]:
    """Up to `limit` memories written after `rowid` (retired ones too), oldest first."""
    rows = await db.fetchall(
        "SELECT rowid, title, text FROM memories WHERE rowid > ? ORDER BY rowid LIMIT ?",
        (rowid, limit),
    )
    return [
        MemoryText(rowid=int(r["rowid"]), text=f"{r['title']}\n{r['text']}".strip()) for r in rows
    ]
