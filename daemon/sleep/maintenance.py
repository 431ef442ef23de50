"""The maintenance phase of sleep: fold old memories by month, pin important facts, retire stale ones, compact the database.

Five sub-steps, each idempotent on its own (a second run finds its earlier work and changes
nothing), none calling a model:

- **fold**: session summaries — and chunks of sessions that never got a summary — older than
  `[sleep] fold_after_days` are folded into one summary per month (`memory/months/`, index
  kind `month`). Sources are kept and linked (`memory_folds`); a month that gains sources is
  rewritten, a month with nothing new is left alone.
- **pin**: `FACTS.md` is in every context, so only the person decides what stands there.
  The person's own facts (origin `person`) whose importance reaches `promote_min_importance`
  are pinned into a generated block of `FACTS.md` (the rest of the file is the person's);
  the agent's facts that reach it are proposed, and pinned once the person confirms
  (`reverie remember --pin ID`); facts from tool output or imports are refused. Importance:
  the fact's stored importance, plus its tags (`important`, `pin`), plus how many other
  sessions mention it — never its wording ("always", "must"). A fact no longer active leaves
  the block. Each pinned line names the fact's origin (`daemon.memory.pins`).
- **retire**: a fact about a dated plan ("dentist on 2026-03-04"), stated before or on the
  date, is retracted `retire_after_days` after its last date — through the fact log's
  append-only `retract` event, with a reason, so `FactStore.restore` undoes it; a restored
  fact is never retired again.
- **shared** (PostgreSQL only): the shared namespace's facts — duplicates folded, changed
  values superseded, past plans retired — by one daemon at a time, under the shared
  namespace's own advisory lock (`daemon.sleep.shared_upkeep`); a daemon that finds it held
  skips the step and says so.
- **compact**: the WAL is checkpointed; `VACUUM` runs only when enough pages are free.

Between retire and compact, other systems do their upkeep on `sleep_housekeeping` (fork
transcript retention): each handler returns one line of what it changed ("" when nothing),
is safe to run again after a crash, and a failing one is logged without failing the phase.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import anyio

from daemon.errors import ReverieError
from daemon.events import SleepHousekeeping
from daemon.log import get_logger
from daemon.memory.api import UNTRUSTED_ORIGINS
from daemon.memory.facts import Fact, local_timezone
from daemon.memory.months import (
    FoldSource,
    month_key,
    month_memory,
    month_path,
    month_uid,
    read_month_file,
    render_month,
    trust_of,
    write_month,
)
from daemon.memory.pins import CONFIRMED, render_pinned, splice_pinned
from daemon.memory.rows import iso, parse_iso
from daemon.sleep.changes import ChangeSet, fold_holds, pin_holds
from daemon.sleep.mentions import Mentions, mentions_of
from daemon.sleep.phases import PhaseContext, PhaseReport
from daemon.sleep.plans import past_plan
from daemon.sleep.shared_upkeep import maintain_shared
from daemon.store.folds import FoldLink, FoldRow, FoldsRepo
from daemon.store.maintenance import StoreUpkeep
from daemon.store.pins import Pin, PinsRepo

if TYPE_CHECKING:
    from daemon.clock import Clock
    from daemon.memory.facts import FactStore
    from daemon.paths import Home
    from daemon.settings import Settings
    from daemon.store.db import Database

log = get_logger("sleep.maintenance")

PIN_TAGS = frozenset({"important", "pin", "pinned", "critical"})
_ISO_DAY = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")


@dataclass(frozen=True, kw_only=True)
class Importance:
    score: float
    why: tuple[str, ...]


class _LockLost(ReverieError):
    """This namespace's maintenance lock went to another daemon mid-phase."""

    def __init__(self, step: str) -> None:
        super().__init__(step)
        self.step = step


async def _still_held(ctx: PhaseContext, step: str) -> None:
    """Stop the phase between steps once its lock is another daemon's.

    A PostgreSQL session lock ends with its session; a reconnect takes it again unless another
    daemon got there first (`Database.still_holds`). Each step computes what is left to do, so
    the daemon that holds the lock now finishes the rest. The probe is one statement: a
    connection lost since the last step is renewed by it, and the lock with it or not.
    """
    if ctx.db.is_postgres:
        await StoreUpkeep(ctx.db).ping()
    if not ctx.db.still_holds("maintenance"):
        raise _LockLost(step)


