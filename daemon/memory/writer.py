"""Writes to the `memories` table: insert or replace, retire, restore, clear; and reads by id.

Every write is one transaction that stamps its rows with the next `memory.generation` (kv),
so a reader (the search's matrix, another process) notices the change with one point lookup;
the rows and their SQL are `daemon.store.memories`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from daemon.memory.api import MemoryItem
from daemon.memory.lexical import LexicalSearcher
from daemon.memory.rows import NewMemory, content_hash, iso, row_to_item
from daemon.store.db import Database
from daemon.store.memories import (
    MemoriesRepo,
    MemoryRow,
    MemoryWrite,
    Supersession,
)


def _item(row: MemoryRow) -> MemoryItem:
    return row_to_item(vars(row))


def _written(it: NewMemory) -> MemoryWrite:
    if not it.text.strip():
        raise ValueError(f"memory {it.uid!r} has empty text")
    return MemoryWrite(
        uid=it.uid,
        kind=it.kind,
        text=it.text,
        title=it.title,
        tags=" ".join(it.tags),
        importance=float(it.importance),
        origin=it.origin,
        created_at=iso(it.created_at),
        valid_from=iso(it.valid_from) if it.valid_from else None,
        supersedes=it.supersedes,
        session_id=it.session_id,
        message_ids=json.dumps(list(it.message_ids)),
        source=it.source,
        content_hash=content_hash(it.title, it.text),
        explicit=bool(it.explicit),
        meta=json.dumps(it.meta, sort_keys=True, default=str),
    )


class MemoryWriter:
    """Own the rows of `memories`; `written` is called after each upsert (vectors to embed)."""

    def __init__(self, db: Database, lexical: LexicalSearcher, written: Callable[[], None]) -> None:
        self.db = db
        self.rows = MemoriesRepo(db)
        self.lexical = lexical
        self.written = written

    async def upsert(self, items: Sequence[NewMemory]) -> None:
        """Insert or replace memories by uid (idempotent); vectors follow in the background.

        An item with `supersedes` retires the memory it corrects (and links both ways).
        The write is one transaction: cancelled before it starts, nothing is written.
        """
        if not items:
            return
        rows = [_written(it) for it in items]
        supersessions = [
            Supersession(it.supersedes, it.uid, iso(it.valid_from or it.created_at))
            for it in items
            if it.supersedes
        ]
        await self.rows.upsert(rows, supersessions)
        self.written()

    async def retire(self, uid: str, *, at: datetime, superseded_by: str | None = None) -> None:
        """Mark a memory retired (kept, never deleted); unknown uids raise KeyError."""
        if not await self.rows.retire(uid, at=iso(at), superseded_by=superseded_by):
            raise KeyError(f"no memory with id {uid!r}")

    async def restore(self, uid: str) -> None:
        """Make a retired (not superseded) memory active again; unknown uids raise KeyError."""
        if not await self.rows.restore(uid):
            raise KeyError(f"no active-able memory with id {uid!r}")

    async def clear(self) -> None:
        """Drop all memories and chunk marks (reindex); cached embeddings are kept for reuse."""
        await self.rows.clear(within=self.lexical.forget)

    async def get(self, uid: str) -> MemoryItem | None:
        row = await self.rows.get(uid)
        return _item(row) if row else None

    async def recent(
        self, kinds: Collection[str], limit: int, *, include_retired: bool = False
    ) -> list[MemoryItem]:
        """Return the newest memories of `kinds` (by valid time), newest first."""
        rows = await self.rows.recent(kinds, limit, include_retired=include_retired)
        return [_item(r) for r in rows]

    async def history(self, uid: str) -> list[MemoryItem]:
        """Return the supersession chain through `uid`, oldest first (empty when unknown)."""
        start = await self.get(uid)
        if start is None:
            return []
        chain = [start]
        seen = {uid}
        cur = start
        while (prev := cur.meta.get("supersedes")) and prev not in seen:
            item = await self.get(str(prev))
            if item is None:
                break
            chain.insert(0, item)
            seen.add(item.id)
            cur = item
        cur = start
        while (nxt := cur.meta.get("superseded_by")) and nxt not in seen:
            item = await self.get(str(nxt))
            if item is None:
                break
            chain.append(item)
            seen.add(item.id)
            cur = item
        return chain
