"""An in-process daemon core for the sleep tests: real store, memory, context, trunk and cycle.

The parts are the real ones, wired as `app.py` wires them, on a `FakeClock` (so a month of
nights runs in seconds) with model roles overridable by scripted models. `Rig.run()` serves
the trunk and the cycle in a task group; cancelling it is how a test stops (or "crashes")
the daemon: nothing is finished on the way out except what the real services finish.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from daemon.agent.loop import AgentLoop
from daemon.agent.trunk import Trunk
from daemon.agent.turns import TurnDone, TurnEvent, TurnFailed
from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.context.assembler import ContextAssembler
from daemon.events import (
    Event,
    JournalNote,
    MessageAccepted,
    SleepFinished,
    SleepStarted,
    StateChanged,
    TurnFinished,
    Woke,
)
from daemon.lifecycle import DaemonState, Lifecycle
from daemon.memory.embedders import HashEmbedder
from daemon.memory.system import MemorySystem
from daemon.models.base import Model
from daemon.models.ledger import UsageLedger
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.settings import SchedulerSettings, Settings, SleepSettings
from daemon.sleep.cycle import SleepCycle
from daemon.sleep.phases import Phase
from daemon.sleep.wake import WakeUp
from daemon.store.db import Database
from daemon.tokens import default_counter
from daemon.tools import ToolRegistry
from daemon.topics.router import TopicRouter

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
    events: list[Event] = field(default_factory=list)
    changes: list[StateChanged] = field(default_factory=list)
    turn_events: list[TurnEvent] = field(default_factory=list)
    tg: TaskGroup | None = None

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
    clk = clock or FakeClock(START)
    bus = EventBus()
    events: list[Event] = []
    for kind in (SleepStarted, SleepFinished, Woke, JournalNote):
        bus.on(kind, events.append, name=f"test.record.{kind.__name__}")
    async with AsyncExitStack() as stack:
        db = await Database.open(home.db_file)
        stack.push_async_callback(db.close)
        await stack.enter_async_context(bus)
        roles = await stack.enter_async_context(
            ModelRoles(cfg, UsageLedger(db, cfg.spend, clk), overrides=models or {})
        )
        router = TopicRouter(home, cfg.topics)
        memory = await stack.enter_async_context(
            MemorySystem(
                home=home,
                db=db,
                settings=cfg,
                roles=roles,
                bus=bus,
                clock=clk,
                topic_addenda=router.addenda,
                embedder=HashEmbedder(),
            )
        )
        counter = default_counter()
        ContextAssembler(
            home=home, settings=cfg, view=memory.view, router=router, counter=counter, clock=clk
        ).register(bus)
        tools = ToolRegistry(cfg.agent.tool_output_max_chars)
        for tool in memory.tools():
            tools.register(tool)
        loop = AgentLoop(
            roles=roles,
            tools=tools,
            bus=bus,
            clock=clk,
            counter=counter,
            compaction_threshold=cfg.agent.compaction_threshold,
            context_window=context_window or cfg.models.trunk.context_window,
        )
        trunk = await stack.enter_async_context(
            Trunk(
                home=home,
                db=db,
                loop=loop,
                clock=clk,
                retry_base_s=0.01,
            )
        )
        stack.callback(
            bus.on(
                TurnFinished,
                lambda e: memory.index_session(e.session_id),
                name="memory.index_turn",
            )
        )
        lifecycle = Lifecycle(clk, bus)
        cycle = await stack.enter_async_context(
            SleepCycle(
                home=home,
                settings=cfg,
                db=db,
                models=roles,
                bus=bus,
                clock=clk,
                memory=memory,
                trunk=trunk,
                lifecycle=lifecycle,
                phases=list(phases(trunk)) if phases else [WakeUp(trunk)],
            )
        )
        r = Rig(
            home=home,
            settings=cfg,
            clock=clk,
            db=db,
            roles=roles,
            bus=bus,
            memory=memory,
            trunk=trunk,
            lifecycle=lifecycle,
            cycle=cycle,
            events=events,
        )
        bus.on(StateChanged, r.changes.append, name="test.record.state")
        async with anyio.create_task_group() as tg:
            r.tg = tg
            await tg.start(trunk.serve)
            await tg.start(cycle.serve)
            lifecycle.transition(DaemonState.AWAKE, detail="ready")
            yield r
            tg.cancel_scope.cancel()


def transcript_records(home: Home) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(home.trunk_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(dict(json.loads(line), _file=path.stem))
    return out
