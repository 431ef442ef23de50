"""Undo a sleep cycle's recorded changes, one or all of them; nothing is deleted.

`ChangeReverter.revert(cycle_id, change=N)` undoes one change, or every change of a cycle
(newest first, and the cycle's applied dream revisions with them):

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

Each revert is recorded as a change of the same cycle (kind `reverted`, target `#N`);
reverting a change twice is refused with a message that says when it was reverted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from daemon.log import get_logger
from daemon.memory.facts import Fact, FactError, local_timezone
from daemon.memory.months import (
    FoldSource,
    month_memory,
    read_month_file,
    render_month,
    write_month,
)
from daemon.memory.rows import iso, parse_iso
from daemon.sleep.changes import (
    REVERTED,
    Change,
    ChangeError,
    list_changes,
)
from daemon.sleep.maintenance import sync_pins
from daemon.sleep.revisions import RevisionError, RevisionStatus, RevisionStore
from daemon.store.folds import FoldRow, FoldsRepo
from daemon.store.sleep_changes import SleepChangesRepo
from daemon.store.sleep_cycles import SleepCyclesRepo

if TYPE_CHECKING:
    from daemon.clock import Clock
    from daemon.memory.system import MemorySystem
    from daemon.paths import Home
    from daemon.settings import Settings
    from daemon.store.db import Database

log = get_logger("sleep.revert")


@dataclass(frozen=True, kw_only=True)
class Reverted:
    """What one revert did: the changes undone (with the revert's own record) and the dream revisions."""

    cycle_id: str
    undone: tuple[tuple[Change, Change], ...]  # (the change, the `reverted` record)
    dream_revisions: tuple[str, ...] = ()
    not_reverted: tuple[str, ...] = ()  # changes and dream revisions that could not be, with why

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
        cycle = await SleepCyclesRepo(self.db).get(cycle_id)
        if cycle is None:
            raise ChangeError(f"no sleep cycle {cycle_id!r}; `reverie sleep list` lists them")
        if cycle.status == "running":
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
            record = await self._revert_one(picked[0])
            return Reverted(cycle_id=cycle_id, undone=((picked[0], record),))
        store = RevisionStore(self.home, self.db)
        dreamt = await store.for_cycle(cycle_id)
        revisions = [r for r in dreamt if r.status == RevisionStatus.APPLIED]
        pending = [c for c in changes if not c.reverted_at]
        if not pending and not revisions:
            if changes or any(r.status == RevisionStatus.REVERTED for r in dreamt):
                raise ChangeError(
                    f"sleep cycle {cycle_id}'s changes were all reverted already; nothing to revert"
                )
            raise ChangeError(
                f"sleep cycle {cycle_id} changed nothing in memory or the topics; nothing to revert"
            )
        undone: list[tuple[Change, Change]] = []
        refused: list[str] = []
        for c in reversed(pending):
            # One change that cannot be undone (a fact changed since by hand) does not keep
            # the rest of the night in place; it is reported with why.
            try:
                undone.append((c, await self._revert_one(c)))
            except ChangeError as exc:
                refused.append(f"#{c.seq} {c.kind} {c.target}: {exc}")
        done: list[str] = []
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
        if undo is None and change.kind.startswith("shared_fact_"):
            # The shared namespace is every agent's: one agent's revert would undo what the
            # others already read. The person corrects the shared fact itself instead.
            raise ChangeError(
                f"change {change.ref} changed a shared fact, which a sleep revert does not undo; "
                f"restate it with `reverie remember --shared` or correct it with "
                f"`reverie remember --correct {change.target} TEXT`"
            )
        if undo is None:
            raise ChangeError(
                f"change {change.ref} is of kind {change.kind!r}, which cannot be reverted"
            )
        at = self.clock.now().isoformat(timespec="seconds")
        label = f"reverted (sleep change {change.ref})"
        done = await undo(change, label)
        note = f"reverted #{change.seq} {change.kind} {change.target}: {done}"
        seq = await SleepChangesRepo(self.db).record_revert(change, at=at, kind=REVERTED, note=note)
        log.info("sleep change reverted", change=change.ref, kind=change.kind, target=change.target)
        return Change(
            cycle_id=change.cycle_id, seq=seq, at=at, kind=REVERTED, target=f"#{change.seq}",
            before=change.after, after=change.before, note=note,
        )  # fmt: skip

    # --- facts ---------------------------------------------------------------------------

    def _fact_id(self, change: Change, side: dict[str, Any] | None) -> str:
        return str((side or {}).get("id") or change.target)

    async def _logged_fact(self, change: Change, side: dict[str, Any] | None) -> Fact:
        """The fact a change names (on `side`), as the facts log holds it now."""
        facts = self.memory.facts
        await facts.load()
        uid = self._fact_id(change, side)
        fact = facts.get(uid)
        if fact is None:
            raise ChangeError(f"change {change.ref}: fact {uid} is not in the facts log")
        return fact

    async def _unmine(self, change: Change, label: str) -> str:
        fact = await self._logged_fact(change, change.after)
        if not fact.active:
            return f"{fact.id} was no longer active ({fact.reason or 'retired'})"
        await self.memory.facts.retract(fact.id, reason=label, origin="system")
        return f"{fact.id} retracted"

    async def _unretire(self, change: Change, label: str) -> str:
        fact = await self._logged_fact(change, change.before)
        if fact.active:
            return f"{fact.id} was active again already"
        try:
            await self.memory.facts.restore(fact.id, origin="system", reason=label)
        except FactError as exc:
            raise ChangeError(f"change {change.ref}: {exc}") from None
        return f"{fact.id} active again"

    async def _unsupersede(self, change: Change, label: str) -> str:
        fact = await self._logged_fact(change, change.before)
        new = str((change.after or {}).get("id") or "")
        if fact.active:
            return f"{fact.id} was current again already"
        try:
            await self.memory.facts.reinstate(fact.id, origin="system", reason=label)
        except FactError as exc:
            raise ChangeError(f"change {change.ref}: {exc}") from None
        return f"{fact.id} current again" + (f", {new} retired" if new else "")

    async def _unpromote(self, change: Change, label: str) -> str:
        uid = self._fact_id(change, change.after)
        await SleepChangesRepo(self.db).unpin_and_hold(
            uid, at=iso(self.clock.now()), change_ref=change.ref
        )
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
        repo = SleepChangesRepo(self.db)
        unlinked = await repo.unfold_and_hold(
            month_uid, reverted, at=iso(self.clock.now()), change_ref=change.ref
        )
        folds = FoldsRepo(self.db)
        kept = [_fold_source(r) for r in await folds.memories(await folds.folded_into(month_uid))]
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


def _fold_source(row: FoldRow) -> FoldSource:
    created = parse_iso(row.created_at)
    assert created is not None
    return FoldSource(
        uid=row.uid, kind=row.kind, title=row.title, text=row.text, origin=row.origin,
        created_at=created, session_id=row.session_id, source=row.source,
    )  # fmt: skip


def _set_aside(path: Path, tag: str) -> str:
    """Move a month file out of what a reindex reads (kept, never deleted); return its new name."""
    if not path.exists():
        return ""
    target = path.parent / "reverted" / f"{path.stem}.{tag}{path.suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    path.replace(target)
    return str(target.relative_to(path.parent.parent.parent))
