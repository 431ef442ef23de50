"""What every write of the fact log shares: one lock, the trust rule, the append, the index.

A write — told (`remember`, `correct`), mined (`record_mined`) or a change of status
(`retract`, `restore`, `reinstate`, `pin`) — asks the trust rule (`check`/`allows`, over
`daemon.memory.fact_trust.refusal`), appends one event to the log under the lock, then writes
the fact's index row and the renderings. The log is written first: cancelled after it, the
index is behind, and `FactStore.sync` (at start-up) brings it level.
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Any

import anyio

from daemon.clock import Clock
from daemon.log import get_logger
from daemon.memory.api import MemoryItem
from daemon.memory.fact_log import MAX_FACT_CHARS, Fact, FactError, FactLog, stamp
from daemon.memory.fact_render import FactRenderings
from daemon.memory.fact_trust import ORIGINS, Act, refusal, untrusted
from daemon.memory.fact_views import FactView
from daemon.memory.ids import fact_uid
from daemon.memory.index import MemoryIndex
from daemon.memory.rows import NewMemory, iso
from daemon.redact import redactor_for
from daemon.settings import Settings
from daemon.store.facts import FactsRepo
from daemon.store.memories import MemoriesRepo
from daemon.store.postgres import StoreAway

log = get_logger("memory.facts")

MINED_IMPORTANCE = 0.6  # below a told fact's 0.7: said in passing, not asked to be kept


class FactWriter:
    """The fact log's writing desk, shared by the told, mined and status writes.

    `lock` serialises writes in this process (delegate forks write concurrently); the log's
    `flock` serialises them across processes.
    """

    def __init__(
        self,
        *,
        log: FactLog,
        view: FactView,
        renderings: FactRenderings,
        index: MemoryIndex,
        settings: Settings,
        clock: Clock,
        tz: tzinfo,
    ) -> None:
        self.log = log
        self.view = view
        self.renderings = renderings
        self.index = index
        self.rows = FactsRepo(index.db)
        self.memories = MemoriesRepo(index.db)
        self.settings = settings
        self.clock = clock
        self.tz = tz
        self.lock = anyio.Lock()

    async def load(self) -> None:
        """Replay what was appended since the last read (by this process or another)."""
        await anyio.to_thread.run_sync(self.log.refresh)

    # --- checks ------------------------------------------------------------------------
    @staticmethod
    def check_origin(origin: str) -> None:
        if origin not in ORIGINS:
            raise FactError(f"unknown origin {origin!r}; expected one of {', '.join(ORIGINS)}")

    @staticmethod
    def check(act: Act, origin: str, *, fact: Fact | None = None, target: str = "") -> None:
        """Raise `FactError` when the trust rule refuses `origin`'s word this act."""
        why = refusal(act, origin, fact=fact, target=target)
        if why is not None:
            raise FactError(why)

    def require_store(self) -> None:
        """Refuse a change to a fact already indexed while the store's server is away: the
        log would take it and the index keep the old state (only new facts are caught up)."""
        since = self.index.db.away_since
        if since is not None:
            raise FactError(
                f"the memory store's server is away since {since:%H:%M:%S %Z}; "
                "corrections and retractions wait until it is back (nothing was changed)"
            )

    def require(self, uid: str) -> Fact:
        """The fact `uid` names, or a `FactError` saying there is none."""
        fact = self.view.get(uid.strip())
        if fact is None:
            raise FactError(f"no fact with id {uid!r} (ids look like fact:12; `recall` shows them)")
        return fact

    def require_active(self, uid: str) -> Fact:
        """The fact `uid` names while it holds, or a `FactError` saying what became of it."""
        uid = fact_uid(uid)
        fact = self.view.get(uid)
        if fact is None:
            raise FactError(f"no fact with id {uid!r} (ids look like fact:12; `recall` shows them)")
        if fact.superseded_by:
            latest = self.view.current(uid)
            raise FactError(
                f"{uid} was already corrected by {fact.superseded_by}; correct {latest.id if latest else fact.superseded_by} instead"
            )
        if not fact.active:
            raise FactError(
                f"{uid} was retracted ({fact.reason or 'no reason given'}); remember it again if it holds"
            )
        return fact

    # --- text --------------------------------------------------------------------------
    def prepare(self, text: str) -> tuple[str, str]:
        """(the wording as given, one line; the same with relative dates resolved)."""
        wording = " ".join(str(text).split())
        if not wording:
            raise FactError("nothing to remember: the text is empty")
        if len(wording) > MAX_FACT_CHARS:
            raise FactError(
                f"a fact is one atomic statement; this one is {len(wording)} characters "
                f"(limit {MAX_FACT_CHARS}): split it into several facts"
            )
        # The mining's phrases and dates are imported by the first fact written, not at start.
        from daemon.memory.mining import resolve_plan_dates

        return wording, resolve_plan_dates(wording, self.clock.now().astimezone(self.tz))

    def withhold(self, text: str, origin: str) -> tuple[str, list[str]]:
        """`text` with the secrets never kept masked, and the kinds masked (`daemon.redact`)."""
        named_too = untrusted(origin)  # a tool's output, a file, a page, an import
        return redactor_for(self.settings).withhold(str(text), named_too=named_too)

    async def similar(self, text: str, kind: str) -> MemoryItem | None:
        """An active fact very like `text` (the index's near-duplicate check), if any."""
        # An embedder whose cosines all sit high (e5: distinct facts at 0.95) raises the bar.
        threshold = max(
            self.settings.memory.near_duplicate_threshold,
            float(getattr(self.index.embedder, "duplicate_floor", 0.0)),
        )
        try:
            similar = await self.index.similar(text, [kind], threshold)
        except StoreAway:
            # The store's server is away: exact duplicates are still caught from the log; a
            # near one is not, rather than refusing what the person asked to keep.
            return None
        for item in similar:
            fact = self.view.get(item.id)
            if fact is not None and fact.active:
                return item
        return None

    # --- writing -----------------------------------------------------------------------
    def event(self, op: str, **fields: Any) -> dict[str, Any]:
        """A new fact's event (its id allocated when appended), stamped now."""
        return {"v": 1, "op": op, "id": None, "ts": stamp(self.clock.now()), **fields}

    async def append(self, event: dict[str, Any]) -> Fact:
        """Append `event` (fsynced) and return the fact as the log now holds it."""
        written = await anyio.to_thread.run_sync(self.log.append, event)
        return self.log.facts[written["id"]]

    async def log_status(self, op: str, fact_id: str, origin: str, reason: str) -> None:
        """Append a status event (retract, restore, reinstate, pin, propose_pin); the reason is
        one line (≤ 500 chars)."""
        event = {
            "v": 1,
            "op": op,
            "id": fact_id,
            "ts": stamp(self.clock.now()),
            "origin": origin,
            "reason": " ".join(str(reason).split())[:500]
            or {"retract": "retracted", "restore": "restored"}.get(op, op),
        }
        await anyio.to_thread.run_sync(self.log.append, event)

    async def index_and_render(self, fact: Fact) -> None:
        """Write `fact`'s index row (what it changed from, too) and the renderings."""
        try:
            await self.index.upsert([memory_of(fact, self.view.get(fact.supersedes or ""))])
        except StoreAway:
            # The log holds it: `sync` indexes it once the server is back.
            log.warning("fact kept in the log; indexed when the store is back", id=fact.id)
        await self.renderings.render()