class MaintenancePhase:
    """Fold, pin, retire, compact (see the module docstring); optional, no model calls."""

    name = "maintenance"
    optional = True

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        # Daemons sharing a namespace on PostgreSQL maintain it one at a time.
        async with ctx.db.exclusive("maintenance") as held:
            if held:
                try:
                    return await self._run(ctx)
                except _LockLost as lost:
                    log.warning(
                        "maintenance stopped: its lock went to another daemon", after=lost.step
                    )
                    return PhaseReport(
                        phase=self.name,
                        changed=(
                            f"stopped after {lost.step}: the connection to the store was renewed "
                            "and another daemon had taken this namespace's maintenance meanwhile "
                            "(it does the rest)"
                        ),
                        details={"stopped": "maintenance lock lost", "after": lost.step},
                    )
        log.info("maintenance skipped: another daemon holds this namespace's maintenance")
        return PhaseReport(
            phase=self.name,
            changed="skipped: another daemon is maintaining this namespace now",
            details={"skipped": "another daemon holds the maintenance lock"},
            nothing_changed=True,
        )

    async def _run(self, ctx: PhaseContext) -> PhaseReport:
        folded = await fold_months(ctx)
        await _still_held(ctx, "folding months")
        retired = await retire_stale(ctx)
        await _still_held(ctx, "retiring stale facts")
        pinned = await pin_facts(ctx)
        await _still_held(ctx, "pinning")
        shared = await maintain_shared(ctx)
        upkeep = await ctx.bus.gather(SleepHousekeeping(cycle_id=ctx.cycle_id, at=ctx.clock.now()))
        kept = [line for _handler, line in upkeep.of(str)]
        await _still_held(ctx, "housekeeping")
        compacted = await compact(ctx)
        parts = []
        if folded["sources"]:
            parts.append(
                f"folded {folded['sources']} memories into {len(folded['months'])} monthly "
                f"summar{'y' if len(folded['months']) == 1 else 'ies'} ({', '.join(folded['months'])})"
            )
        if pinned["pinned"] or pinned["unpinned"]:
            parts.append(
                f"pinned {len(pinned['pinned'])} fact(s), unpinned {len(pinned['unpinned'])} in FACTS.md"
            )
        if pinned["proposed"]:
            parts.append(
                f"proposed {len(pinned['proposed'])} fact(s) not in the person's own words for "
                f"pinning ({', '.join(pinned['proposed'])}): the person confirms with "
                "`reverie remember --pin ID`"
            )
        if retired:
            ids = [r["id"] for r in retired]
            shown = ", ".join(ids[:8]) + (f", … {len(ids) - 8} more" if len(ids) > 8 else "")
            parts.append(f"retired {len(retired)} stale fact(s) ({shown})")
        idle = (
            not parts and not any(kept) and not compacted["vacuumed"] and not shared.get("changes")
        )
        if not parts:
            parts.append("nothing to fold, pin or retire")
        if shared["summary"]:
            parts.append(shared["summary"])
        parts.extend(line for line in kept if line)
        parts.append(compacted["summary"])
        files = tuple(folded["files"]) + ((str(ctx.home.facts_file),) if pinned["written"] else ())
        return PhaseReport(
            phase=self.name,
            changed="; ".join(parts),
            details={
                "fold": folded,
                "pin": pinned,
                "retired": retired,
                "housekeeping": kept,
                "compact": compacted,
                "shared": shared,
            },
            files=files,
            nothing_changed=idle,
        )


# --- fold ---------------------------------------------------------------------------------


def _source(row: FoldRow) -> FoldSource:
    created = parse_iso(row.created_at)
    assert created is not None
    return FoldSource(
        uid=row.uid,
        kind=row.kind,
        title=row.title,
        text=row.text,
        origin=row.origin,
        created_at=created,
        session_id=row.session_id,
        source=row.source,
    )


async def fold_months(ctx: PhaseContext) -> dict[str, Any]:
    """Fold day-level memories older than the configured age into monthly summaries."""
    tz = local_timezone(ctx.settings)
    now = ctx.clock.now()
    folds = FoldsRepo(ctx.db)
    cutoff = iso(now - timedelta(days=ctx.settings.sleep.fold_after_days))
    held = await fold_holds(ctx.db)  # folds the person reverted stay undone
    new = [src for src in map(_source, await folds.foldable(cutoff)) if src.uid not in held]
    changes = ChangeSet.open(ctx.db, ctx.cycle_id, clock=ctx.clock)
    groups: dict[tuple[str, str], list[FoldSource]] = defaultdict(list)
    for src in new:
        groups[(month_key(src.created_at, tz), trust_of(src.origin))].append(src)
    files = [
        str(await _fold_month(ctx, folds, changes, month, trust, fresh, now=now, tz=tz))
        for (month, trust), fresh in sorted(groups.items())
    ]
    months = sorted({m if t == "trusted" else f"{m} (imported)" for m, t in groups})
    return {"sources": len(new), "months": months, "files": files}


