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
The rows are read and written through `daemon.store.sleep_changes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, get_args

from daemon.errors import ReverieError
from daemon.memory.rows import parse_iso
from daemon.sleep.revisions import RevisionStore
from daemon.store.sleep_changes import Change, SleepChangesRepo

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
        return await SleepChangesRepo(self.db).record(
            self.cycle_id,
            at=self._now(),
            kind=kind,
            target=str(target).strip(),
            before=before,
            after=after,
            note=note,
        )

    async def changes(self) -> list[Change]:
        return await list_changes(self.db, self.cycle_id)


async def list_changes(db: Database, cycle_id: str) -> list[Change]:
    """Every change of a cycle (reverts included), in the order they were recorded."""
    return await SleepChangesRepo(db).of_cycle(cycle_id)


async def change_counts(db: Database, cycle_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """For each cycle: how many changes of each kind (reverts under `reverted`)."""
    return await SleepChangesRepo(db).counts(cycle_ids)


async def fold_holds(db: Database) -> set[str]:
    """Day-level memories whose fold was reverted (maintenance leaves them unfolded)."""
    return await SleepChangesRepo(db).fold_holds()


async def pin_holds(db: Database) -> dict[str, datetime]:
    """Facts whose promotion was reverted, with when (a later confirmation by the person wins)."""
    out: dict[str, datetime] = {}
    for fact_id, held_at in (await SleepChangesRepo(db).pin_holds()).items():
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