def memory_of(fact: Fact, previous: Fact | None = None) -> NewMemory:
    """The index row of `fact`; `previous` is the fact it supersedes (what it changed from)."""
    meta: dict[str, object] = {
        "target": fact.target,
        "wording": fact.wording,
        "untrusted": untrusted(fact.origin),
        "source": fact.source,
    }
    if fact.key:
        meta.update(subject=fact.subject, attribute=fact.attribute, value=fact.value)
    if fact.mined:
        meta.update(mined_kind=fact.mined_kind, provenance={
            "session": fact.session, "message_ids": list(fact.message_ids)})  # fmt: skip
    if fact.replaced and fact.value:
        meta["replaced"] = fact.replaced  # the value its statement names as replaced
    if previous is not None:
        meta.update(
            changed_from=fact.replaced
            or (previous.value if previous.value and fact.value else previous.text),
            changed_on=iso(fact.valid_since),
        )
    return NewMemory(
        uid=fact.id,
        kind=fact.kind,
        text=fact.text,
        origin=fact.origin,  # type: ignore[arg-type]
        created_at=fact.created_at,
        valid_from=fact.valid_from,
        tags=fact.tags,
        importance=MINED_IMPORTANCE if fact.mined else (0.8 if fact.target == "profile" else 0.7),
        explicit=not fact.mined,
        supersedes=fact.supersedes,
        source="memory/facts.jsonl",
        meta=meta,
    )
