"""Model handover: when the trunk's model changes, the first turn on the new one gets a letter.

The model that last answered a trunk turn is kept in the store (`kv` key
``handover.trunk_model``, moved at each answered turn; a home from before this falls back to
the usage ledger's last trunk call). At start the daemon compares it with the trunk role's
configured provider and model (`[models.trunk]`); when they differ it records a pending
handover (``handover.pending``: from, to, when, the old model's last turn, the last self-exam
score on it), writes a journal entry, and the context assembler adds a `handover` layer to
every request of the trunk until the first turn on the new model is answered — then the
handover is kept as ``handover.last`` (with when it was delivered) for `reverie status`.

The letter itself (`daemon.context.letter`) is built offline, from what the home holds; the
record and what `status` says of it are `daemon.context.handover_record`'s.
Forks and every role but the trunk write no letter: only `[models.trunk]` is compared, and a
fork's context has no handover layer.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import anyio

from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.context.handover_record import (
    LAST_KEY,
    MODEL_KEY,
    PENDING_KEY,
    Handover,
    last_exam,
    read_record,
)
from daemon.context.handover_record import handover_status as handover_status
from daemon.context.layers import Layer
from daemon.context.letter import HEADING, Letter, OpenThreads, build_letter, model_id, same_model
from daemon.events import JournalNote, SleepFinished, TurnFinished
from daemon.log import get_logger
from daemon.memory.api import MemoryView
from daemon.paths import Home
from daemon.settings import Settings
from daemon.store.db import Database
from daemon.store.kv import KvRepo
from daemon.store.usage import UsageRepo

log = get_logger("handover")


def configured_trunk(settings: Settings, environ: dict[str, str] | None = None) -> str:
    """The trunk role's provider and model as configured (without building the provider)."""
    from daemon.models.roles import resolve_provider

    kind = resolve_provider(settings.models.trunk, settings, environ)
    return model_id(kind, settings.models.trunk.model)


# -- the store -----------------------------------------------------------------------------


async def _put(db: Database, key: str, value: dict[str, Any], now: datetime) -> None:
    await KvRepo(db).put_json(key, value, at=now)


async def _drop(db: Database, key: str) -> None:
    await KvRepo(db).delete(key)


async def last_trunk_model(db: Database) -> tuple[str, datetime | None] | None:
    """The model that last answered a trunk turn, and when (None in a home where none did)."""
    kept = await read_record(db, MODEL_KEY)
    if kept and kept.get("model"):
        last = kept.get("last")
        return str(kept["model"]), datetime.fromisoformat(last) if isinstance(last, str) else None
    call = await UsageRepo(db).last_call("trunk")
    if call is None:
        return None
    return model_id(call.provider, call.model), datetime.fromisoformat(call.ts)


# -- the desk: noticing, pending, delivered ------------------------------------------------


