"""An in-process daemon for the sleep tests: every service, built by the daemon's own
composition root (`daemon.services.open_services`), without the socket.

It runs on a `FakeClock` (so a month of nights runs in seconds) with model roles overridable
by scripted models, a hashing embedder and the sleep phases a test chooses. `rig()` serves
the trunk and the cycle (not the scheduled jobs: the tests start cycles themselves); leaving
or cancelling it is how a test stops (or "crashes") the daemon: nothing is finished on the
way out except what the real services finish.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from daemon.agent.trunk import Trunk
from daemon.agent.turns import TurnDone, TurnEvent, TurnFailed
from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.events import (
    Event,
    JournalNote,
    MessageAccepted,
    SleepFinished,
    SleepStarted,
    StateChanged,
    Woke,
)
from daemon.lifecycle import Lifecycle
from daemon.memory.embedders import HashEmbedder
from daemon.memory.system import MemorySystem
from daemon.models.base import Model
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.services import Services, open_services
from daemon.settings import SchedulerSettings, Settings, SleepSettings
from daemon.sleep.cycle import SleepCycle
from daemon.sleep.phases import Phase
from daemon.sleep.wake import WakeUp
from daemon.store.db import Database

# Monday 2 March 2026, 09:00 UTC.
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def sleep_settings(**sleep: Any) -> Settings:
    return Settings(scheduler=SchedulerSettings(timezone="UTC"), sleep=SleepSettings(**sleep))


@dataclass(kw_only=True)
class Rig:
    home: Home
    settings: Settings
    clock: FakeClock
    db: Database
    roles: ModelRoles
    bus: EventBus
    memory: MemorySystem
    trunk: Trunk
    lifecycle: Lifecycle
    cycle: SleepCycle
    services: Services
    events: list[Event] = field(default_factory=list)
    changes: list[StateChanged] = field(default_factory=list)
    turn_events: list[TurnEvent] = field(default_factory=list)

    async def say(self, text: str, *, wait: bool = True) -> str:
        """Send a person's message (as the gateway does) and, with `wait`, wait for its answer."""
        accepted = await self.trunk.submit(text, observer=self.turn_events.append)
        await self.bus.publish(MessageAccepted(turn_id=accepted.turn_id, queued=accepted.queued))
        if wait:
            await self.answered(accepted.turn_id)
        return accepted.turn_id

    async def answered(self, turn_id: str, limit_s: float = 20) -> TurnEvent:
        with anyio.fail_after(limit_s):
            while True:
                for event in self.turn_events:
                    if isinstance(event, TurnDone | TurnFailed) and event.turn_id == turn_id:
                        return event
                await anyio.sleep(0.005)

    def of(self, kind: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def notes(self) -> list[JournalNote]:
        return self.of(JournalNote)

    async def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await self.db.fetchall(sql, params)]


async def wait_until(pred: Callable[[], bool], what: str, limit_s: float = 20) -> None:
    with anyio.fail_after(limit_s):
        while not pred():
            await anyio.sleep(0.005)


@asynccontextmanager
async def rig(
    root: Path,
    *,
    settings: Settings | None = None,
    clock: FakeClock | None = None,
    models: dict[str, Model] | None = None,
    phases: Callable[[Trunk], Sequence[Phase]] | None = None,
    context_window: int | None = None,
) -> AsyncIterator[Rig]:
    """A daemon core in `root`, awake and serving until the block exits (or is cancelled)."""
    home = Home(root)
    home.ensure()
    cfg = settings or sleep_settings()
    # A model outage is retried at once, not after the daemon's five seconds.
    agent = cfg.agent.model_copy(update={"unavailable_retry_s": 0.01})
    models_cfg = cfg.models
    if context_window is not None:
        trunk_cfg = cfg.models.trunk.model_copy(update={"context_window": context_window})
        models_cfg = cfg.models.model_copy(update={"trunk": trunk_cfg})
    cfg = cfg.model_copy(update={"agent": agent, "models": models_cfg})
    clk = clock or FakeClock(START)
    bus = EventBus()
    events: list[Event] = []
    for kind in (SleepStarted, SleepFinished, Woke, JournalNote):
        bus.on(kind, events.append, name=f"test.record.{kind.__name__}")
    async with open_services(
        home,
        cfg,
        clk,
        models=models,
        embedder=HashEmbedder(),
        phases=phases or (lambda trunk: [WakeUp(trunk)]),
        bus=bus,
        watch_files=False,
    ) as services:
        r = Rig(
            home=home,
            settings=cfg,
            clock=clk,
            db=services.db,
            roles=services.roles,
            bus=bus,
            memory=services.memory,
            trunk=services.trunk,
            lifecycle=services.lifecycle,
            cycle=services.sleep_cycle,
            services=services,
            events=events,
        )
        bus.on(StateChanged, r.changes.append, name="test.record.state")
        async with anyio.create_task_group() as tg:
            # The tests move the clock across nights and start cycles themselves: no jobs.
            await tg.start(partial(services.serve, jobs=False), name="services")
            yield r
            tg.cancel_scope.cancel()


def transcript_records(home: Home) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(home.trunk_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(dict(json.loads(line), _file=path.stem))
    return out
