"""The shared namespace's nightly upkeep: one daemon at a time, resumable by the next.

On PostgreSQL several agents read `shared.facts` (`daemon.memory.shared`), and each one's
maintenance phase runs this step after its own upkeep. Three kinds of change, none calling a
model, each computed from the facts current now:

- **duplicates**: the same fact shared twice (by two agents, or one twice: the same text once
  normalised) is folded into the oldest copy; the others are retired pointing at it.
- **changes**: a newer shared fact giving another value of the same subject and attribute
  (read by the extractive rules, `daemon.memory.facts.fact_change`, matched as the agent's own
  facts are, `FactStore.by_key`) supersedes the older one, whose `invalid_from` is the newer
  one's `valid_from`. An agent's word never supersedes the person's.
- **past plans**: a shared fact about a dated plan whose date passed is retired, by the rule
  that retires an agent's own (`daemon.sleep.plans.past_plan`).

Nothing is deleted: a retired row keeps its text, when it stopped holding, what replaced it,
why, and which agent and cycle retired it, and takes a new version so every agent's copy
follows. Each change is recorded in this agent's change set (kinds `shared_fact_*`), so
`reverie sleep show ID` lists it with the cycle's other changes.

**One daemon at a time**: the step runs on a connection of its own holding the session
advisory lock `reverie.shared.maintenance` (tried, never waited for: a second daemon skips the
step and says so). The server frees the lock when that session ends — with
`client_connection_check_interval`, even while a killed daemon's statement was waiting on a row.

**Resumable**: each change is one short transaction that retires its row only if the row is
still current (and what replaces it is too), so a daemon killed mid-way leaves every change
either made or not, and the next cycle — this daemon's or another's — computes what is left
and finishes it without redoing or re-stamping what was done.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemon.log import get_logger
from daemon.memory.facts import fact_change, local_timezone, normalise
from daemon.memory.rows import iso, parse_iso
from daemon.memory.shared import shared_uid
from daemon.sleep.changes import CHANGE_KINDS, ChangeKind, ChangeSet
from daemon.sleep.plans import past_plan
from daemon.store.shared_upkeep import CurrentSharedFact, SharedUpkeepStore
from daemon.store.sleep_changes import SleepChangesRepo

if TYPE_CHECKING:
    from daemon.sleep.phases import PhaseContext

log = get_logger("sleep.shared")

LOCK_KEY = "reverie.shared.maintenance"
APPLICATION = "reverie shared maintenance"
SKIPPED = "shared facts: skipped, another daemon is maintaining them now"
# Every change kind the shared upkeep records (what a late record looks for).
SHARED_CHANGE_KINDS = tuple(k for k in CHANGE_KINDS if k.startswith("shared_fact_"))

_KINDS: dict[str, ChangeKind] = {
    "duplicate": "shared_fact_folded",
    "superseded": "shared_fact_superseded",
    "stale": "shared_fact_retired",
}


@dataclass(frozen=True, kw_only=True)
class SharedRow:
    id: int
    text: str
    origin: str
    author: str
    valid_from: datetime

    @classmethod
    def of(cls, row: CurrentSharedFact) -> SharedRow:
        when = parse_iso(row.valid_from) or parse_iso(row.created_at) or datetime.now(UTC)
        return cls(id=row.id, text=row.text, origin=row.origin, author=row.author, valid_from=when)


@dataclass(frozen=True, kw_only=True)
class Retirement:
    """One planned change: retire `row` as `kind`, pointing at `by` (None for a past plan)."""

    kind: str  # duplicate | superseded | stale
    row: SharedRow
    by: SharedRow | None
    reason: str
    invalid_from: datetime


def _same_slot(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Two keys name one slot, by the rule the agent's own facts use (`FactStore.by_key`)."""
    (sa, aa), (sb, ab) = a, b
    loose = {aa, ab} <= {"value", "where", "when"} and "value" in {aa, ab}
    x, y = f" {sa} ", f" {sb} "
    return (aa == ab or loose) and (x in y or y in x)


def plan(
    rows: list[SharedRow], *, now: datetime, today: Any, tz: Any, grace_days: int
) -> list[Retirement]:
    """What tonight's upkeep retires among the current shared facts `rows`, in the order to do it."""
    out: list[Retirement] = []
    gone: set[int] = set()
    # Duplicates: the oldest copy stays.
    kept: dict[str, SharedRow] = {}
    for r in sorted(rows, key=lambda r: r.id):
        norm = normalise(r.text)
        first = kept.setdefault(norm, r)
        if first is not r:
            out.append(
                Retirement(
                    kind="duplicate", row=r, by=first, invalid_from=now,
                    reason=f"the same fact as {shared_uid(first.id)} (folded into it)",
                )
            )  # fmt: skip
            gone.add(r.id)
    # Changes: in time order, a fact gives the slot a new value over every older one holding it.
    keyed: list[tuple[SharedRow, tuple[str, str], str]] = []
    for r in sorted((r for r in rows if r.id not in gone), key=lambda r: (r.valid_from, r.id)):
        subject, attribute, value, _replaced = fact_change(r.text)
        if not (subject and attribute):
            continue
        key = (subject, attribute)
        for old, old_key, old_value in keyed:
            if old.id in gone or not _same_slot(old_key, key):
                continue
            if normalise(old_value) == normalise(value):
                continue  # the same value said again: not a change
            if old.origin == "person" and r.origin != "person":
                continue  # an agent's word never supersedes the person's
            out.append(
                Retirement(
                    kind="superseded", row=old, by=r, invalid_from=r.valid_from,
                    reason=f"{subject}/{attribute} changed: {shared_uid(r.id)} holds its value now",
                )
            )  # fmt: skip
            gone.add(old.id)
        keyed.append((r, key, value))
    # Past plans.
    for r in sorted((r for r in rows if r.id not in gone), key=lambda r: r.id):
        when = past_plan(r.text, r.valid_from, today=today, tz=tz, grace_days=grace_days)
        if when is None:
            continue
        out.append(
            Retirement(
                kind="stale", row=r, by=None,
                invalid_from=now,
                reason=f"stale: its date {when.isoformat()} passed more than {grace_days} "
                "day(s) ago (sleep maintenance)",
            )
        )  # fmt: skip
        gone.add(r.id)
    return out