class HandoverDesk:
    """Notices a trunk model change at start and keeps its letter until it is delivered."""

    def __init__(
        self,
        *,
        home: Home,
        db: Database,
        settings: Settings,
        clock: Clock,
        current: str,
        view: MemoryView | None = None,
        threads: OpenThreads | None = None,
    ) -> None:
        self.home = home
        self.db = db
        self.settings = settings
        self.clock = clock
        self.current = current  # the trunk's provider:model this run
        self.view = view
        self.threads = threads
        self.pending: Handover | None = None
        self._letter: tuple[Handover, Letter] | None = None

    async def peek(self) -> Handover | None:
        """The handover the next trunk turn would carry (what `notice` records), writing nothing:
        for `reverie context` and `reverie handover` with the daemon down or up."""
        raw = await read_record(self.db, PENDING_KEY)
        pending = Handover.from_json(raw) if raw else None
        last = await last_trunk_model(self.db)
        if last is None or same_model(last[0], self.current):
            return None
        if (
            pending is not None
            and pending.from_model == last[0]
            and pending.to_model == self.current
        ):
            return pending
        return Handover(
            from_model=last[0],
            to_model=self.current,
            at=self.clock.now(),
            until=last[1],
            exam_before=await last_exam(self.db),
        )

    async def notice(self, bus: EventBus | None = None) -> Handover | None:
        """At start: record a handover when the last answered trunk turn was another model's.

        A store that cannot answer (a PostgreSQL server away) costs the letter, never the
        start: it is logged and the daemon runs without one.
        """
        try:
            return await self._notice(bus)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.warning("model handover could not be checked; no letter this run", error=repr(exc))
            return None

    async def _notice(self, bus: EventBus | None) -> Handover | None:
        pending_raw = await read_record(self.db, PENDING_KEY)
        pending = Handover.from_json(pending_raw) if pending_raw else None
        last = await last_trunk_model(self.db)
        if last is None:
            return None  # a new home: nobody spoke yet
        previous, until = last
        if same_model(previous, self.current):
            if pending is not None:
                # Switched back before the letter went out: nothing was handed over.
                await _drop(self.db, PENDING_KEY)
                log.info("model handover withdrawn", back_to=self.current)
            return None
        if (
            pending is not None
            and pending.from_model == previous
            and pending.to_model == self.current
        ):
            self.pending = pending  # noticed by an earlier start; the letter still waits
            return pending
        now = self.clock.now()
        handover = Handover(
            from_model=previous,
            to_model=self.current,
            at=now,
            until=until,
            exam_before=await last_exam(self.db),
        )
        await _put(self.db, PENDING_KEY, handover.to_json(), now)
        self.pending = handover
        log.info("model handover noticed", previous=previous, current=self.current)
        if bus is not None:
            exam = handover.exam_before
            await bus.publish(
                JournalNote(
                    summary=f"model handover: {previous} → {self.current}",
                    tags=("handover", "model"),
                    decisions=(
                        f"the trunk ran on {previous} until "
                        f"{until.isoformat(timespec='minutes') if until else 'its last turn'}; "
                        f"it now runs on "
                        f"{self.current}, and its first turn carries a handover letter",
                    ),
                    progress=(
                        (f"last self-exam on {previous}: {exam['score']:g} ({exam['taken_at']})",)
                        if exam
                        else ()
                    ),
                )
            )
        return handover

    async def handover_layer(self) -> tuple[Layer, str]:
        """The turn's `handover` layer and why (empty when no handover waits)."""
        empty = Layer(name="handover", heading=HEADING, stable=False)
        if self.pending is None:
            return (
                empty,
                "not shown: the trunk's model has not changed since its last answered turn",
            )
        if self._letter is None or self._letter[0] != self.pending:
            self._letter = (self.pending, await self.letter(self.pending))
        h = self.pending
        why = (
            f"the trunk's model changed from {h.from_model} to {h.to_model} (noticed "
            f"{h.at.isoformat(timespec='minutes')}); shown until the first turn on it is answered"
        )
        return self._letter[1].layer(), why

    async def letter(self, handover: Handover) -> Letter:
        return await build_letter(
            from_model=handover.from_model,
            to_model=handover.to_model,
            until=handover.until,
            home=self.home,
            db=self.db,
            settings=self.settings,
            view=self.view,
            threads=self.threads,
            now=self.clock.now(),
        )

    async def turn_answered(self, turn_id: str) -> None:
        """A trunk turn was answered on the current model: keep it; a waiting letter is delivered."""
        now = self.clock.now()
        kept = await read_record(self.db, MODEL_KEY) or {}
        since = kept.get("since") if kept.get("model") == self.current else None
        await _put(
            self.db,
            MODEL_KEY,
            {"model": self.current, "since": since or now.isoformat(), "last": now.isoformat()},
            now,
        )
        if self.pending is None:
            return
        done = Handover(**{**self.pending.__dict__, "delivered_at": now, "turn_id": turn_id})
        await _put(self.db, LAST_KEY, done.to_json(), now)
        await _drop(self.db, PENDING_KEY)
        self.pending = None
        self._letter = None
        log.info("handover letter delivered", turn_id=turn_id, model=self.current)

    async def exam_after(self, bus: EventBus | None = None) -> dict[str, Any] | None:
        """After a sleep: the first self-exam since the switch, told once beside the last one on
        the old model (a journal entry), and kept with the handover for `reverie status`."""
        for key in (PENDING_KEY, LAST_KEY):
            data = await read_record(self.db, key)
            if data:
                break
        else:
            return None
        if data.get("exam_after"):
            return None  # told already
        h = Handover.from_json(data)
        after = await last_exam(self.db, after=h.at)
        if after is None:
            return None
        await _put(self.db, key, {**data, "exam_after": after}, self.clock.now())
        before = h.exam_before
        was = f"{before['score']:g} on {h.from_model}" if before else f"none on {h.from_model}"
        summary = (
            f"self-exam after the model handover: {after['score']:g} on {h.to_model} "
            f"(last on the old model: {was})"
        )
        log.info("self-exam after the model handover", after=after["score"], before=before)
        if bus is not None:
            await bus.publish(JournalNote(summary=summary, tags=("handover", "self-exam")))
        return after

    def register(self, bus: EventBus) -> Callable[[], None]:
        """A turn answered moves the model kept and delivers a waiting letter; the first sleep
        after a switch tells its self-exam beside the old model's. Returns the undo."""

        async def on_turn(event: TurnFinished) -> None:
            if not event.vetoed:
                await self.turn_answered(event.turn_id)

        async def on_slept(event: SleepFinished) -> None:
            await self.exam_after(bus)

        undo = [
            bus.on(TurnFinished, on_turn, name="handover.turn_answered"),
            bus.on(SleepFinished, on_slept, name="handover.exam_after"),
        ]

        def unsubscribe() -> None:
            for u in undo:
                u()

        return unsubscribe
