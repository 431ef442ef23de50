"""Shared facts: what the person marks as shared, read by every agent on one PostgreSQL store.

Each agent's memories live in its own schema and no query of it reaches another's. The
`shared` schema holds one table, `shared.facts`: what the person told one agent to share
(`reverie remember --shared`), facts about themselves or their household or team. Every
agent copies those facts into its own index (uid `shared:<id>`, tagged `shared`) before it
searches, so search, recall and the context read them as any fact, and nothing but the shared
table is ever read across agents. The copy is incremental (a version sequence stamps every
change) and starts again from nothing after a reindex, whose new epoch it notices.

Shared facts are append-only, as an agent's own are: a retraction or correction by the person
(`reverie remember --retract/--correct shared:ID`) and the nightly shared maintenance
(`daemon.sleep.shared_upkeep`) retire a row — with when it stopped holding (`invalid_from`),
what replaced it (`superseded_by`), why, and which agent and cycle did it — and never delete
one. Each change takes a new version, so every agent's copy follows: a retired shared fact
leaves its index's current values and stays in its history.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.memory.rows import NewMemory, iso, parse_iso
from daemon.store.kv import KvRepo
from daemon.store.memories import MemoriesRepo
from daemon.store.shared_facts import SharedFactRetired, SharedFactRow, SharedFactsRepo

if TYPE_CHECKING:
    from daemon.memory.index import MemoryIndex
    from daemon.store.db import Database

log = get_logger("memory.shared")

# How often (at most) an agent looks for facts other agents shared, in seconds.
SYNC_EVERY_S = 2.0
_SYNCED_KEY = "memory.shared_synced"


class SharingUnavailable(ReverieError, ValueError):
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
    fact_id = await SharedFactsRepo(db).add(
        text, tags=" ".join(tags), origin=origin, author=db.schema, at=now
    )
    await SharedFacts(index).sync(force=True)
    uid = shared_uid(fact_id)
    return {
        "status": "stored",
        "id": uid,
        "text": text,
        "message": f"shared {uid}: every agent on this store reads it",
    }


def shared_id(uid: str) -> int | None:
    """The row id of a shared fact's uid (`shared:12` → 12); None for any other uid."""
    prefix, _, rest = str(uid).strip().partition(":")
    return int(rest) if prefix == "shared" and rest.isdigit() else None


def _require_postgres(db: Database, what: str) -> None:
    if not db.is_postgres:
        raise SharingUnavailable(
            f"{what} needs the store on PostgreSQL ([storage] url): a SQLite store has no shared facts"
        )


async def _current_row(db: Database, fact_id: int) -> SharedFactRow:
    row = await SharedFactsRepo(db).get(fact_id)
    if row is None:
        raise ValueError(
            f"no shared fact {shared_uid(fact_id)} (`reverie memory search` finds them)"
        )
    if row.retired_at:
        newer = f", superseded by {shared_uid(row.superseded_by)}" if row.superseded_by else ""
        raise ValueError(
            f"shared fact {shared_uid(fact_id)} no longer holds ({row.retired_as or 'retired'} "
            f"at {row.retired_at}{newer}); it stays in history"
        )
    return row


async def _current(db: Database, uid: str, doing: str) -> tuple[int, SharedFactRow]:
    """The shared fact `uid` names and its row, current; raise saying why not."""
    _require_postgres(db, doing)
    fact_id = shared_id(uid)
    if fact_id is None:
        raise ValueError(f"{uid!r} is not a shared fact's id (shared:N)")
    return fact_id, await _current_row(db, fact_id)


async def retract_shared(
    index: MemoryIndex, uid: str, *, reason: str, by: str = "person"
) -> dict[str, Any]:
    """Withdraw a shared fact for every agent; the row stays, retired, in history."""
    db = index.db
    fact_id, row = await _current(db, uid, "retracting a shared fact")
    now = iso(datetime.now(UTC))
    reason = " ".join(reason.split()) or f"retracted by the {by}"
    # `retired_at IS NULL`: another agent's retraction or a night's maintenance that got there
    # first wins, and this one says so instead of stamping over it.
    if not await SharedFactsRepo(db).retract(fact_id, at=now, reason=reason, by=db.schema):
        await _current_row(db, fact_id)  # raises with what retired it meanwhile
    await SharedFacts(index).sync(force=True)
    log.info("shared fact retracted", id=fact_id, schema=db.schema)
    return {
        "status": "retracted",
        "id": shared_uid(fact_id),
        "text": row.text,
        "message": f"{shared_uid(fact_id)} retracted for every agent (kept in history): {reason}",
    }


async def correct_shared(
    index: MemoryIndex, uid: str, text: str, *, origin: str = "person"
) -> dict[str, Any]:
    """Supersede a shared fact with `text` for every agent: a new row, the old one in history."""
    db = index.db
    text = " ".join(text.split())
    if not text:
        raise ValueError("--correct needs the corrected TEXT")
    fact_id, old = await _current(db, uid, "correcting a shared fact")
    now = iso(datetime.now(UTC))

    # One transaction: the new value and the old one's retirement appear together or not at
    # all, and a row retired meanwhile by another agent refuses the correction.
    try:
        new_id = await SharedFactsRepo(db).correct(
            fact_id,
            text,
            tags=old.tags,
            origin=origin,
            author=db.schema,
            at=now,
            reason=f"corrected by the {origin}",
        )
    except SharedFactRetired:
        raise ValueError(f"shared fact {shared_uid(fact_id)} was retired meanwhile") from None
    await SharedFacts(index).sync(force=True)
    log.info("shared fact corrected", id=fact_id, new=new_id, schema=db.schema)
    return {
        "status": "corrected",
        "id": shared_uid(new_id),
        "text": text,
        "similar_to": shared_uid(fact_id),
        "message": f"{shared_uid(new_id)} supersedes {shared_uid(fact_id)} for every agent "
        "(the old value stays in history)",
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
        epoch = (await MemoriesRepo(db).state()).epoch
        kv = KvRepo(db)
        seen_epoch, _, seen = (await kv.get(_SYNCED_KEY) or "").partition(":")
        since = int(seen) if seen_epoch == epoch and seen.isdigit() else 0
        rows = await SharedFactsRepo(db).changed_since(since)
        if not rows:
            return 0
        fresh = [
            NewMemory(
                uid=shared_uid(r.id),
                kind="fact",
                text=r.text,
                origin="person" if r.origin == "person" else "agent",
                created_at=parse_iso(r.created_at) or datetime.now(UTC),
                valid_from=parse_iso(r.valid_from),
                tags=(*(t for t in r.tags.split() if t), "shared"),
                explicit=True,
                source="shared",
                meta={"shared": True, "author": r.author},
            )
            for r in rows
        ]
        await self.index.upsert(fresh)
        for r in rows:
            if r.retired_at:
                # Retired: out of the current values, kept in history, pointing at what
                # replaced it (a newer value, a correction, the copy a duplicate folded into).
                await self.index.retire(
                    shared_uid(r.id),
                    at=parse_iso(r.retired_at) or datetime.now(UTC),
                    superseded_by=shared_uid(r.superseded_by) if r.superseded_by else None,
                )
        await kv.put(_SYNCED_KEY, f"{epoch}:{rows[-1].version}", at=datetime.now(UTC))
        log.info("shared facts copied", facts=len(rows), schema=db.schema)
        return len(rows)
