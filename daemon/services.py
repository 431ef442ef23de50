"""The composition root: the one place the daemon's services are built and wired together.

`open_services` enters every service on one exit stack, in dependency order, and yields
them as `Services`; leaving it closes them in reverse. It reads as the list of systems: each
is built by one function of `daemon.wiring` (`core`, `knowing`, `doing`, `telling`). The daemon (`app.py`) and the tests
build through it alike, so what a test runs is wired as the daemon wires it; a test passes
scripted models, an embedder or its own sleep phases, never its own wiring.

Order: database → bus → ledger, model roles → topic router, memory → journal → context
assembler → tools → delegator → trunk → sleep cycle → chat gateway → scheduler (and its jobs)
→ file watcher. The bus is entered before every service that publishes or listens, so it
outlives them all; the journal before the trunk, so it still hears the trunk's session end;
the sleep cycle after the trunk is entered and before it serves, so an interrupted cycle
holds it before it answers anything.

`Services.serve` runs what runs in the background (the run log, trunk, sleep cycle, scheduler, file
watcher), each a named task, and marks the daemon awake once they are up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from daemon.agent.gateway import ChatGateway
from daemon.agent.trunk import Trunk
from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.context.assembler import ContextAssembler
from daemon.delegate.fork import Delegator
from daemon.events import Heartbeat, SleepFinished, SleepHousekeeping, TurnFinished
from daemon.journal import JournalHeartbeat
from daemon.lifecycle import DaemonState, Lifecycle
from daemon.log import get_logger
from daemon.memory.embedders import Embedder
from daemon.memory.system import MemorySystem
from daemon.models.base import Model
from daemon.models.ledger import UsageLedger
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.resources import ResourceWatch, forgettable
from daemon.run_log import RunLog
from daemon.schedule.courier import NoticeCourier
from daemon.schedule.downtime import DowntimeAccount
from daemon.schedule.keeper import ScheduleKeeper
from daemon.schedule.outbox import Outbox
from daemon.schedule.store import ScheduleStore
from daemon.scheduler import Scheduler
from daemon.settings import Settings
from daemon.sleep.cycle import SleepCycle
from daemon.sleep.phases import DeferredPhase, Phase
from daemon.sleep.wake import WakeUp
from daemon.store.db import Database
from daemon.threads import ThreadBook
from daemon.tokens import TokenCounter, default_counter
from daemon.tools.approvals import Approvals
from daemon.tools.mcp import McpServers
from daemon.tools.registry import ToolRegistry
from daemon.topics.router import TopicRouter
from daemon.topics.watch import FileWatcher
from daemon.wiring.core import Core, open_core, open_models
from daemon.wiring.doing import SleepPhases, open_sleep, open_tools, open_trunk
from daemon.wiring.knowing import file_watcher, open_context, open_journal, open_memory
from daemon.wiring.telling import (
    chat_gateway,
    downtime_account,
    morning_greeting,
    open_notices,
    open_schedules,
    standing_checklist,
)

if TYPE_CHECKING:
    from daemon.channels.matrix import MatrixChannel
    from daemon.web.server import WebConsole

log = get_logger("services")


def nightly_phases(trunk: Trunk) -> list[Phase]:
    """The daemon's sleep: mining, maintenance, dreams, the wake-up into a new session, then
    the self-exam of what that session's first turn would be shown.

    Every phase but the wake-up (which the cycle imports anyway) is deferred: its module and
    what only it uses (the mining model, the month folds' upkeep, dreams' revisions, the
    exam's record) are imported by the first cycle that runs it, not by the daemon's start.
    """
    return [
        DeferredPhase("mining", optional=True, load=_mining),
        DeferredPhase("maintenance", optional=True, load=_maintenance),
        DeferredPhase("dreams", optional=True, load=_dreams),
        WakeUp(trunk),
        DeferredPhase("self_exam", optional=True, load=_self_exam),
    ]


def _mining() -> Phase:
    from daemon.sleep.mine import MiningPhase

    return MiningPhase()


def _maintenance() -> Phase:
    from daemon.sleep.maintenance import MaintenancePhase

    return MaintenancePhase()


def _dreams() -> Phase:
    from daemon.sleep.dreams import DreamsPhase

    return DreamsPhase()


def _self_exam() -> Phase:
    from daemon.sleep.exam import SelfExamPhase

    return SelfExamPhase()


@dataclass(kw_only=True, eq=False)
class Services:
    """The running daemon's services, entered and wired (what `status` reads, too)."""

    home: Home
    settings: Settings
    clock: Clock
    started_at: datetime
    bus: EventBus
    lifecycle: Lifecycle
    db: Database
    ledger: UsageLedger
    roles: ModelRoles
    counter: TokenCounter
    router: TopicRouter
    memory: MemorySystem
    journal: JournalHeartbeat
    assembler: ContextAssembler
    tools: ToolRegistry
    # The configured MCP servers (their state for `status`; their tools are in `tools`).
    mcp: McpServers
    # The questions tool calls put to the person (the chat gateway reaches their clients).
    approvals: Approvals
    delegator: Delegator
    trunk: Trunk
    sleep_cycle: SleepCycle
    gateway: ChatGateway
    scheduler: Scheduler
    # What the agent tells the person unasked, and how it reaches them.
    outbox: Outbox
    courier: NoticeCourier
    # The schedules the agent keeps for the person, and what fires them.
    schedules: ScheduleStore
    keeper: ScheduleKeeper
    watcher: FileWatcher | None
    # When the daemon started and stopped (what the console's timeline draws as running).
    runs: RunLog
    # Memory, descriptors, children and the store's size: after start, after each sleep, now.
    resources: ResourceWatch
    # The local web console, once `serve` started it (`[web] enabled`).
    web: WebConsole | None = None
    # The Matrix channel, once `serve` started it (`[channels.matrix] enabled`).
    matrix: MatrixChannel | None = None
    # What fell while the daemon was down, told once after the start's catch-up.
    downtime: DowntimeAccount | None = None

    @property
    def state(self) -> str:
        return self.lifecycle.state.value

    async def serve(
        self,
        *,
        jobs: bool = True,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve the trunk, the sleep cycle, the scheduler and the file watcher until cancelled.

        Reports started (and the daemon awake) once the trunk, the cycle and the scheduler
        run; live reload is not needed to answer, so the watcher does not hold it. `jobs=False`
        leaves the scheduled jobs unrun: a test that moves a fake clock across nights drives
        its cycles (and any scheduler) itself.
        """
        async with anyio.create_task_group() as tg:
            await tg.start(self.runs.serve, name="run-log")
            if self.settings.channels.matrix.enabled:
                from daemon.channels.matrix import MatrixChannel

                # Before the trunk: a reply left pending at the last stop finds its room.
                self.matrix = MatrixChannel(
                    self.settings.channels.matrix,
                    self.trunk,
                    self.home.root / "channels" / "matrix",
                    approvals=self.approvals,
                )
                # Notices go to its room while no local chat is open (the courier decides).
                self.matrix.bind_notices(offer=self.courier.offer, confirm=self.outbox.delivered)
                self.courier.add_channel(self.matrix)
                await tg.start(self.matrix.serve, name="matrix-channel")
            await tg.start(self.trunk.serve, name="trunk")
            await tg.start(self.sleep_cycle.serve, name="sleep-cycle")
            if jobs:
                await tg.start(self.scheduler.run, name="scheduler")
                if self.downtime is not None:
                    tg.start_soon(self.downtime.serve, name="downtime-account")
            if self.watcher is not None:
                tg.start_soon(self.watcher.run, name="topic-watcher")
            if self.settings.web.enabled:
                from daemon.web.server import WebConsole

                # A console that cannot listen says why (log, status); the daemon serves on.
                self.web = WebConsole(self)
                await tg.start(self.web.serve, name="web-console")
            self.lifecycle.transition(DaemonState.AWAKE, detail="ready")
            self.resources.started()
            task_status.started()

    async def heartbeat(self) -> str:
        """The scheduled heartbeat: every handler's check, side by side; the journal's result."""
        before = self.journal.last_tick
        failed = await self.bus.deliver(Heartbeat(at=self.clock.now()))
        tick = self.journal.last_tick
        line = tick.line() if tick is not None and tick is not before else None
        if line is not None:
            # Something changed: one quiet line to the person's open chats (nothing stored).
            self.courier.murmur("heartbeat", line)
        if failed:
            # Recorded as a failed run: status never claims a heartbeat that did not do its check.
            raise RuntimeError(
                f"{failed} of {len(self.bus.handlers(Heartbeat))} heartbeat handler(s) failed"
            )
        return (
            tick.describe() if tick is not None else f"handlers={len(self.bus.handlers(Heartbeat))}"
        )

    async def checkpoint(self) -> str:
        """The scheduled WAL checkpoint."""
        busy, log_frames, done = await self.db.checkpoint()
        return f"busy={busy} wal_frames={log_frames} checkpointed={done}"

    async def fork_retention(self, event: SleepHousekeeping) -> str | None:
        """Sleep maintenance's upkeep of fork transcripts within their retention limits.

        Contributes its line only when it archived or pruned something: a contribution is a
        change in the maintenance report, and an idle night writes no journal note (retention
        logs its line either way).
        """
        from daemon.delegate.lineage import ForkLineage
        from daemon.delegate.retention import apply_fork_retention

        lineage = ForkLineage(self.db)
        before = sum(row.retained is not None for row in await lineage.all())
        line = await apply_fork_retention(self.home, self.db, self.settings, self.clock)
        after = sum(row.retained is not None for row in await lineage.all())
        return line if after > before else None


@asynccontextmanager
async def open_services(
    home: Home,
    settings: Settings,
    clock: Clock,
    *,
    models: dict[str, Model] | None = None,
    embedder: Embedder | None = None,
    phases: SleepPhases = nightly_phases,
    bus: EventBus | None = None,
    watch_files: bool | None = None,
) -> AsyncIterator[Services]:
    """Build and enter every service; yield them wired; close them in reverse on the way out.

    `models` overrides model roles or providers (scripted models in tests), `embedder` the
    memory's embedder, `phases` the sleep cycle's steps; `bus` is a bus the caller made to
    listen on before anything publishes (entered here all the same); `watch_files` overrides
    `topics.watch`. Each system is built by its function in `daemon.wiring`, in this order.
    """
    started_at = clock.now()
    bus = bus if bus is not None else EventBus("daemon-bus")
    lifecycle = Lifecycle(clock, bus)
    async with AsyncExitStack() as stack:
        core = await open_core(
            stack, home, settings, clock, bus=bus, lifecycle=lifecycle, started_at=started_at
        )
        ledger, roles = await open_models(core, models)
        counter = default_counter()
        router = TopicRouter(home, settings.topics)
        memory = await open_memory(core, roles, router, embedder)
        journal = await open_journal(core, roles, memory)
        threads, assembler = await open_context(core, roles, memory, router, counter)
        kit = await open_tools(core, roles, counter, memory, journal)
        trunk = await open_trunk(core, roles, kit.tools, counter)
        sleep_cycle = await open_sleep(core, roles, memory, trunk, phases)
        outbox, courier = await open_notices(core)
        gateway = chat_gateway(core, trunk, kit.approvals, courier)
        scheduler, keeper = await open_schedules(core, kit, outbox, trunk, ledger, journal)
        services = Services(
            home=home,
            settings=settings,
            clock=clock,
            started_at=started_at,
            bus=bus,
            lifecycle=lifecycle,
            db=core.db,
            ledger=ledger,
            roles=roles,
            counter=counter,
            router=router,
            memory=memory,
            journal=journal,
            assembler=assembler,
            tools=kit.tools,
            mcp=kit.mcp,
            approvals=kit.approvals,
            delegator=kit.delegator,
            trunk=trunk,
            sleep_cycle=sleep_cycle,
            gateway=gateway,
            scheduler=scheduler,
            outbox=outbox,
            courier=courier,
            schedules=kit.schedules,
            keeper=keeper,
            watcher=file_watcher(core, router, assembler, watch_files),
            runs=RunLog(core.db, clock, started_at=started_at),
            resources=ResourceWatch(
                db_file=None if core.db.is_postgres else home.db_file, clock=clock
            ),
        )
        await finish_wiring(core, services, threads)
        yield services


async def finish_wiring(core: Core, services: Services, threads: ThreadBook) -> None:
    """What is wired over the built services: upkeep, the greeting, the account of time down,
    the standing checklist, then the daemon's own jobs."""
    wire_upkeep(core, services)
    morning_greeting(core, services.outbox, threads)
    services.downtime = downtime_account(core, services.outbox, services.keeper, services.scheduler)
    await standing_checklist(
        core,
        roles=services.roles,
        outbox=services.outbox,
        delegator=services.delegator,
        trunk=services.trunk,
        ledger=services.ledger,
        courier=services.courier,
    )
    add_jobs(services)


def wire_upkeep(core: Core, services: Services) -> None:
    """What runs around sleep and the first turn: the day's caches forgotten and the resource
    figures taken again, fork transcripts kept within their limits, the nightly cycle and the
    courier's rounds on the scheduler."""
    bus, stack = core.bus, core.stack
    # After each sleep the day's caches go and the figures are taken again.
    forgettable(services.counter.forget)
    stack.callback(bus.on(SleepFinished, services.resources.slept, name="resources.after_sleep"))
    stack.callback(bus.on(TurnFinished, services.resources.first_turn, name="resources.first_turn"))
    # Fork transcripts are kept within their retention limits during sleep's maintenance.
    stack.callback(
        bus.on(SleepHousekeeping, services.fork_retention, name="delegate.fork_retention")
    )
    services.sleep_cycle.schedule(services.scheduler)
    stack.callback(services.courier.register(bus, services.scheduler))


def add_jobs(services: Services) -> None:
    """The daemon's own interval jobs: the heartbeat (when something keeps a record on it; the
    standing checklist is wired before, so it counts) and the WAL checkpoint."""
    s = services.settings
    if services.bus.handlers(Heartbeat):
        # Only when something keeps a record on it: a heartbeat that does nothing is not one.
        services.scheduler.add_interval(
            "heartbeat", services.heartbeat, seconds=s.journal.heartbeat_minutes * 60
        )
    services.scheduler.add_interval(
        "checkpoint", services.checkpoint, seconds=s.store.checkpoint_interval_s
    )
