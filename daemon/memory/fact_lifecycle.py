"""A fact's status over time: retracted, restored, reinstated, proposed for pinning, pinned.

Each is one append-only event on the fact's id (`retract`, `restore`, `reinstate`,
`propose_pin`, `pin`); nothing is deleted, so every step can be undone by another: a
retraction by `restore` (sleep maintenance retires facts this way), a supersession by
`reinstate` (the old value holds again, its successor is retired). Who may do which is the
trust rule's (`daemon.memory.fact_trust`): untrusted text never touches a profile fact, and
only the person pins, never a fact that is untrusted text.
"""

from __future__ import annotations

from daemon.log import get_logger
from daemon.memory.fact_log import Fact, FactError
from daemon.memory.fact_writes import FactWriter, memory_of

log = get_logger("memory.facts")


class FactLifecycle:
    """Retract, restore, reinstate and pin facts, over the shared `FactWriter`."""

    def __init__(self, writer: FactWriter) -> None:
        self.w = writer

    async def retract(self, uid: str, *, reason: str, origin: str) -> Fact:
        """Retire fact `uid` with `reason`; it stays searchable as history."""
        w = self.w
        w.check_origin(origin)
        w.require_store()
        async with w.lock:
            await w.load()
            old = w.require_active(uid.strip())
            w.check("amend", origin, fact=old)
            await w.log_status("retract", old.id, origin, reason)
            await w.index.retire(old.id, at=w.clock.now())
            await w.renderings.render()
        log.info("fact retracted", id=old.id, origin=origin)
        return w.log.facts[old.id]

    async def restore(self, uid: str, *, origin: str, reason: str = "restored") -> Fact:
        """Undo the retraction of fact `uid` (an append-only `restore` event); it is active again."""
        w = self.w
        w.check_origin(origin)
        w.require_store()
        async with w.lock:
            await w.load()
            fact = w.require(uid)
            if fact.superseded_by:
                raise FactError(
                    f"{fact.id} was corrected by {fact.superseded_by}; a correction cannot be restored"
                )
            if fact.active:
                raise FactError(f"{fact.id} is not retracted; nothing to restore")
            w.check("amend", origin, fact=fact)
            await w.log_status("restore", fact.id, origin, reason)
            await w.index.restore(fact.id)
            await w.renderings.render()
        log.info("fact restored", id=fact.id, origin=origin)
        return w.log.facts[fact.id]

    async def reinstate(self, uid: str, *, origin: str, reason: str = "reinstated") -> Fact:
        """Undo the supersession of fact `uid`: it is current again, its successor retired.

        One append-only `reinstate` event; nothing is deleted, both stay in history.
        """
        w = self.w
        w.check_origin(origin)
        async with w.lock:
            await w.load()
            fact = w.view.get(uid.strip())
            if fact is None:
                raise FactError(f"no fact with id {uid!r} (ids look like fact:12)")
            if not fact.superseded_by:
                raise FactError(f"{fact.id} was not superseded; nothing to reinstate")
            newer = w.view.get(fact.superseded_by)
            if newer is not None and newer.superseded_by:
                raise FactError(
                    f"{newer.id} was itself superseded by {newer.superseded_by}; "
                    "reinstate the newest change first"
                )
            w.check("amend", origin, fact=fact)
            await w.log_status("reinstate", fact.id, origin, reason)
            if newer is not None:
                await w.index.retire(newer.id, at=w.clock.now())
            await w.index.upsert([memory_of(w.log.facts[fact.id])])
            await w.memories.make_current(fact.id)
            await w.renderings.render()
        log.info("fact reinstated", id=fact.id, retired=fact.superseded_by, origin=origin)
        return w.log.facts[fact.id]

    async def pin(self, uid: str, *, origin: str) -> Fact:
        """Record the person's confirmation that fact `uid` may be pinned in FACTS.md.

        Only the person confirms, and never a fact from tool output or an import: whose word
        that is cannot be vouched for (the person can state it themselves with `remember`).
        """
        w = self.w
        w.check_origin(origin)
        async with w.lock:
            await w.load()
            fact = w.require_active(uid.strip())
            w.check("pin", origin, fact=fact)
            if fact.pin_confirmed_at is None:
                await w.log_status("pin", fact.id, origin, "pin confirmed by the person")
                await w.renderings.render()
        log.info("fact pin confirmed", id=fact.id)
        return w.log.facts[fact.id]

    async def propose_pin(self, uid: str, *, reason: str) -> bool:
        """Ask the person to confirm pinning active fact `uid`; False when already asked (or gone)."""
        w = self.w
        async with w.lock:
            await w.load()
            fact = w.view.get(uid)
            if fact is None or not fact.active or fact.pin_proposed_at is not None:
                return False
            await w.log_status("propose_pin", fact.id, "system", reason)
            await w.renderings.render()
        log.info("fact proposed for pinning", id=fact.id, reason=reason)
        return True
