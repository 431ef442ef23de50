"""The pinned facts (`pinned_facts`): which facts stand in FACTS.md's generated block, and why.

Which facts may be pinned is sleep maintenance's rule (`daemon.sleep.maintenance.sync_pins`);
the block's text is `daemon.memory.pins`'. This module keeps the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.store.transactions import begin_write

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True)
class Pin:
    """Fact `fact_id` is pinned, for `reason`."""

    fact_id: str
    reason: str


def _save(conn: Any, added: Sequence[Pin], removed: Sequence[str], at: str) -> None:
    begin_write(conn)
    try:
        conn.executemany(
            "INSERT INTO pinned_facts(fact_id, pinned_at, reason) VALUES (?,?,?)"
            " ON CONFLICT DO NOTHING",
            [(p.fact_id, at, p.reason) for p in added],
        )
        conn.executemany("DELETE FROM pinned_facts WHERE fact_id = ?", [(f,) for f in removed])
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class PinsRepo:
    """`pinned_facts`, and the stored importance pinning scores a fact from."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def pinned_ids(self) -> set[str]:
        rows = await self.db.fetchall("SELECT fact_id FROM pinned_facts")
        return {r[0] for r in rows}

    async def pins(self) -> list[Pin]:
        """Every pin, in the order they were pinned (then by fact id)."""
        rows = await self.db.fetchall(
            "SELECT fact_id, reason FROM pinned_facts ORDER BY pinned_at, fact_id"
        )
        return [Pin(r[0], r[1]) for r in rows]

    async def save(self, *, added: Sequence[Pin], removed: Sequence[str], at: str) -> None:
        """Pin `added` (at `at`, ISO; a fact pinned already keeps its pin) and unpin `removed`,
        in one transaction."""
        if added or removed:
            await self.db.run(_save, list(added), list(removed), at)

    async def importance(self, uid: str) -> float | None:
        """The stored importance of memory `uid` (None: not in the index)."""
        row = await self.db.fetchone("SELECT importance FROM memories WHERE uid = ?", (uid,))
        return float(row[0]) if row else None