async def maintain_shared(ctx: PhaseContext) -> dict[str, Any]:
    """Run the shared upkeep if no other daemon is; return what it did (`summary`: one line)."""
    db = ctx.db
    if not db.is_postgres or db.readonly:
        return {"ran": False, "summary": ""}
    async with SharedUpkeepStore.locked(db, lock_key=LOCK_KEY, application=APPLICATION) as shared:
        if shared is None:
            log.info("shared maintenance skipped: another daemon holds its lock")
            return {"ran": False, "skipped": True, "summary": SKIPPED, "changes": []}
        return await _maintain(shared, ctx)


async def _maintain(shared: SharedUpkeepStore, ctx: PhaseContext) -> dict[str, Any]:
    schema = ctx.db.schema
    changes = ChangeSet.open(ctx.db, ctx.cycle_id, clock=ctx.clock)
    recorded = await _record_missing(shared, ctx)
    rows = [SharedRow.of(r) for r in await shared.current()]
    tz = local_timezone(ctx.settings)
    today = ctx.clock.now().astimezone(tz).date()
    grace = ctx.settings.sleep.retire_after_days
    todo = plan(rows, now=ctx.clock.now(), today=today, tz=tz, grace_days=grace)
    done: list[dict[str, Any]] = []
    for r in todo:
        now = iso(ctx.clock.now())
        by = r.by.id if r.by is not None else None
        # One transaction per change, retiring the row only while it (and what replaces it)
        # is current: a change made before a crash, or by another daemon since, is not redone.
        made = await shared.retire(
            r.row.id, at=now, invalid_from=iso(r.invalid_from), by=by, kind=r.kind,
            reason=r.reason, agent=schema, cycle_id=ctx.cycle_id,
        )  # fmt: skip
        if not made:
            continue
        change = _change_of(r)
        await changes.record(
            _KINDS[r.kind], shared_uid(r.row.id),
            before=change["before"], after=change["after"], note=r.reason,
        )  # fmt: skip
        done.append({"id": shared_uid(r.row.id), "kind": r.kind, "by": change["after"]["by"]})
        log.info("shared fact retired", id=r.row.id, kind=r.kind, by=by)
    if done:
        await ctx.memory.index.shared.sync(force=True)
    return {"ran": True, "changes": done, "recorded_late": recorded, "summary": _summary(done)}


def _change_of(r: Retirement) -> dict[str, Any]:
    before = {"id": shared_uid(r.row.id), "text": r.row.text, "author": r.row.author}
    after = {
        "id": shared_uid(r.row.id),
        "retired_as": r.kind,
        "by": shared_uid(r.by.id) if r.by is not None else None,
        "by_text": r.by.text if r.by is not None else None,
        "invalid_from": iso(r.invalid_from),
        "reason": r.reason,
    }
    return {"before": before, "after": after}


async def _record_missing(shared: SharedUpkeepStore, ctx: PhaseContext) -> int:
    """Record changes this agent made to shared facts but was stopped before recording.

    A change is committed on the server first, stamped with the agent and its cycle; the
    record in this agent's change set follows. A daemon killed between the two leaves the
    stamp, and this puts the record into that cycle's set (recording is idempotent).
    """
    stamped = await shared.stamped(ctx.db.schema, list(_KINDS))
    if not stamped:
        return 0
    have = set(await SleepChangesRepo(ctx.db).targets_of(SHARED_CHANGE_KINDS))
    late = 0
    for r in stamped:
        if (r.retired_cycle, shared_uid(r.id)) in have:
            continue
        by = r.superseded_by
        after = {
            "id": shared_uid(r.id), "retired_as": r.retired_as,
            "by": shared_uid(by) if by else None, "by_text": None,
            "invalid_from": r.invalid_from, "reason": r.retired_reason,
        }  # fmt: skip
        await ChangeSet.open(ctx.db, r.retired_cycle, clock=ctx.clock).record(
            _KINDS[r.retired_as], shared_uid(r.id),
            before={"id": shared_uid(r.id), "text": r.text, "author": r.author},
            after=after, note=r.retired_reason or "",
        )  # fmt: skip
        late += 1
    return late


def _summary(done: list[dict[str, Any]]) -> str:
    def ids(kind: str) -> list[str]:
        return [
            d["id"]
            + (f" into {d['by']}" if kind == "duplicate" else "")
            + (f" by {d['by']}" if kind == "superseded" else "")
            for d in done
            if d["kind"] == kind
        ]

    parts = []
    if folded := ids("duplicate"):
        parts.append(f"folded {len(folded)} duplicate(s) ({', '.join(folded)})")
    if superseded := ids("superseded"):
        parts.append(f"superseded {len(superseded)} changed value(s) ({', '.join(superseded)})")
    if stale := ids("stale"):
        parts.append(f"retired {len(stale)} past plan(s) ({', '.join(stale)})")
    if not parts:
        return "shared facts: nothing to fold, supersede or retire"
    return "shared facts: " + "; ".join(parts)
