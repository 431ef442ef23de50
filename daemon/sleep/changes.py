"""Each sleep cycle's change set: what consolidation changed in memory, reviewable and revertible.

Whatever a cycle changes in memory is recorded as one change in `sleep_changes`, before the
write it describes (as a dream revision is): a fact mined, a fact superseded by a newer
value, a fact retired, a fact promoted into FACTS.md, day-level memories folded into a month.
On PostgreSQL the shared facts' nightly upkeep records its changes here too (`shared_fact_*`).
Each change keeps the state it replaced (`before`) and the one it made (`after`), numbered
within its cycle (`#N`). `record` is idempotent per (cycle, kind, target), so a phase re-run
after a crash finds its own change instead of recording it twice.

`daemon.sleep.revert` undoes changes; a revert is itself a change (kind `reverted`, target
`#N`), and what it must not redo is held here (`fold_holds`, `pin_holds`) for maintenance.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, get_args

from daemon.errors import ReverieError
from daemon.memory.rows import parse_iso
from daemon.sleep.revisions import RevisionStore

if TYPE_CHECKING:
    from daemon.clock import Clock
    from daemon.paths import Home
    from daemon.store.db import Database

ChangeKind = Literal[
    "fact_mined",
    "fact_superseded",
    "fact_retired",
    "fact_promoted",
    "month_folded",
    "summary_folded",
    # The shared namespace's upkeep (`daemon.sleep.shared_upkeep`): a shared fact folded into
    # its duplicate, superseded by a newer value, retired as a past plan. Not revertible here:
    # the person corrects a shared fact with `reverie remember --correct shared:ID`.
    "shared_fact_folded",
    "shared_fact_superseded",
    "shared_fact_retired",
]
CHANGE_KINDS: tuple[str, ...] = get_args(ChangeKind)
REVERTED = "reverted"  # the kind of the change that records a revert


class ChangeError(ReverieError):
    """A change cannot be recorded, found or reverted; the message says why and what to do."""


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
        note=row["note"] or "", reverted_at=row["reverted_at"], reverted_by=row["reverted_by"],
    )  # fmt: skip


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
    """Insert a change with the next number of its cycle (inside the caller's transaction)."""
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


def in_transaction(conn: sqlite3.Connection, work: Any) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    try:
        out = work(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return out


class ChangeSet:
    """The change set of one cycle: `ChangeSet.open(db, cycle_id)`, then `await record(...)`."""

    def __init__(self, db: Database, cycle_id: str, *, clock: Clock | None = None) -> None:
        self.db = db
        self.cycle_id = cycle_id
        self.clock = clock

    @classmethod
    def open(cls, db: Database, cycle_id: str, *, clock: Clock | None = None) -> ChangeSet:
        if not cycle_id.strip():
            raise ChangeError("a change set needs the id of its sleep cycle")
        return cls(db, cycle_id.strip(), clock=clock)

    def _now(self) -> str:
        now = self.clock.now() if self.clock is not None else datetime.now(UTC)
        return now.isoformat(timespec="seconds")

    async def record(
        self,
        kind: ChangeKind,
        target: str,
        *,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        note: str = "",
    ) -> int:
        """Record one change (before making it); return its number in the cycle.

        Recording the same (kind, target) again in the cycle returns the first record's number
        and changes nothing: a phase re-run after a crash finds its own change.
        """
        if kind not in CHANGE_KINDS:
            raise ChangeError(
                f"unknown change kind {kind!r}; expected one of {', '.join(CHANGE_KINDS)}"
            )
        if not str(target).strip():
            raise ChangeError(f"a {kind} change needs a target (a fact id or a month)")
        at = self._now()

        def work(conn: sqlite3.Connection) -> int:
            return int(
                in_transaction(
                    conn,
                    lambda c: insert_change(
                        c, self.cycle_id, at, kind, str(target).strip(), before, after, note
                    ),
                )
            )

        seq: int = await self.db.run(work)
        return seq

    async def changes(self) -> list[Change]:
        return await list_changes(self.db, self.cycle_id)


async def list_changes(db: Database, cycle_id: str) -> list[Change]:
    """Every change of a cycle (reverts included), in the order they were recorded."""
    rows = await db.fetchall(
        "SELECT * FROM sleep_changes WHERE cycle_id = ? ORDER BY seq", (cycle_id,)
    )
    return [_change(r) for r in rows]


async def change_counts(db: Database, cycle_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """For each cycle: how many changes of each kind (reverts under `reverted`)."""
    if not cycle_ids:
        return {}
    marks = ",".join("?" * len(cycle_ids))
    rows = await db.fetchall(
        f"SELECT cycle_id, kind, count(*) FROM sleep_changes WHERE cycle_id IN ({marks}) "
        "GROUP BY cycle_id, kind",
        list(cycle_ids),
    )
    out: dict[str, dict[str, int]] = {}
    for cycle_id, kind, n in rows:
        out.setdefault(cycle_id, {})[kind] = int(n)
    return out


async def fold_holds(db: Database) -> set[str]:
    """Day-level memories whose fold was reverted (maintenance leaves them unfolded)."""
    return {r[0] for r in await db.fetchall("SELECT source_uid FROM sleep_fold_holds")}


async def pin_holds(db: Database) -> dict[str, datetime]:
    """Facts whose promotion was reverted, with when (a later confirmation by the person wins)."""
    rows = await db.fetchall("SELECT fact_id, held_at FROM sleep_pin_holds")
    out: dict[str, datetime] = {}
    for fact_id, held_at in rows:
        when = parse_iso(held_at)
        if when is not None:
            out[fact_id] = when
    return out


async def cycle_view(
    db: Database, home: Home, cycle_id: str | None = None
) -> dict[str, Any] | None:
    """One cycle as `reverie sleep show` reads it: the cycle, its phases with their timings, its
    change set and its dream revisions; the last cycle when `cycle_id` is None (None: no such cycle)."""
    from daemon.sleep.checkpoints import Checkpoints

    checkpoints = Checkpoints(db)
    if cycle_id is None:
        latest = await checkpoints.cycles(limit=1)
        record = latest[0] if latest else None
    else:
        record = await checkpoints.get(cycle_id.strip())
    if record is None:
        return None
    phases = []
    for phase in (await checkpoints.phases(record.id)).values():
        started = parse_iso(phase.started_at or "")
        finished = parse_iso(phase.finished_at or "")
        phases.append(
            {
                "phase": phase.phase,
                "status": phase.status,
                "attempts": phase.attempts,
                "started_at": phase.started_at,
                "finished_at": phase.finished_at,
                "seconds": round((finished - started).total_seconds(), 3)
                if started and finished
                else None,
                "changed": phase.report.changed if phase.report else (phase.error or ""),
            }
        )
    revisions = await RevisionStore(home, db).for_cycle(record.id)
    return {
        "cycle_id": record.id,
        "reason": record.reason,
        "status": record.status,
        "started_at": record.started_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
        "old_session_id": record.session_id,
        "new_session_id": record.new_session_id,
        "woke_early": record.woke_early,
        "deferred": record.deferred,
        "phases": phases,
        "changes": [c.to_json() for c in await list_changes(db, record.id)],
        "dream_revisions": [
            {k: v for k, v in r.to_json().items() if k != "diff"} for r in revisions
        ],
    }
