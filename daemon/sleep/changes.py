"""Each sleep cycle's change set: what consolidation changed in memory, reviewable and revertible.

Whatever a cycle changes in memory is recorded as one change in `sleep_changes`, before the
write it describes (as a dream revision is): a fact mined, a fact superseded by a newer
value, a fact retired, a fact promoted into FACTS.md, day-level memories folded into a month.
Each change keeps the state it replaced (`before`) and the one it made (`after`), numbered
within its cycle (`#N`). `record` is idempotent per (cycle, kind, target), so a phase re-run
after a crash finds its own change instead of recording it twice.

`ChangeReverter.revert(cycle_id, change=N)` undoes one change, or every change of a cycle
(newest first, and the cycle's applied dream revisions with them). Nothing is deleted:

- a mined fact is retracted with the reason "reverted" (it stays in history);
- a supersession is undone: the old fact current again, the new one retired
  (`FactStore.reinstate`, one append-only event);
- a retirement is undone (`FactStore.restore`, which also keeps the fact from being retired
  again by the same rule);
- a promotion is unpinned, and held: the score alone does not pin the fact again, only the
  person's confirmation after the revert does;
- a month fold is undone: its sources are unlinked from the month (the links are kept in the
  revert's record) and held from folding again, the month file re-rendered from the sources it
  keeps — or, when it keeps none, moved to `memory/months/reverted/` and its index row retired —
  so the planner, search and automatic recall navigate the day-level memories again.

A revert is itself a change (kind `reverted`, target `#N`); reverting a change twice is
refused with a message that says when it was reverted.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import anyio

from daemon.log import get_logger
from daemon.memory.facts import FactError, local_timezone
from daemon.memory.months import (
    FoldSource,
    month_memory,
    read_month_file,
    render_month,
    write_month,
)
from daemon.memory.rows import iso, parse_iso
from daemon.sleep.revisions import RevisionError, RevisionStatus, RevisionStore

if TYPE_CHECKING:
    from daemon.clock import Clock
    from daemon.memory.system import MemorySystem
    from daemon.paths import Home
    from daemon.settings import Settings
    from daemon.store.db import Database

log = get_logger("sleep.changes")

ChangeKind = Literal[
    "fact_mined",
    "fact_superseded",
    "fact_retired",
    "fact_promoted",
    "month_folded",
    "summary_folded",
]
CHANGE_KINDS: tuple[str, ...] = get_args(ChangeKind)
REVERTED = "reverted"  # the kind of the change that records a revert


class ChangeError(Exception):
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


def _insert(
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


def _transaction(conn: sqlite3.Connection, work: Any) -> Any:
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
                _transaction(
                    conn,
                    lambda c: _insert(
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


@dataclass(frozen=True, kw_only=True)
class Reverted:
    """What one revert did: the changes undone (with the revert's own record) and the dream revisions."""

    cycle_id: str
    undone: tuple[tuple[Change, Change], ...]  # (the change, the `reverted` record)
    dream_revisions: tuple[str, ...] = ()
    not_reverted: tuple[str, ...] = ()  # dream revisions that could not be, with why

    def to_json(self) -> dict[str, Any]:
        return {
            "cycle_id": self.cycle_id,
            "reverted": [
                {
                    "change": c.seq,
                    "kind": c.kind,
                    "target": c.target,
                    "record": r.seq,
                    "note": r.note,
                }
                for c, r in self.undone
            ],
            "dream_revisions": list(self.dream_revisions),
            "not_reverted": list(self.not_reverted),
        }


class ChangeReverter:
    """Undo recorded changes over one home's memory (the daemon's, or a command's own)."""

    def __init__(
        self, *, home: Home, db: Database, memory: MemorySystem, settings: Settings, clock: Clock
    ) -> None:
        self.home = home
        self.db = db
        self.memory = memory
        self.settings = settings
        self.clock = clock

    async def revert(self, cycle_id: str, *, change: int | None = None) -> Reverted:
        """Undo change `change` of cycle `cycle_id`, or (None) every change of the cycle and its
        applied dream revisions; record each revert. Raises `ChangeError` with what to do.

        A whole cycle is reverted newest change first; one already reverted is passed over,
        and a cycle with nothing left to revert is refused.
        """
        cycle_id = cycle_id.strip()
        row = await self.db.fetchone("SELECT status FROM sleep_cycles WHERE id = ?", (cycle_id,))
        if row is None:
            raise ChangeError(f"no sleep cycle {cycle_id!r}; `reverie sleep list` lists them")
        if row[0] == "running":
            raise ChangeError(
                f"sleep cycle {cycle_id} is still running; revert it once it has finished"
            )
        changes = [c for c in await list_changes(self.db, cycle_id) if c.kind != REVERTED]
        if change is not None:
            picked = [c for c in changes if c.seq == change]
            if not picked:
                numbers = ", ".join(f"#{c.seq}" for c in changes) or "none"
                raise ChangeError(
                    f"sleep cycle {cycle_id} has no change #{change} (its changes: {numbers}; "
                    "`reverie sleep show ID` lists them)"
                )
            if picked[0].reverted_at:
                raise ChangeError(
                    f"change {picked[0].ref} was already reverted at {picked[0].reverted_at} "
                    f"(by #{picked[0].reverted_by})"
                )
            undone = [(picked[0], await self._revert_one(picked[0]))]
            return Reverted(cycle_id=cycle_id, undone=tuple(undone))
        store = RevisionStore(self.home, self.db)
        revisions = [
            r for r in await store.for_cycle(cycle_id) if r.status == RevisionStatus.APPLIED
        ]
        pending = [c for c in changes if not c.reverted_at]
        if not pending and not revisions:
            what = "were all reverted already" if changes else "changed nothing in memory"
            raise ChangeError(f"sleep cycle {cycle_id}'s changes {what}; nothing to revert")
        undone = [(c, await self._revert_one(c)) for c in reversed(pending)]
        done: list[str] = []
        refused: list[str] = []
        for revision in revisions:
            try:
                await store.revert(revision.id, now=self.clock.now())
                done.append(revision.id)
            except RevisionError as exc:
                refused.append(f"{revision.id}: {exc}")
        return Reverted(
            cycle_id=cycle_id,
            undone=tuple(undone),
            dream_revisions=tuple(done),
            not_reverted=tuple(refused),
        )

    async def _revert_one(self, change: Change) -> Change:
        undo = {
            "fact_mined": self._unmine,
            "fact_superseded": self._unsupersede,
            "fact_retired": self._unretire,
            "fact_promoted": self._unpromote,
            "month_folded": self._unfold,
            "summary_folded": self._unfold,
        }.get(change.kind)
        if undo is None:
            raise ChangeError(
                f"change {change.ref} is of kind {change.kind!r}, which cannot be reverted"
            )
        at = self.clock.now().isoformat(timespec="seconds")
        label = f"reverted (sleep change {change.ref})"
        done = await undo(change, label)
        note = f"reverted #{change.seq} {change.kind} {change.target}: {done}"

        def work(conn: sqlite3.Connection) -> int:
            def inside(c: sqlite3.Connection) -> int:
                seq = _insert(
                    c, change.cycle_id, at, REVERTED, f"#{change.seq}",
                    change.after, change.before, note,
                )  # fmt: skip
                c.execute(
                    "UPDATE sleep_changes SET reverted_at = ?, reverted_by = ? "
                    "WHERE cycle_id = ? AND seq = ?",
                    (at, seq, change.cycle_id, change.seq),
                )
                return seq

            return int(_transaction(conn, inside))

        seq: int = await self.db.run(work)
        log.info("sleep change reverted", change=change.ref, kind=change.kind, target=change.target)
        return Change(
            cycle_id=change.cycle_id, seq=seq, at=at, kind=REVERTED, target=f"#{change.seq}",
            before=change.after, after=change.before, note=note,
        )  # fmt: skip

    # --- facts ---------------------------------------------------------------------------

    def _fact_id(self, change: Change, side: dict[str, Any] | None) -> str:
        return str((side or {}).get("id") or change.target)

    async def _unmine(self, change: Change, label: str) -> str:
        facts = self.memory.facts
        await facts.load()
        uid = self._fact_id(change, change.after)
        fact = facts.get(uid)
        if fact is None:
            raise ChangeError(f"change {change.ref}: fact {uid} is not in the facts log")
        if not fact.active:
            return f"{uid} was no longer active ({fact.reason or 'retired'})"
        await facts.retract(uid, reason=label, origin="system")
        return f"{uid} retracted"

    async def _unretire(self, change: Change, label: str) -> str:
        facts = self.memory.facts
        await facts.load()
        uid = self._fact_id(change, change.before)
        fact = facts.get(uid)
        if fact is None:
            raise ChangeError(f"change {change.ref}: fact {uid} is not in the facts log")
        if fact.active:
            return f"{uid} was active again already"
        try:
            await facts.restore(uid, origin="system", reason=label)
        except FactError as exc:
            raise ChangeError(f"change {change.ref}: {exc}") from None
        return f"{uid} active again"

    async def _unsupersede(self, change: Change, label: str) -> str:
        facts = self.memory.facts
        await facts.load()
        old = self._fact_id(change, change.before)
        new = str((change.after or {}).get("id") or "")
        reinstate = getattr(facts, "reinstate", None)
        if reinstate is None:
            raise ChangeError(
                f"change {change.ref}: this version cannot undo a supersession; correct "
                f"{new or 'the new fact'} back by hand (reverie remember --correct)"
            )
        fact = facts.get(old)
        if fact is None:
            raise ChangeError(f"change {change.ref}: fact {old} is not in the facts log")
        if fact.active:
            return f"{old} was current again already"
        try:
            await reinstate(old, origin="system", reason=label)
        except FactError as exc:
            raise ChangeError(f"change {change.ref}: {exc}") from None
        return f"{old} current again" + (f", {new} retired" if new else "")

    async def _unpromote(self, change: Change, label: str) -> str:
        from daemon.sleep.maintenance import sync_pins

        uid = self._fact_id(change, change.after)
        at = iso(self.clock.now())

        def work(conn: sqlite3.Connection) -> None:
            def inside(c: sqlite3.Connection) -> None:
                c.execute("DELETE FROM pinned_facts WHERE fact_id = ?", (uid,))
                c.execute(
                    "INSERT INTO sleep_pin_holds(fact_id, held_at, change) VALUES (?,?,?) "
                    "ON CONFLICT(fact_id) DO UPDATE SET held_at = excluded.held_at, change = excluded.change",
                    (uid, at, change.ref),
                )

            _transaction(conn, inside)

        await self.db.run(work)
        # FACTS.md's block regenerated without it (nothing scored: no new pin comes of this).
        await sync_pins(
            self.memory.facts,
            db=self.db,
            home=self.home,
            settings=self.settings,
            clock=self.clock,
            score=False,
        )
        return f"{uid} unpinned from FACTS.md"

    # --- months --------------------------------------------------------------------------

    async def _unfold(self, change: Change, label: str) -> str:
        after = change.after or {}
        month_uid = str(after.get("month_uid") or change.target)
        reverted = [str(s) for s in after.get("sources") or []]
        rel = str(after.get("file") or "")
        if not rel:
            raise ChangeError(f"change {change.ref}: the fold names no month file")
        path = self.home.root / rel
        at = iso(self.clock.now())
        marks = ",".join("?" * len(reverted)) or "''"

        def unlink(conn: sqlite3.Connection) -> list[str]:
            def inside(c: sqlite3.Connection) -> list[str]:
                linked = [
                    r[0]
                    for r in c.execute(
                        f"SELECT source_uid FROM memory_folds WHERE month_uid = ? AND source_uid IN ({marks})",
                        [month_uid, *reverted],
                    )
                ]
                c.execute(
                    f"DELETE FROM memory_folds WHERE month_uid = ? AND source_uid IN ({marks})",
                    [month_uid, *reverted],
                )
                c.executemany(
                    "INSERT OR IGNORE INTO sleep_fold_holds(source_uid, held_at, change) VALUES (?,?,?)",
                    [(uid, at, change.ref) for uid in reverted],
                )
                return linked

            out: list[str] = _transaction(conn, inside)
            return out

        unlinked: list[str] = await self.db.run(unlink)
        kept_rows = await self.db.fetchall(
            "SELECT m.uid, m.kind, m.title, m.text, m.origin, m.created_at, m.session_id, m.source "
            "FROM memory_folds f JOIN memories m ON m.uid = f.source_uid WHERE f.month_uid = ?",
            (month_uid,),
        )
        kept = [_fold_source(r) for r in kept_rows]
        index = self.memory.index
        if kept:
            month = str(after.get("month") or month_uid.split(":")[1])
            trust = "imported" if month_uid.endswith(":imported") else "trusted"
            tz = local_timezone(self.settings)
            text = render_month(month, trust, kept, tz=tz, updated=self.clock.now())
            await anyio.to_thread.run_sync(write_month, path, text)
            meta, body = await anyio.to_thread.run_sync(read_month_file, path)
            latest = max(s.created_at for s in kept)
            await index.upsert([month_memory(meta, body, path, created=latest)])
            return (
                f"{len(unlinked)} source(s) unfolded from {month_uid}; the month keeps "
                f"{len(kept)} source(s)"
            )
        aside = await anyio.to_thread.run_sync(
            _set_aside, path, change.ref.replace("#", "-").replace(":", "")
        )
        if await index.get(month_uid) is not None:
            await index.retire(month_uid, at=self.clock.now())
        where = f"; its file set aside as {aside}" if aside else ""
        return f"{len(unlinked)} source(s) unfolded; {month_uid} retired{where}"


def _fold_source(row: Any) -> FoldSource:
    created = parse_iso(row["created_at"])
    assert created is not None
    return FoldSource(
        uid=row["uid"], kind=row["kind"], title=row["title"], text=row["text"],
        origin=row["origin"], created_at=created, session_id=row["session_id"], source=row["source"],
    )  # fmt: skip


def _set_aside(path: Path, tag: str) -> str:
    """Move a month file out of what a reindex reads (kept, never deleted); return its new name."""
    if not path.exists():
        return ""
    target = path.parent / "reverted" / f"{path.stem}.{tag}{path.suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    path.replace(target)
    return str(target.relative_to(path.parent.parent.parent))
