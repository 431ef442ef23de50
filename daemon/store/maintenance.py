"""The database's own upkeep in sleep maintenance: a probe, its pages, `VACUUM`.

On PostgreSQL the server keeps its tables (autovacuum) and its log; only the probe applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True)
class Pages:
    """The SQLite file's size in pages, and how many of them are free."""

    total: int
    free: int

    @property
    def free_fraction(self) -> float:
        return self.free / self.total if self.total else 0.0


class StoreUpkeep:
    """Statements about the store itself rather than any table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def ping(self) -> None:
        """One round trip: a connection lost since the last statement is renewed by it (and a
        PostgreSQL session's advisory locks taken again with it, `Database.still_holds`)."""
        await self.db.fetchone("SELECT 1")

    async def pages(self) -> Pages | None:
        """The SQLite file's pages (None on PostgreSQL, whose server compacts its own)."""
        if self.db.is_postgres:
            return None
        total = await self.db.fetchone("PRAGMA page_count")
        free = await self.db.fetchone("PRAGMA freelist_count")
        return Pages(int(total[0]), int(free[0]))

    async def vacuum(self) -> None:
        """Rewrite the SQLite file without its free pages (SQLite only)."""
        if self.db.is_postgres:
            raise RuntimeError("VACUUM is the PostgreSQL server's own (autovacuum), not ours")
        await self.db.execute("VACUUM")
