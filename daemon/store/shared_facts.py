"""Shared facts (`shared.facts`, PostgreSQL only): what the person shared with every agent.

What sharing means, and how each agent copies the facts into its own index, is
`daemon.memory.shared`; this module writes and reads the rows. The table is append-only: a
retraction or correction retires a row (with when it stopped holding, what replaced it, why and
which agent did it), never deletes one, and every change takes the next value of the
`shared.facts_version` sequence, so each agent's copy follows by version. The nightly upkeep's
statements are `daemon.store.shared_upkeep`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.errors import ReverieError
from daemon.store.memories import in_transaction

if TYPE_CHECKING:
    from daemon.store.db import Database

_INSERT = (
    "INSERT INTO shared.facts(text, tags, origin, author, created_at, valid_from, version) "
    "VALUES (?, ?, ?, ?, ?, ?, nextval('shared.facts_version')) RETURNING id"
)
_COLUMNS = (
    "id, text, tags, origin, author, created_at, valid_from, retired_at, retired_as, "
    "superseded_by, version"
)


class SharedFactRetired(ReverieError, ValueError):
    """The shared fact was retired (by another agent, or a night's upkeep) before this change."""


@dataclass(frozen=True, kw_only=True)
class SharedFactRow:
    id: int
    text: str
    tags: str  # space-separated
    origin: str
    author: str  # the schema of the agent that stored it
    created_at: str
    valid_from: str | None
    retired_at: str | None
    retired_as: str | None  # duplicate | superseded | stale | retracted | corrected
    superseded_by: int | None
    version: int


def _row(r: Any) -> SharedFactRow:
    return SharedFactRow(
        id=int(r[0]),
        text=str(r[1]),
        tags=str(r[2] or ""),
        origin=str(r[3]),
        author=str(r[4] or ""),
        created_at=str(r[5]),
        valid_from=r[6],
        retired_at=r[7],
        retired_as=r[8],
        superseded_by=int(r[9]) if r[9] is not None else None,
        version=int(r[10]),
    )


def _correct(
    conn: Any,
    old_id: int,
    text: str,
    tags: str,
    origin: str,
    author: str,
    at: str,
    reason: str,
) -> int:
    new_id = int(conn.execute(_INSERT, (text, tags, origin, author, at, at)).fetchone()[0])
    moved = conn.execute(
        "UPDATE shared.facts SET retired_at = ?, invalid_from = ?, superseded_by = ?, "
        "retired_as = 'corrected', retired_reason = ?, retired_by = ?, "
        "retired_cycle = NULL, version = nextval('shared.facts_version') "
        "WHERE id = ? AND retired_at IS NULL",
        (at, at, new_id, reason, author, old_id),
    ).rowcount
    if not moved:
        raise SharedFactRetired(f"shared fact {old_id} was retired meanwhile")
    return new_id


class SharedFactsRepo:
    """The `shared.facts` table, as the person's sharing, retracting and correcting use it."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, text: str, *, tags: str, origin: str, author: str, at: str) -> int:
        """Store a shared fact (holding from `at`); return its id."""
        row = await self.db.fetchone(_INSERT, (text, tags, origin, author, at, at))
        return int(row[0])

    async def get(self, fact_id: int) -> SharedFactRow | None:
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM shared.facts WHERE id = ?", (fact_id,)
        )
        return _row(row) if row is not None else None

    async def retract(self, fact_id: int, *, at: str, reason: str, by: str) -> bool:
        """Retire a current shared fact as retracted by agent `by`; False when there is none
        current (unknown, or retired first by another agent or a night's upkeep — that wins)."""
        moved: int = await self.db.run(
            lambda conn: (
                conn.execute(
                    "UPDATE shared.facts SET retired_at = ?, invalid_from = ?, "
                    "retired_as = 'retracted', retired_reason = ?, retired_by = ?, "
                    "retired_cycle = NULL, version = nextval('shared.facts_version') "
                    "WHERE id = ? AND retired_at IS NULL",
                    (at, at, reason, by, fact_id),
                ).rowcount
            )
        )
        return bool(moved)

    async def correct(
        self, fact_id: int, text: str, *, tags: str, origin: str, author: str, at: str, reason: str
    ) -> int:
        """Supersede a current shared fact with `text`: the new row and the old one's retirement
        in one transaction. Return the new id; `SharedFactRetired` (nothing written) when the
        old one was retired meanwhile."""
        new_id: int = await self.db.run(
            in_transaction, _correct, fact_id, text, tags, origin, author, at, reason
        )
        return new_id

    async def changed_since(self, version: int) -> list[SharedFactRow]:
        """Every shared fact stored or retired after `version`, in version order."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM shared.facts WHERE version > ? ORDER BY version", (version,)
        )
        return [_row(r) for r in rows]
