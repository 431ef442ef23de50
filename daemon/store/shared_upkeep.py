"""The shared namespace's rows as its nightly upkeep reads and retires them (`shared.facts`,
PostgreSQL only), on a connection of the upkeep's own that holds its advisory lock.

What is folded, superseded or retired, and why, is `daemon.sleep.shared_upkeep`; this module
holds the lock and reads and writes the rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class CurrentSharedFact:
    """A shared fact not retired, as stored."""

    id: int
    text: str
    origin: str
    author: str
    valid_from: str | None
    created_at: str


@dataclass(frozen=True, kw_only=True)
class StampedRetirement:
    """A shared fact an agent's upkeep retired, with the cycle it stamped on it."""

    id: int
    text: str
    author: str
    superseded_by: int | None
    retired_as: str
    retired_reason: str | None
    invalid_from: str | None
    retired_cycle: str


class SharedUpkeepStore:
    """The upkeep's own session on the server: `async with SharedUpkeepStore.locked(...)`."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    @asynccontextmanager
    async def locked(
        cls, db: Database, *, lock_key: str, application: str
    ) -> AsyncIterator[SharedUpkeepStore | None]:
        """A session of its own holding the advisory lock `lock_key` (tried, never waited
        for): None when another session holds it. Closing the session frees the lock."""
        import psycopg

        from daemon.store.postgres import connect_options

        conn = await psycopg.AsyncConnection.connect(
            db.url or "", application_name=f"{application} {db.schema}", **connect_options(10)
        )
        try:
            try:
                # A killed daemon's session ends even while its statement waits on a row lock
                # (PostgreSQL 14+; older servers end it when the wait is over).
                await conn.execute("SET client_connection_check_interval = '1s'")
            except psycopg.Error:
                pass
            cur = await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (lock_key,))
            held = await cur.fetchone()
            yield cls(conn) if held and held[0] else None
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close()

    async def current(self) -> list[CurrentSharedFact]:
        """Every shared fact not retired, by id."""
        cur = await self.conn.execute(
            "SELECT id, text, origin, author, valid_from, created_at FROM shared.facts "
            "WHERE retired_at IS NULL ORDER BY id"
        )
        return [
            CurrentSharedFact(
                id=int(r[0]),
                text=r[1],
                origin=r[2],
                author=r[3],
                valid_from=r[4],
                created_at=r[5],
            )
            for r in await cur.fetchall()
        ]

    async def retire(
        self,
        fact_id: int,
        *,
        at: str,
        invalid_from: str,
        by: int | None,
        kind: str,
        reason: str,
        agent: str,
        cycle_id: str,
    ) -> bool:
        """Retire the fact in one transaction — only while it, and `by` (when given), are
        current; True when it was retired now."""
        async with self.conn.transaction():
            cur = await self.conn.execute(
                "UPDATE shared.facts SET retired_at = %s, invalid_from = %s, superseded_by = %s, "
                "retired_as = %s, retired_reason = %s, retired_by = %s, retired_cycle = %s, "
                "version = nextval('shared.facts_version') "
                "WHERE id = %s AND retired_at IS NULL AND (%s::bigint IS NULL OR EXISTS ("
                "SELECT 1 FROM shared.facts k WHERE k.id = %s AND k.retired_at IS NULL))",
                (at, invalid_from, by, kind, reason, agent, cycle_id, fact_id, by, by),
            )
            return bool(cur.rowcount == 1)

    async def stamped(self, agent: str, kinds: Sequence[str]) -> list[StampedRetirement]:
        """The shared facts `agent`'s upkeep retired as one of `kinds`, stamped with a cycle."""
        cur = await self.conn.execute(
            "SELECT id, text, author, superseded_by, retired_as, retired_reason, invalid_from, "
            "retired_cycle FROM shared.facts "
            "WHERE retired_by = %s AND retired_cycle IS NOT NULL AND retired_as = ANY(%s)",
            (agent, list(kinds)),
        )
        return [
            StampedRetirement(
                id=int(r[0]),
                text=r[1],
                author=r[2],
                superseded_by=int(r[3]) if r[3] is not None else None,
                retired_as=r[4],
                retired_reason=r[5],
                invalid_from=r[6],
                retired_cycle=r[7],
            )
            for r in await cur.fetchall()
        ]
