"""Sleep's change sets (`sleep_changes`) and what a revert holds back (`sleep_fold_holds`,
`sleep_pin_holds`, with the `pinned_facts` and `memory_folds` rows a revert takes away).

What a change is, which kinds there are and how each is undone is `daemon.sleep.changes` and
`daemon.sleep.revert`; this module reads and writes the rows. A change is numbered within its
cycle (`seq`) and recorded once per (cycle, kind, target).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from daemon.store.transactions import begin_write

if TYPE_CHECKING:
    from daemon.store.db import Database

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Change:
    """One recorded change of one cycle."""

    cycle_id: str
    seq: int
    at: str
    kind: str
    target: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    note: str = ""
    reverted_at: str | None = None
    reverted_by: int | None = None

    @property
    def ref(self) -> str:
        return f"{self.cycle_id}#{self.seq}"

    def to_json(self) -> dict[str, Any]:
        return {
            "cycle_id": self.cycle_id, "change": self.seq, "at": self.at, "kind": self.kind,
            "target": self.target, "before": self.before, "after": self.after, "note": self.note,
            "reverted_at": self.reverted_at, "reverted_by": self.reverted_by,
        }  # fmt: skip


def _loads(raw: str | None) -> dict[str, Any] | None:
    return json.loads(raw) if raw else None


def _change(row: Any) -> Change:
    return Change(
        cycle_id=row["cycle_id"], seq=int(row["seq"]), at=row["at"], kind=row["kind"],
        target=row["target"], before=_loads(row["before"]), after=_loads(row["after"]),
        note=row["note"] or "", reverted_at=row["reverted_at"],
        reverted_by=int(row["reverted_by"]) if row["reverted_by"] is not None else None,
    )  # fmt: skip


def in_transaction(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run `work(conn)` in one write transaction (rolled back when it raises)."""
    begin_write(conn)
    try:
        out = work(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return out


def insert_change(
    conn: sqlite3.Connection,
    cycle_id: str,
    at: str,
    kind: str,
    target: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    note: str,
) -> int:
    """Insert a change with the next number of its cycle (inside the caller's transaction);
    a (cycle, kind, target) already recorded returns its number and changes nothing."""
    found = conn.execute(
        "SELECT seq FROM sleep_changes WHERE cycle_id = ? AND kind = ? AND target = ?",
        (cycle_id, kind, target),
    ).fetchone()
    if found is not None:
        return int(found[0])
    seq = int(
        conn.execute(
            "SELECT coalesce(max(seq), 0) + 1 FROM sleep_changes WHERE cycle_id = ?", (cycle_id,)
        ).fetchone()[0]
    )
    conn.execute(
        "INSERT INTO sleep_changes(cycle_id, seq, at, kind, target, before, after, note) "
        "VALUES (?,?,?,?,?,?,?,?)",
        (
            cycle_id, seq, at, kind, target,
            json.dumps(before, ensure_ascii=False) if before is not None else None,
            json.dumps(after, ensure_ascii=False) if after is not None else None,
            " ".join(note.split())[:500],
        ),
    )  # fmt: skip
    return seq


class SleepChangesRepo:
    """The `sleep_changes` table and the holds a revert leaves."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def record(
        self,
        cycle_id: str,
        *,
        at: str,
        kind: str,
        target: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        note: str,
    ) -> int:
        """Record one change in its own transaction; return its number in the cycle (the first
        record's, when the cycle has this (kind, target) already)."""

        def work(conn: sqlite3.Connection) -> int:
            return in_transaction(
                conn, lambda c: insert_change(c, cycle_id, at, kind, target, before, after, note)
            )

        return int(await self.db.run(work))

    async def record_revert(self, change: Change, *, at: str, kind: str, note: str) -> int:
        """Record the revert of `change` (a change of kind `kind`, target `#N`, its before and
        after swapped) and mark `change` reverted by it, in one transaction; return its number."""

        def inside(c: sqlite3.Connection) -> int:
            seq = insert_change(
                c, change.cycle_id, at, kind, f"#{change.seq}", change.after, change.before, note
            )
            c.execute(
                "UPDATE sleep_changes SET reverted_at = ?, reverted_by = ? "
                "WHERE cycle_id = ? AND seq = ?",
                (at, seq, change.cycle_id, change.seq),
            )
            return seq

        return int(await self.db.run(lambda conn: in_transaction(conn, inside)))

    async def of_cycle(self, cycle_id: str) -> list[Change]:
        """Every change of a cycle (reverts included), in the order they were recorded."""
        rows = await self.db.fetchall(
            "SELECT * FROM sleep_changes WHERE cycle_id = ? ORDER BY seq", (cycle_id,)
        )
        return [_change(r) for r in rows]

    async def counts(self, cycle_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """For each of the cycles that has changes: how many of each kind."""
        if not cycle_ids:
            return {}
        rows = await self.db.fetch_in(
            "SELECT cycle_id, kind, count(*) FROM sleep_changes WHERE cycle_id IN ({}) "
            "GROUP BY cycle_id, kind",
            list(cycle_ids),
        )
        out: dict[str, dict[str, int]] = {}
        for cycle_id, kind, n in rows:
            out.setdefault(str(cycle_id), {})[str(kind)] = int(n)
        return out

    async def targets_of(self, kinds: Sequence[str]) -> list[tuple[str, str]]:
        """(cycle id, target) of every change of one of `kinds`, in no set order."""
        if not kinds:
            return []
        rows = await self.db.fetch_in(
            "SELECT cycle_id, target FROM sleep_changes WHERE kind IN ({})", list(kinds)
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    # --- what reverts hold back --------------------------------------------------------------

    async def fold_holds(self) -> set[str]:
        """Day-level memories whose fold was reverted."""
        return {
            str(r[0]) for r in await self.db.fetchall("SELECT source_uid FROM sleep_fold_holds")
        }

    async def pin_holds(self) -> dict[str, str]:
        """Facts whose promotion was reverted, with when (as stored)."""
        rows = await self.db.fetchall("SELECT fact_id, held_at FROM sleep_pin_holds")
        return {str(r[0]): str(r[1]) for r in rows}

    async def unpin_and_hold(self, fact_id: str, *, at: str, change_ref: str) -> None:
        """Take the fact out of `pinned_facts` and hold it from being pinned again (the hold's
        time and change replaced when it was held before), in one transaction."""

        def inside(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM pinned_facts WHERE fact_id = ?", (fact_id,))
            c.execute(
                "INSERT INTO sleep_pin_holds(fact_id, held_at, change) VALUES (?,?,?) "
                "ON CONFLICT(fact_id) DO UPDATE SET held_at = excluded.held_at, "
                "change = excluded.change",
                (fact_id, at, change_ref),
            )

        await self.db.run(lambda conn: in_transaction(conn, inside))

    async def unfold_and_hold(
        self, month_uid: str, sources: Sequence[str], *, at: str, change_ref: str
    ) -> list[str]:
        """Unlink `sources` from the month and hold them from folding again (a hold already
        there is kept), in one transaction; return those of them that were linked."""
        marks = ",".join("?" * len(sources)) or "''"
        args = [month_uid, *sources]

        def inside(c: sqlite3.Connection) -> list[str]:
            linked = [
                str(r[0])
                for r in c.execute(
                    "SELECT source_uid FROM memory_folds WHERE month_uid = ? "
                    f"AND source_uid IN ({marks})",
                    args,
                ).fetchall()
            ]
            c.execute(
                f"DELETE FROM memory_folds WHERE month_uid = ? AND source_uid IN ({marks})", args
            )
            c.executemany(
                "INSERT INTO sleep_fold_holds(source_uid, held_at, change) "
                "VALUES (?,?,?) ON CONFLICT DO NOTHING",
                [(uid, at, change_ref) for uid in sources],
            )
            return linked

        out: list[str] = await self.db.run(lambda conn: in_transaction(conn, inside))
        return out
