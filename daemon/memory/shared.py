"""Shared facts: what the person marks as shared, read by every agent on one PostgreSQL store.

Each agent's memories live in its own schema and no query of it reaches another's. The
`shared` schema holds one table, `shared.facts`: what the person told one agent to share
(`reverie remember --shared`), facts about themselves or their household or team. Every
agent copies those facts into its own index (uid `shared:<id>`, tagged `shared`) before it
searches, so search, recall and the context read them as any fact, and nothing but the shared
table is ever read across agents. The copy is incremental (a version sequence stamps every
change) and starts again from nothing after a reindex, whose new epoch it notices.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemon.log import get_logger
from daemon.memory.rows import NewMemory, iso, parse_iso

if TYPE_CHECKING:
    from daemon.memory.index import MemoryIndex
    from daemon.store.db import Database

log = get_logger("memory.shared")

# How often (at most) an agent looks for facts other agents shared, in seconds.
SYNC_EVERY_S = 2.0
_SYNCED_KEY = "memory.shared_synced"


class SharingUnavailable(ValueError):
    """Sharing asked of a store that has no shared namespace (SQLite)."""


def shared_uid(fact_id: int) -> str:
    return f"shared:{fact_id}"


async def share_fact(
    index: MemoryIndex, text: str, *, origin: str = "person", tags: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Write a fact to the shared namespace and into this agent's index; return what was stored."""
    db = index.db
    if not db.is_postgres:
        raise SharingUnavailable(
            "--shared needs the store on PostgreSQL ([storage] url): a SQLite store is one agent's"
        )
    text = " ".join(text.split())
    if not text:
        raise ValueError("remember --shared needs TEXT")
    now = iso(datetime.now(UTC))
    fact_id = await db.execute(
        "INSERT INTO shared.facts(text, tags, origin, author, created_at, version) "
        "VALUES (?, ?, ?, ?, ?, nextval('shared.facts_version'))",
        (text, " ".join(tags), origin, db.schema, now),
    )
    await SharedFacts(index).sync(force=True)
    uid = shared_uid(fact_id)
    return {
        "status": "stored",
        "id": uid,
        "text": text,
        "message": f"shared {uid}: every agent on this store reads it",
    }


class SharedFacts:
    """Copy the shared namespace's facts into one agent's index (PostgreSQL only)."""

    def __init__(self, index: MemoryIndex) -> None:
        self.index = index
        self._last = 0.0

    async def sync(self, *, force: bool = False) -> int:
        """Copy facts shared or retired since the last sync; return how many changed here.

        Rate-limited to one look every `SYNC_EVERY_S` unless forced; a read-only store is
        never written.
        """
        db: Database = self.index.db
        if not db.is_postgres or db.readonly:
            return 0
        now = time.monotonic()
        if not force and now - self._last < SYNC_EVERY_S:
            return 0
        self._last = now
        epoch_row = await db.fetchone("SELECT value FROM kv WHERE key = 'memory.epoch'")
        epoch = epoch_row[0] if epoch_row else "0"
        mark = await db.fetchone("SELECT value FROM kv WHERE key = ?", (_SYNCED_KEY,))
        seen_epoch, _, seen = (mark[0] if mark else "").partition(":")
        since = int(seen) if seen_epoch == epoch and seen.isdigit() else 0
        rows = await db.fetchall(
            "SELECT id, text, tags, origin, author, created_at, retired_at, version "
            "FROM shared.facts WHERE version > ? ORDER BY version",
            (since,),
        )
        if not rows:
            return 0
        fresh = [
            NewMemory(
                uid=shared_uid(r["id"]),
                kind="fact",
                text=r["text"],
                origin="person" if r["origin"] == "person" else "agent",
                created_at=parse_iso(r["created_at"]) or datetime.now(UTC),
                tags=(*(t for t in r["tags"].split() if t), "shared"),
                explicit=True,
                source="shared",
                meta={"shared": True, "author": r["author"]},
            )
            for r in rows
        ]
        await self.index.upsert(fresh)
        for r in rows:
            if r["retired_at"]:
                await self.index.retire(
                    shared_uid(r["id"]), at=parse_iso(r["retired_at"]) or datetime.now(UTC)
                )
        await db.execute(
            "INSERT INTO kv(key, value, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            (_SYNCED_KEY, f"{epoch}:{rows[-1]['version']}", iso(datetime.now(UTC))),
        )
        log.info("shared facts copied", facts=len(rows), schema=db.schema)
        return len(rows)