async def _fold_month(
    ctx: PhaseContext,
    folds: FoldsRepo,
    changes: ChangeSet,
    month: str,
    trust: str,
    fresh: list[FoldSource],
    *,
    now: datetime,
    tz: Any,
) -> Path:
    """Fold `fresh` into the month's summary (with what it folded before); return its file."""
    uid = month_uid(month, trust)
    earlier_uids = await folds.folded_into(uid)
    earlier = [_source(r) for r in await folds.memories(earlier_uids)] if earlier_uids else []
    everything = earlier + fresh
    path = month_path(ctx.home.memory_dir / "months", month, trust)
    rel = str(path.relative_to(ctx.home.root))
    await changes.record(
        "month_folded",
        uid,
        before={"month_uid": uid, "file": rel, "sources": sorted(earlier_uids)}
        if earlier_uids
        else None,
        after={
            "month_uid": uid,
            "month": month,
            "file": rel,
            "sources": [s.uid for s in fresh],
            "sessions": sorted({s.session_id for s in fresh if s.session_id}),
        },
        note=f"{len(fresh)} day-level memories folded into {month}"
        + (" (imported)" if trust != "trusted" else ""),
    )
    text = render_month(month, trust, everything, tz=tz, updated=now)
    await anyio.to_thread.run_sync(write_month, path, text)
    meta, body = await anyio.to_thread.run_sync(read_month_file, path)
    latest = max(s.created_at for s in everything)
    await ctx.memory.index.upsert([month_memory(meta, body, path, created=latest)])
    if await folds.is_retired(uid):
        await ctx.memory.index.restore(
            uid
        )  # retired when its earlier fold was reverted: in use again
    await folds.link([FoldLink(s.uid, uid, iso(now)) for s in fresh])
    log.info(
        "month folded",
        month=month,
        trust=trust,
        new_sources=len(fresh),
        sources=len(everything),
        file=path.name,
    )
    return path


# --- retire -------------------------------------------------------------------------------


def stale_date(
    fact: Fact, today: date, tz: Any, grace_days: int, *, store: FactStore | None = None
) -> date | None:
    """The date that makes `fact` stale, or None: a plan stated on or before its last date, long past.

    A change that names no date ("the meetup moves to Lyon") is of the occasion it changed:
    with `store`, its date is the one the superseded fact named.
    """
    if fact.target != "memory" or not fact.active or fact.restored_at is not None:
        return None
    if store is not None and fact.attribute != "when" and not _ISO_DAY.search(fact.text):
        prev, seen = store.get(fact.supersedes or ""), {fact.id}
        while prev is not None and prev.id not in seen and not _ISO_DAY.search(prev.text):
            seen.add(prev.id)
            prev = store.get(prev.supersedes or "")
        if prev is not None and _ISO_DAY.search(prev.text):
            dated = replace(fact, text=f"{fact.text} ({', '.join(_ISO_DAY.findall(prev.text))})")
            return stale_date(dated, today, tz, grace_days)
    # Stated when it was said (a mined fact is written the night after, or months after when
    # sleep reads a backlog): a plan said before its date is a plan, whenever it was mined.
    return past_plan(fact.text, fact.valid_since, today=today, tz=tz, grace_days=grace_days)


async def retire_stale(ctx: PhaseContext) -> list[dict[str, str]]:
    """Retract facts about dated plans that have passed (reversible with `FactStore.restore`)."""
    store = ctx.memory.facts
    await store.load()
    tz = local_timezone(ctx.settings)
    today = ctx.clock.now().astimezone(tz).date()
    grace = ctx.settings.sleep.retire_after_days
    changes = ChangeSet.open(ctx.db, ctx.cycle_id, clock=ctx.clock)
    out: list[dict[str, str]] = []
    async with store.rendering_once():
        for fact in store.facts(target="memory"):
            when = stale_date(fact, today, tz, grace, store=store)
            if when is not None:
                out.append(await _retire(store, changes, fact, when, grace))
    return out


