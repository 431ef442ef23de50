"""Fork lineage (`forks`): one row per fork session — parent, depth, task, status, times.

What a fork status means, when a row is written and how a running row is recovered after a
restart is `daemon.delegate.lineage`; this module reads and writes the rows (and the fork's
own `sessions` row where the lineage moves it: its end, its transcript's new place).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, Any

from daemon.store.transactions import begin_write

if TYPE_CHECKING:
    import sqlite3

    from daemon.store.db import Database

_COLUMNS = (
    "id, parent_session_id, parent_turn_id, parent_call_id, root_session_id, depth, task, "
    "status, outcome, summary, stop_reason, tokens, transcript_path, started_at, ended_at, "
    "reported, retained"
)
_SELECT = f"SELECT {_COLUMNS} FROM forks"


@dataclass(frozen=True, kw_only=True)
class ForkRow:
    id: str
    parent_session_id: str
    parent_turn_id: str
    parent_call_id: str | None
    root_session_id: str
    depth: int
    task: str
    status: str
    outcome: str | None
    summary: str | None
    stop_reason: str | None
    tokens: int
    transcript_path: str
    started_at: str
    ended_at: str | None
    reported: bool
    retained: str | None

    @classmethod
    def from_db(cls, row: Sequence[Any]) -> ForkRow:
        return cls(
            id=row[0],
            parent_session_id=row[1],
            parent_turn_id=row[2],
            parent_call_id=row[3],
            root_session_id=row[4],
            depth=int(row[5]),
            task=row[6],
            status=row[7],
            outcome=row[8],
            summary=row[9],
            stop_reason=row[10],
            tokens=int(row[11] or 0),
            transcript_path=row[12],
            started_at=row[13],
            ended_at=row[14],
            reported=bool(row[15]),
            retained=row[16],
        )


class ForksRepo:
    """The `forks` table (and a fork's own `sessions` row)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(
        self,
        *,
        fork_id: str,
        parent_session_id: str,
        parent_turn_id: str,
        parent_call_id: str | None,
        root_session_id: str,
        depth: int,
        task: str,
        status: str,
        transcript_path: str,
        started_at: str,
    ) -> None:
        await self.db.execute(
            "INSERT INTO forks(id, parent_session_id, parent_turn_id, parent_call_id,"
            " root_session_id, depth, task, status, transcript_path, started_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                fork_id,
                parent_session_id,
                parent_turn_id,
                parent_call_id,
                root_session_id,
                depth,
                task,
                status,
                transcript_path,
                started_at,
            ),
        )

    async def finish(
        self,
        fork_id: str,
        *,
        status: str,
        ended_at: str,
        outcome: str | None,
        summary: str | None,
        stop_reason: str | None,
        tokens: int,
    ) -> None:
        await self.db.execute(
            "UPDATE forks SET status = ?, outcome = ?, summary = ?, stop_reason = ?, tokens = ?,"
            " ended_at = ? WHERE id = ?",
            (status, outcome, summary, stop_reason, tokens, ended_at, fork_id),
        )

    async def fail_unreported(self, fork_id: str, *, reason: str, at: str) -> None:
        """Mark a fork failed with `reason` and not yet told to its parent."""
        await self.db.execute(
            "UPDATE forks SET status = 'failed', stop_reason = ?, ended_at = ?, reported = 0"
            " WHERE id = ?",
            (reason, at, fork_id),
        )

    async def get(self, fork_id: str) -> ForkRow | None:
        row = await self.db.fetchone(f"{_SELECT} WHERE id = ?", (fork_id,))
        return ForkRow.from_db(row) if row else None

    async def all(self) -> list[ForkRow]:
        rows = await self.db.fetchall(f"{_SELECT} ORDER BY started_at, id")
        return [ForkRow.from_db(r) for r in rows]

    async def with_status(self, status: str) -> list[ForkRow]:
        rows = await self.db.fetchall(
            f"{_SELECT} WHERE status = ? ORDER BY started_at, id", (status,)
        )
        return [ForkRow.from_db(r) for r in rows]

    async def count_with_status(self, status: str) -> int:
        row = await self.db.fetchone("SELECT COUNT(*) FROM forks WHERE status = ?", (status,))
        return int(row[0]) if row else 0

    async def counts_by_status(self) -> dict[str, int]:
        rows = await self.db.fetchall("SELECT status, COUNT(*) FROM forks GROUP BY status")
        return {str(r[0]): int(r[1]) for r in rows}

    async def unreported(self, parent_session_id: str, parent_turn_id: str) -> list[ForkRow]:
        """Forks of this parent turn not yet reported to it, oldest first."""
        rows = await self.db.fetchall(
            f"{_SELECT} WHERE parent_session_id = ? AND parent_turn_id = ? AND reported = 0"
            " ORDER BY started_at, id",
            (parent_session_id, parent_turn_id),
        )
        return [ForkRow.from_db(r) for r in rows]

    async def latest_of_turn(self, parent_session_id: str, parent_turn_id: str) -> ForkRow | None:
        """The newest fork this parent turn started (None: it started none)."""
        row = await self.db.fetchone(
            f"{_SELECT} WHERE parent_session_id = ? AND parent_turn_id = ?"
            " ORDER BY started_at DESC, id DESC LIMIT 1",
            (parent_session_id, parent_turn_id),
        )
        return ForkRow.from_db(row) if row else None

    async def tree(self, session_id: str) -> list[ForkRow]:
        """Every fork of the delegate tree `session_id` belongs to (the trunk session at its
        top, or any fork in it), oldest first."""
        row = await self.db.fetchone(
            "SELECT root_session_id FROM forks WHERE id = ?", (session_id,)
        )
        root = row[0] if row else session_id
        rows = await self.db.fetchall(
            f"{_SELECT} WHERE root_session_id = ? ORDER BY started_at, id", (root,)
        )
        return [ForkRow.from_db(r) for r in rows]

    async def in_tree(self, root_session_id: str, *, besides: str = "") -> list[str]:
        """The ids of every fork under root session `root_session_id` but `besides`, in order."""
        rows = await self.db.fetchall(
            "SELECT id FROM forks WHERE root_session_id = ? AND id != ? ORDER BY id",
            (root_session_id, besides),
        )
        return [str(r[0]) for r in rows]

    async def mark_reported(self, fork_ids: Sequence[str]) -> None:
        for fid in fork_ids:
            await self.db.execute("UPDATE forks SET reported = 1 WHERE id = ?", (fid,))

    async def mark_retained(self, fork_id: str, how: str, transcript_path: str) -> None:
        """Record how the fork's transcript was kept and where it is now (its session's too)."""
        await self.db.execute(
            "UPDATE forks SET retained = ?, transcript_path = ? WHERE id = ?",
            (how, transcript_path, fork_id),
        )
        await self.db.execute(
            "UPDATE sessions SET transcript_path = ? WHERE id = ?", (transcript_path, fork_id)
        )

    async def end_session(self, session_id: str, at: str, *, keep_earlier: bool = False) -> None:
        """Set the (fork) session's end; `keep_earlier`: only when it has none yet."""
        if keep_earlier:
            await self.db.execute(
                "UPDATE sessions SET ended_at = COALESCE(ended_at, ?) WHERE id = ?",
                (at, session_id),
            )
        else:
            await self.db.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (at, session_id))

    async def session_transcript(self, session_id: str) -> str:
        """The transcript path the sessions index holds for a session ('' when none)."""
        row = await self.db.fetchone(
            "SELECT transcript_path FROM sessions WHERE id = ?", (session_id,)
        )
        return str(row[0]) if row and row[0] is not None else ""

    async def add_missing(self, rows: Sequence[ForkRow]) -> int:
        """Insert `rows` in one transaction, keeping any already present; return how many went in."""
        if not rows:
            return 0
        values = [(*astuple(r)[:15], int(r.reported), r.retained) for r in rows]
        marks = ",".join("?" * len(_COLUMNS.split(",")))

        def insert(conn: sqlite3.Connection) -> int:
            begin_write(conn)  # one transaction for all the rows
            try:
                cur = conn.executemany(
                    f"INSERT INTO forks({_COLUMNS}) VALUES ({marks}) ON CONFLICT DO NOTHING",
                    values,
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return int(cur.rowcount)

        return int(await self.db.run(insert))
