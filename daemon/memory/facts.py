"""Explicit facts: `remember`, `correct`, `retract` over an append-only, fsynced event log.

`memory/facts.jsonl` is the source of truth (`daemon.memory.fact_log`): one JSON event per
line, never rewritten. The index rows, `MEMORY.md` (the running log) and `PROFILE.md` (stable
facts about the person) are derived from it and can be rebuilt at any time (`sync`). A
correction links the new fact to the one it supersedes; a retraction retires a fact with a
reason. Neither deletes anything, so history stays searchable.

Every event carries the origin of the text it came from (`ORIGINS`): `person` for the
person's own word (the CLI, or their own words in a turn: `daemon.agent.provenance`), `agent`,
`tool`, `system`, `import`. One trust rule says what each origin's word may do to a fact —
add, supersede, amend, pin (`daemon.memory.fact_trust`); every write below asks it. Pinning
into `FACTS.md` follows it: sleep proposes (`propose_pin`, origin system) a fact that is not
the person's own word, and only the person's `pin` event confirms it.

Facts are *told* (the person or the agent asked to keep them: `remember`,
`daemon.memory.fact_told`) or *mined* (the sleep cycle found them said in passing:
`record_mined`, `daemon.memory.fact_mined`, with the session and message ids they rest on). A
fact may carry a key (`subject`, `attribute`): a fact with the key of a current one and
another value is a change — it supersedes the old one, whose validity ends where the new
one's begins; the old one stays in history (`history`). A less trusted word than the current
fact's changes nothing. Retraction, restoring, reinstating and pinning are
`daemon.memory.fact_lifecycle`; reading the facts, `daemon.memory.fact_views`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from daemon.clock import Clock
from daemon.memory.fact_lifecycle import FactLifecycle
from daemon.memory.fact_log import Fact, FactError, FactLog, local_timezone, normalise
from daemon.memory.fact_mined import MinedFacts, MinedOutcome
from daemon.memory.fact_render import FactRenderings
from daemon.memory.fact_told import RememberResult, ToldFacts, fact_change
from daemon.memory.fact_trust import ORIGINS
from daemon.memory.fact_views import FactView
from daemon.memory.fact_writes import FactWriter, memory_of
from daemon.memory.index import MemoryIndex
from daemon.paths import Home
from daemon.settings import Settings

if TYPE_CHECKING:
    from daemon.memory.mining import MinedFact

# What callers import from here (each part also has its own module).
__all__ = [
    "ORIGINS",
    "Fact",
    "FactError",
    "FactLog",
    "FactStore",
    "MinedOutcome",
    "RememberResult",
    "fact_change",
    "local_timezone",
    "normalise",
]


class FactStore:
    """Remember, correct and retract explicit facts; keep the index and renderings in step.

    One object for the callers, over the parts that do the work: the log's replay and
    reads (`FactView`), the shared write desk (`FactWriter`: one lock, the trust rule, the
    append), told facts, mined facts, status changes and the renderings. Writes are
    serialised in-process by the desk's lock (delegate forks write concurrently) and across
    processes by the log's flock. Cancellation during a write may leave the index behind the
    log; `sync()` (run at start-up) repairs that from the log.
    """

    def __init__(self, *, home: Home, index: MemoryIndex, settings: Settings, clock: Clock) -> None:
        self.home = home
        self.index = index
        self.settings = settings
        self.clock = clock
        self.tz = local_timezone(settings)
        self.log = FactLog(home.memory_dir / "facts.jsonl")
        self.view = FactView(self.log)
        self.renderings = FactRenderings(self.view, home.memory_dir, self.tz)
        self.memory_md = self.renderings.memory_md
        self.profile_md = self.renderings.profile_md
        self.writer = FactWriter(
            log=self.log, view=self.view, renderings=self.renderings, index=index,
            settings=settings, clock=clock, tz=self.tz,
        )  # fmt: skip
        self.told = ToldFacts(self.writer, home)
        self.mined = MinedFacts(self.writer)
        self.lifecycle = FactLifecycle(self.writer)

    # --- reading -----------------------------------------------------------------------
    async def load(self) -> None:
        """Replay what was appended to the log since the last read (by anyone)."""
        await self.writer.load()

    def get(self, uid: str) -> Fact | None:
        """The fact `uid` names (`fact:2` or the bare `2`), if there is one."""
        return self.view.get(uid)

    def facts(self, *, target: str | None = None, include_retired: bool = False) -> list[Fact]:
        """Facts in the order they were written."""
        return self.view.facts(target=target, include_retired=include_retired)

    def current(self, uid: str) -> Fact | None:
        """Follow corrections from `uid` to the fact that replaced it last."""
        return self.view.current(uid)

    def history(self, uid: str) -> list[Fact]:
        """The chain of values through fact `uid`, oldest first (empty when unknown)."""
        return self.view.history(uid)

    def kept_secrets(self) -> frozenset[str]:
        """The values of named secrets in the facts kept on the person's or the agent's word."""
        return self.view.kept_secrets()

    # --- writing -----------------------------------------------------------------------
    async def remember(
        self, text: str, *, target: str = "memory", origin: str = "person", tags: Sequence[str] = ()
    ) -> RememberResult:
        """Store one fact now; detect exact and near duplicates instead of storing twice.

        A key-shaped secret (an API key, a token, a private key) is never kept: it is masked
        before anything is stored, and so is a named one ("password is …") in untrusted words
        (a tool's output, an import); the result says what was withheld (`daemon.redact`).
        """
        return await self.told.remember(text, target=target, origin=origin, tags=tags)

    async def correct(self, uid: str, text: str, *, origin: str) -> RememberResult:
        """Supersede fact `uid` with `text`; the old fact stays in history, linked to the new one."""
        return await self.told.correct(uid, text, origin=origin)

    async def record_mined(self, mined: MinedFact) -> MinedOutcome:
        """Store a fact found in conversation: new, a change of a known one, or one known already."""
        return await self.mined.record_mined(mined)

    async def retract(self, uid: str, *, reason: str, origin: str) -> Fact:
        """Retire fact `uid` with `reason`; it stays searchable as history."""
        return await self.lifecycle.retract(uid, reason=reason, origin=origin)

    async def restore(self, uid: str, *, origin: str, reason: str = "restored") -> Fact:
        """Undo the retraction of fact `uid`; it is active again."""
        return await self.lifecycle.restore(uid, origin=origin, reason=reason)

    async def reinstate(self, uid: str, *, origin: str, reason: str = "reinstated") -> Fact:
        """Undo the supersession of fact `uid`: it is current again, its successor retired."""
        return await self.lifecycle.reinstate(uid, origin=origin, reason=reason)

    async def pin(self, uid: str, *, origin: str) -> Fact:
        """Record the person's confirmation that fact `uid` may be pinned in FACTS.md."""
        return await self.lifecycle.pin(uid, origin=origin)

    async def propose_pin(self, uid: str, *, reason: str) -> bool:
        """Ask the person to confirm pinning active fact `uid`; False when already asked (or gone)."""
        return await self.lifecycle.propose_pin(uid, reason=reason)

    # --- rebuilding --------------------------------------------------------------------
    async def sync(self, *, force: bool = False) -> int:
        """Bring the index in line with the log (after a crash, or a reindex); return rows written."""
        await self.load()
        everything = self.facts(include_retired=True)
        missing = [f for f in everything if force or await self.index.get(f.id) is None]
        if missing:
            await self.index.upsert([memory_of(f, self.get(f.supersedes or "")) for f in missing])
            for fact in missing:
                if fact.retired_at is not None:
                    await self.index.retire(
                        fact.id, at=fact.retired_at, superseded_by=fact.superseded_by
                    )
        if missing or self.renderings.missing():
            await self.render()
        return len(missing)

    @asynccontextmanager
    async def rendering_once(self) -> AsyncIterator[None]:
        """Write MEMORY.md and PROFILE.md once, at the end, for the facts stored inside."""
        async with self.renderings.rendering_once():
            yield

    async def render(self) -> None:
        """Regenerate MEMORY.md and PROFILE.md from the log (atomic replace)."""
        await self.renderings.render()