async def _retire(
    store: FactStore, changes: ChangeSet, fact: Fact, when: date, grace: int
) -> dict[str, str]:
    """Retract one stale fact, its change recorded first."""
    reason = f"stale: its date {when.isoformat()} passed more than {grace} day(s) ago (sleep maintenance)"
    await changes.record(
        "fact_retired",
        fact.id,
        before={"id": fact.id, "text": fact.text, "target": fact.target},
        after={"id": fact.id, "reason": reason},
        note=fact.text[:200],
    )
    await store.retract(fact.id, reason=reason, origin="system")
    log.info("stale fact retired", id=fact.id, date=when.isoformat())
    return {"id": fact.id, "reason": reason}


# --- pin ----------------------------------------------------------------------------------


async def importance(db: Database, fact: Fact, *, mentions: Mentions | None = None) -> Importance:
    """How important a fact is, from what is known about it (0..1, with the reasons).

    Wording earns nothing: "always" or "must" in a fact is exactly what a page that talks the
    agent into `remember` would write. Tags count (on the person's own facts the person set
    them), and so do mentions in other sessions. Only the person's own facts are pinned on
    this score alone, so neither can lift text from elsewhere into FACTS.md.
    """
    stored = await PinsRepo(db).importance(fact.id)
    score = stored if stored is not None else (0.8 if fact.target == "profile" else 0.7)
    why: list[str] = []
    if PIN_TAGS & set(fact.tags):
        score += 0.2
        why.append("tagged " + ", ".join(sorted(PIN_TAGS & set(fact.tags))))
    sessions = await (mentions.of(fact) if mentions is not None else mentions_of(db, fact))
    if sessions:
        score += min(0.2, 0.05 * sessions)
        why.append(f"mentioned in {sessions} other session(s)")
    return Importance(score=min(1.0, round(score, 3)), why=tuple(why))


def may_be_pinned(fact: Fact | None) -> TypeGuard[Fact]:
    """Active, and the person's own word or confirmed by the person (never tool or import text)."""
    return (
        fact is not None
        and fact.active
        and fact.origin not in UNTRUSTED_ORIGINS
        and (fact.origin == "person" or fact.pin_confirmed_at is not None)
    )


async def pin_facts(ctx: PhaseContext) -> dict[str, Any]:
    """The nightly pin pass: `sync_pins` with scoring and proposals."""
    return await sync_pins(
        ctx.memory.facts,
        db=ctx.db,
        home=ctx.home,
        settings=ctx.settings,
        clock=ctx.clock,
        score=True,
        changes=ChangeSet.open(ctx.db, ctx.cycle_id, clock=ctx.clock),
    )


async def sync_pins(
    store: FactStore,
    *,
    db: Database,
    home: Home,
    settings: Settings,
    clock: Clock,
    score: bool,
    changes: ChangeSet | None = None,
) -> dict[str, Any]:
    """Bring FACTS.md's pinned block in line with the facts; return what changed.

    Pinned: facts the person confirmed, and (with `score`) the person's own facts whose
    importance reaches `promote_min_importance`. A trusted fact that is not the person's own
    word and reaches it is proposed instead (once; `reverie remember --pin ID` confirms). A
    fact from tool output or an import that reaches it is refused. A pin that no longer may
    be (retracted, corrected, or pinned without confirmation by an older version) is dropped.
    Without `score` (right after the person confirms a pin) nothing is scored or proposed.
    A fact whose promotion was reverted (`sleep_pin_holds`) is pinned again only when the
    person confirms it after the revert. With `changes`, each new pin is recorded there.
    """
    await store.load()
    tz = local_timezone(settings)
    now = iso(clock.now())
    pins = PinsRepo(db)
    pinned = await pins.pinned_ids()
    decided = _PinDecisions()
    mentions: Mentions | None = None  # loaded when the first fact is scored
    for fact in _unsettled(store, pinned, await pin_holds(db)):
        if fact.pin_confirmed_at is not None and may_be_pinned(fact):
            day = fact.pin_confirmed_at.astimezone(tz).date().isoformat()
            decided.added.append(Pin(fact.id, f"{CONFIRMED} on {day}"))
            continue
        if not score:
            continue
        if mentions is None:
            mentions = await Mentions.load(db)
        imp = await importance(db, fact, mentions=mentions)
        if imp.score >= settings.sleep.promote_min_importance:
            await decided.promote(store, fact, imp)
    if mentions is not None:
        await mentions.save(at=now)
    removed = sorted(fid for fid in pinned if not may_be_pinned(store.get(fid)))
    if changes is not None:
        for pin in decided.added:
            await changes.record(
                "fact_promoted",
                pin.fact_id,
                before=None,
                after={"id": pin.fact_id, "reason": pin.reason},
                note=pin.reason,
            )
    await pins.save(added=decided.added, removed=removed, at=now)
    total, written = await _render_pins(store, pins, home, tz)
    for pin in decided.added:
        log.info("fact pinned", id=pin.fact_id, reason=pin.reason)
    return {
        "pinned": [pin.fact_id for pin in decided.added],
        "unpinned": removed,
        "proposed": decided.proposed,
        "awaiting": decided.awaiting,
        "refused": decided.refused,
        "written": written,
        "total": total,
    }


