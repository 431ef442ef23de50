"""Writes to the `memories` table: insert or replace, retire, restore, clear; and reads by id.

Every write is one transaction that stamps its rows with the next `memory.generation` (kv),
so a reader (the search's matrix, another process) notices the change with one point lookup.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from daemon.memory.api import MemoryItem
from daemon.memory.lexical import LexicalSearcher
from daemon.memory.rows import NewMemory, content_hash, iso, row_to_item
from daemon.store.db import Database

_COLUMNS = (
    "uid, kind, text, title, tags, importance, origin, created_at, valid_from, supersedes, "
    "session_id, message_ids, source, content_hash, explicit, meta, version"
)
_UPSERT = f"""
INSERT INTO memories({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(uid) DO UPDATE SET
  kind=excluded.kind, text=excluded.text, title=excluded.title, tags=excluded.tags,
  importance=excluded.importance, origin=excluded.origin, created_at=excluded.created_at,
  valid_from=excluded.valid_from, supersedes=excluded.supersedes, session_id=excluded.session_id,
  message_ids=excluded.message_ids, source=excluded.source, content_hash=excluded.content_hash,
  explicit=excluded.explicit, meta=excluded.meta, version=excluded.version
WHERE memories.content_hash IS NOT excluded.content_hash OR memories.kind IS NOT excluded.kind
  OR memories.tags IS NOT excluded.tags OR memories.importance IS NOT excluded.importance
  OR memories.origin IS NOT excluded.origin OR memories.created_at IS NOT excluded.created_at
  OR memories.valid_from IS NOT excluded.valid_from OR memories.supersedes IS NOT excluded.supersedes
  OR memories.session_id IS NOT excluded.session_id OR memories.message_ids IS NOT excluded.message_ids
  OR memories.source IS NOT excluded.source OR memories.explicit IS NOT excluded.explicit
  OR memories.meta IS NOT excluded.meta
"""


def next_generation(conn: Any) -> int:
    """Bump and return `memory.generation` (call inside the writer's transaction)."""
    row = conn.execute(
        "INSERT INTO kv(key, value, updated_at) VALUES ('memory.generation', '1', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1, updated_at = excluded.updated_at "
        "RETURNING value",
        (iso(datetime.now(UTC)),),
    ).fetchone()
    return int(row[0])


def write(conn: Any, fn: Any, *args: Any) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    try:
        out = fn(conn, *args)
        conn.execute("COMMIT")
        return out
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _upsert_sync(
    conn: Any, rows: list[tuple[Any, ...]], supersessions: list[tuple[str, str, str]]
) -> int:
    gen = next_generation(conn)
    conn.executemany(_UPSERT, [(*r, gen) for r in rows])
    for old, new, at in supersessions:
        conn.execute(
            "UPDATE memories SET superseded_by = ?, retired_at = coalesce(retired_at, ?), version = ? "
            "WHERE uid = ? AND superseded_by IS NOT ?",
            (new, at, gen, old, new),
        )
    return gen


class MemoryWriter:
    """Own the rows of `memories`; `written` is called after each upsert (vectors to embed)."""

    def __init__(self, db: Database, lexical: LexicalSearcher, written: Callable[[], None]) -> None:
        self.db = db
        self.lexical = lexical
        self.written = written

    async def upsert(self, items: Sequence[NewMemory]) -> None:
        """Insert or replace memories by uid (idempotent); vectors follow in the background.

        An item with `supersedes` retires the memory it corrects (and links both ways).
        The write is one transaction: cancelled before it starts, nothing is written.
        """
        if not items:
            return
        rows, supersessions = [], []
        for it in items:
            if not it.text.strip():
                raise ValueError(f"memory {it.uid!r} has empty text")
            rows.append(
                (
                    it.uid,
                    it.kind,
                    it.text,
                    it.title,
                    " ".join(it.tags),
                    float(it.importance),
                    it.origin,
                    iso(it.created_at),
                    iso(it.valid_from) if it.valid_from else None,
                    it.supersedes,
                    it.session_id,
                    json.dumps(list(it.message_ids)),
                    it.source,
                    content_hash(it.title, it.text),
                    int(it.explicit),
                    json.dumps(it.meta, sort_keys=True, default=str),
                )
            )
            if it.supersedes:
                supersessions.append((it.supersedes, it.uid, iso(it.valid_from or it.created_at)))
        await self.db.run(write, _upsert_sync, rows, supersessions)
        self.written()

    async def retire(self, uid: str, *, at: datetime, superseded_by: str | None = None) -> None:
        """Mark a memory retired (kept, never deleted); unknown uids raise KeyError."""

        def work(conn: Any) -> int:
            gen = next_generation(conn)
            return conn.execute(
                "UPDATE memories SET retired_at = coalesce(retired_at, ?), "
                "superseded_by = coalesce(?, superseded_by), version = ? WHERE uid = ?",
                (iso(at), superseded_by, gen, uid),
            ).rowcount

        if not await self.db.run(write, work):
            raise KeyError(f"no memory with id {uid!r}")

    async def restore(self, uid: str) -> None:
        """Make a retired (not superseded) memory active again; unknown uids raise KeyError."""

        def work(conn: Any) -> int:
            gen = next_generation(conn)
            return conn.execute(
                "UPDATE memories SET retired_at = NULL, version = ? WHERE uid = ? AND superseded_by IS NULL",
                (gen, uid),
            ).rowcount

        if not await self.db.run(write, work):
            raise KeyError(f"no active-able memory with id {uid!r}")

    async def clear(self) -> None:
        """Drop all memories and chunk marks (reindex); cached embeddings are kept for reuse."""

        def work(conn: Any) -> None:
            self.lexical.forget()
            conn.execute("DELETE FROM memories")
            conn.execute("DELETE FROM memory_chunked")
            conn.execute(
                "INSERT INTO kv(key, value, updated_at) VALUES ('memory.epoch', '1', ?) ON CONFLICT(key) "
                "DO UPDATE SET value = CAST(value AS INTEGER) + 1, updated_at = excluded.updated_at",
                (iso(datetime.now(UTC)),),
            )
            next_generation(conn)

        await self.db.run(write, work)

    async def get(self, uid: str) -> MemoryItem | None:
        row = await self.db.fetchone("SELECT * FROM memories WHERE uid = ?", (uid,))
        return row_to_item(row) if row else None

    async def recent(
        self, kinds: Collection[str], limit: int, *, include_retired: bool = False
    ) -> list[MemoryItem]:
        """Return the newest memories of `kinds` (by valid time), newest first."""
        if limit <= 0 or not kinds:
            return []
        retired = "" if include_retired else "AND retired_at IS NULL"
        # One indexed, LIMITed walk per kind (see migration 0003), merged here: an IN list
        # would make SQLite sort every row of those kinds.
        sql = (
            f"SELECT rowid AS rid, *, coalesce(valid_from, created_at) AS vt FROM memories WHERE kind = ? {retired} "
            "ORDER BY coalesce(valid_from, created_at) DESC, rowid DESC LIMIT ?"
        )

        def walk(conn: Any) -> list[Any]:
            rows: list[Any] = []
            for kind in dict.fromkeys(kinds):
                rows.extend(conn.execute(sql, (kind, limit)).fetchall())
            rows.sort(key=lambda r: (r["vt"], r["rid"]), reverse=True)
            return rows[:limit]

        return [row_to_item(r) for r in await self.db.run(walk)]

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