def _unsettled(store: FactStore, pinned: set[str], held: dict[str, datetime]) -> list[Fact]:
    """The facts a pin pass decides on: not those pinned that may stay, nor those whose
    promotion the person reverted and has not confirmed since."""
    return [
        fact
        for fact in store.facts()
        if not (fact.id in pinned and may_be_pinned(fact))
        and not (
            fact.id in held
            and (fact.pin_confirmed_at is None or fact.pin_confirmed_at <= held[fact.id])
        )
    ]


@dataclass(kw_only=True)
class _PinDecisions:
    """What one pin pass decided: pins to add, and facts proposed, awaiting, refused."""

    added: list[Pin] = field(default_factory=list)
    proposed: list[str] = field(default_factory=list)
    awaiting: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    async def promote(self, store: FactStore, fact: Fact, imp: Importance) -> None:
        """A fact important enough to pin: pinned when it is the person's own word, proposed
        (once) when it is the agent's, refused when it came from tool output or an import."""
        reason = f"importance {imp.score:.2f}: {'; '.join(imp.why) or 'stored importance'}"
        if fact.origin in UNTRUSTED_ORIGINS:
            self.refused.append(fact.id)
            log.info("pin refused: untrusted origin", id=fact.id, origin=fact.origin)
        elif fact.origin == "person":
            self.added.append(Pin(fact.id, reason))
        elif await store.propose_pin(fact.id, reason=reason):
            self.proposed.append(fact.id)
        else:
            self.awaiting.append(fact.id)


async def _render_pins(store: FactStore, pins: PinsRepo, home: Home, tz: Any) -> tuple[int, bool]:
    """Write FACTS.md's pinned block from the pins that may stand; (how many, whether the
    file changed)."""
    stored = await pins.pins()
    notes = {p.fact_id: p.reason for p in stored}
    facts = [f for p in stored if may_be_pinned(f := store.get(p.fact_id))]
    written: bool = await anyio.to_thread.run_sync(
        _write_pinned, home, render_pinned(facts, notes, tz), not facts
    )
    return len(facts), written


def _write_pinned(home: Home, block: str, empty: bool) -> bool:
    from daemon.durable import write_atomic

    path = home.facts_file
    current = path.read_text(encoding="utf-8") if path.exists() else "# Pinned facts\n"
    updated = splice_pinned(current, block, empty)
    if updated == current:
        return False
    write_atomic(path, updated)
    return True


# --- compact ------------------------------------------------------------------------------


async def compact(ctx: PhaseContext) -> dict[str, Any]:
    """Checkpoint the WAL; VACUUM when at least the configured fraction of pages is free."""
    upkeep = StoreUpkeep(ctx.db)
    before = await upkeep.pages()
    if before is None:
        # PostgreSQL: the server's autovacuum keeps its tables; there is no WAL of ours.
        return {"vacuumed": False, "summary": "PostgreSQL: the server's autovacuum compacts"}
    pages, free, fraction = before.total, before.free, before.free_fraction
    vacuumed = False
    if pages and free and fraction >= ctx.settings.sleep.vacuum_min_free_fraction:
        await upkeep.vacuum()
        vacuumed = True
    busy, wal_pages, done = await ctx.db.checkpoint()
    shrunk = await upkeep.pages()
    after = shrunk.total if shrunk is not None else pages
    summary = (
        f"vacuumed ({pages} → {after} pages) and checkpointed"
        if vacuumed
        else f"checkpointed (vacuum not needed: {fraction:.0%} free)"
    )
    return {
        "vacuumed": vacuumed,
        "pages_before": pages,
        "pages_after": after,
        "free_pages": free,
        "checkpoint": {"busy": busy, "wal_pages": wal_pages, "checkpointed": done},
        "summary": summary,
    }
