"""The composition root: the one place the daemon's services are built and wired together.

`open_services` enters every service on one exit stack, in dependency order, and yields
them as `Services`; leaving it closes them in reverse. The daemon (`app.py`) and the tests
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

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from daemon.agent.gateway import ChatGateway
from daemon.agent.loop import AgentLoop
from daemon.agent.trunk import Trunk
from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.context.assembler import ContextAssembler
from daemon.context.handover import HandoverDesk, model_id
from daemon.delegate.fork import Delegator
from daemon.events import ForkFinished, Heartbeat, SleepFinished, SleepHousekeeping, TurnFinished
from daemon.journal import JournalHeartbeat
from daemon.journal.tools import journal_tools
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
from daemon.schedule.checklist import StandingChecklist
from daemon.schedule.courier import NoticeCourier
from daemon.schedule.downtime import DowntimeAccount
from daemon.schedule.greeting import MorningGreeting
from daemon.schedule.keeper import ScheduleKeeper
from daemon.schedule.outbox import Outbox
from daemon.schedule.store import ScheduleStore
from daemon.schedule.tools import schedule_tools
from daemon.scheduler import Scheduler, local_zone
from daemon.settings import Settings
from daemon.sleep.cycle import SleepCycle
from daemon.sleep.dreams import DreamsPhase
from daemon.sleep.exam import SelfExamPhase
from daemon.sleep.maintenance import MaintenancePhase
from daemon.sleep.mine import MiningPhase
from daemon.sleep.phases import Phase
from daemon.sleep.wake import WakeUp
from daemon.store.db import Database
from daemon.threads import ThreadBook
from daemon.tokens import TokenCounter, default_counter
from daemon.tools.approvals import Approvals, PermissionGuard
from daemon.tools.mcp import McpServers
from daemon.tools.policy import PermissionPolicy, SavedApprovals
from daemon.tools.registry import ToolRegistry
from daemon.tools.toolbox import work_tools
from daemon.tools.workspace import Workspace
from daemon.topics.router import TopicRouter
from daemon.topics.watch import FileWatcher

if TYPE_CHECKING:
    from daemon.channels.matrix import MatrixChannel
    from daemon.web.server import WebConsole

log = get_logger("services")

SleepPhases = Callable[[Trunk], Sequence[Phase]]


def nightly_phases(trunk: Trunk) -> list[Phase]:
    """The daemon's sleep: mining, maintenance, dreams, the wake-up into a new session, then
    the self-exam of what that session's first turn would be shown."""
    return [MiningPhase(), MaintenancePhase(), DreamsPhase(), WakeUp(trunk), SelfExamPhase()]


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
    `topics.watch`.
    """
    s = settings
    started_at = clock.now()
    bus = bus if bus is not None else EventBus("daemon-bus")
    lifecycle = Lifecycle(clock, bus)
    async with AsyncExitStack() as stack:
        db = await Database.open_configured(home.db_file, s)
        stack.push_async_callback(db.close)
        await stack.enter_async_context(bus)
        ledger = UsageLedger(db, s.spend, clock)
        roles = await stack.enter_async_context(ModelRoles(s, ledger, overrides=models or {}))
        counter = default_counter()
        router = TopicRouter(home, s.topics)
        memory = await stack.enter_async_context(
            MemorySystem(
                home=home,
                db=db,
                settings=s,
                roles=roles,
                bus=bus,
                clock=clock,
                topic_addenda=router.addenda,
                embedder=embedder,
            )
        )
        # Each finished turn and fork is indexed for recall, beside whatever comes next.
        stack.callback(
            bus.on(
                TurnFinished, lambda e: memory.index_session(e.session_id), name="memory.index_turn"
            )
        )
        stack.callback(
            bus.on(
                ForkFinished,
                lambda e: memory.index_session(e.fork_session_id),
                name="memory.index_fork",
            )
        )

        async def catch_up(sessions: set[str]) -> None:
            # The PostgreSQL server is back and the queued writes are in: index what only the
            # home's files hold (facts remembered meanwhile, the new messages' chunks).
            await memory.facts.sync()
            for session_id in sorted(sessions):
                await memory.index_session(session_id)

        db.after_outage(catch_up)
        journal = await stack.enter_async_context(
            JournalHeartbeat(
                home=home, db=db, settings=s, roles=roles, clock=clock, index=memory.index
            )
        )
        journal.register(bus)
        # Open promises, questions and plans: noted at each turn's end, swept during sleep.
        threads = ThreadBook(
            db,
            clock=clock,
            zone=local_zone(s.scheduler.timezone),
            expire_days=s.threads.expire_days,
        )
        stack.callback(threads.register(bus))
        # A trunk model other than the last answered turn's: a handover letter for its first turn.
        handover = HandoverDesk(
            home=home,
            db=db,
            settings=s,
            clock=clock,
            current=model_id(roles.provider_kind("trunk"), roles.config("trunk").model),
            view=memory.view,
            threads=threads,
        )
        await handover.notice(bus)
        stack.callback(handover.register(bus))
        assembler = ContextAssembler(
            home=home,
            settings=s,
            view=memory.view,
            router=router,
            counter=counter,
            clock=clock,
            threads=threads,
            handover=handover,
        )
        # Required: a turn never reaches the model without its context (it fails visibly).
        stack.callback(assembler.register(bus))
        # MCP servers come up in the background; their tools join as each server answers.
        mcp = await stack.enter_async_context(McpServers(home, s.mcp, clock))
        # Every tool once, in one registry; the trunk and the forks are offered subsets of it,
        # each guarded by the one permission policy (subsets keep the guard).
        workspace = Workspace.for_home(home, s)
        approvals = Approvals()
        guard = PermissionGuard(
            policy=PermissionPolicy(
                s.permissions.rules,
                saved=SavedApprovals.for_home(home),
                workspace=workspace,
            ),
            approvals=approvals,
            timeout_s=s.permissions.approval_timeout_s,
            workspace=workspace,
            clock=clock,
            # Often enough that a fork waiting on the person is never taken for a silent one.
            keepalive_s=s.delegate.inactivity_timeout_s / 4,
        )
        everything = ToolRegistry(s.agent.tool_output_max_chars, guard=guard)
        for tool in memory.tools():
            everything.register(tool)
        for tool in journal_tools(journal):
            everything.register(tool)
        for tool in work_tools(home, s):
            everything.register(tool)
        everything.add_source(mcp)
        delegator = await stack.enter_async_context(
            Delegator(
                home=home,
                db=db,
                roles=roles,
                bus=bus,
                clock=clock,
                counter=counter,
                settings=s,
                base_tools=everything.subset(s.tools.fork),
            )
        )
        for tool in delegator.tools_for(0):
            everything.register(tool)
        # After the forks' set was taken: a fork never sets schedules (the trunk does).
        schedules = ScheduleStore(
            db, clock=clock, zone=local_zone(s.scheduler.timezone), settings=s.schedule
        )
        for tool in schedule_tools(schedules, guard=guard):
            everything.register(tool)
        tools = everything.subset(s.tools.trunk)
        loop = AgentLoop(
            roles=roles,
            tools=tools,
            bus=bus,
            clock=clock,
            counter=counter,
            max_tool_steps=s.agent.max_tool_steps,
            history_max_messages=s.agent.history_max_messages,
            history_min_turns=s.agent.history_min_turns,
            compaction_threshold=s.agent.compaction_threshold,
            context_window=s.models.trunk.context_window,
            max_parallel_tools=s.delegate.max_parallel,
        )
        trunk = await stack.enter_async_context(
            Trunk(
                home=home,
                db=db,
                loop=loop,
                clock=clock,
                turn_timeout_s=s.agent.turn_timeout_s,
                retry_base_s=s.agent.unavailable_retry_s,
                retry_max_s=s.agent.unavailable_retry_max_s,
            )
        )
        sleep_cycle = await stack.enter_async_context(
            SleepCycle(
                home=home,
                settings=s,
                db=db,
                models=roles,
                bus=bus,
                clock=clock,
                memory=memory,
                trunk=trunk,
                lifecycle=lifecycle,
                phases=list(phases(trunk)),
            )
        )
        outbox = Outbox(db, bus=bus, clock=clock)
        courier = await stack.enter_async_context(
            NoticeCourier(
                outbox=outbox,
                settings=s.notices,
                zone=local_zone(s.scheduler.timezone),
                clock=clock,
            )
        )
        gateway = ChatGateway(
            trunk,
            state=lambda: lifecycle.state.value,
            session_id=lambda: trunk.session.id if trunk.session else "",
            approvals=approvals,
            notices=courier,
        )
        scheduler = await stack.enter_async_context(
            Scheduler(clock=clock, db=db, timezone=s.scheduler.timezone)
        )
        journal.next_heartbeat = lambda: scheduler.next_run("heartbeat")
        keeper = await stack.enter_async_context(
            ScheduleKeeper(
                store=schedules,
                outbox=outbox,
                scheduler=scheduler,
                bus=bus,
                clock=clock,
                zone=schedules.zone,
                settings=s.schedule,
                trunk=trunk,
                delegator=delegator,
                ledger=ledger,
            )
        )
        await keeper.start()
        watch = s.topics.watch if watch_files is None else watch_files
        watcher = (
            FileWatcher(
                home,
                s.topics,
                router=router,
                files=assembler.files,
                bus=bus,
                # An idle daemon should cost ~nothing: wake rarely when no file changes.
                step_ms=200,
                idle_wakeup_ms=60_000,
            )
            if watch
            else None
        )
        services = Services(
            home=home,
            settings=s,
            clock=clock,
            started_at=started_at,
            bus=bus,
            lifecycle=lifecycle,
            db=db,
            ledger=ledger,
            roles=roles,
            counter=counter,
            router=router,
            memory=memory,
            journal=journal,
            assembler=assembler,
            tools=tools,
            mcp=mcp,
            approvals=approvals,
            delegator=delegator,
            trunk=trunk,
            sleep_cycle=sleep_cycle,
            gateway=gateway,
            scheduler=scheduler,
            outbox=outbox,
            courier=courier,
            schedules=schedules,
            keeper=keeper,
            watcher=watcher,
            runs=RunLog(db, clock, started_at=started_at),
            resources=ResourceWatch(db_file=None if db.is_postgres else home.db_file, clock=clock),
        )
        # After each sleep the day's caches go and the figures are taken again.
        forgettable(counter.forget)
        stack.callback(
            bus.on(SleepFinished, services.resources.slept, name="resources.after_sleep")
        )
        stack.callback(
            bus.on(TurnFinished, services.resources.first_turn, name="resources.first_turn")
        )
        # Fork transcripts are kept within their retention limits during sleep's maintenance.
        stack.callback(
            bus.on(SleepHousekeeping, services.fork_retention, name="delegate.fork_retention")
        )
        sleep_cycle.schedule(scheduler)
        stack.callback(courier.register(bus, scheduler))
        zone = local_zone(s.scheduler.timezone)
        if s.notices.greeting:
            greeting = MorningGreeting(
                home=home, db=db, outbox=outbox, zone=zone, now=clock.now, threads=threads
            )
            stack.callback(greeting.register(bus))
        services.downtime = DowntimeAccount(
            db=db,
            outbox=outbox,
            keeper=keeper,
            scheduler=scheduler,
            zone=zone,
            now=clock.now,
            started_at=started_at,
            greeting=s.notices.greeting,
        )
        if s.notices.checklist:
            # Before the heartbeat job is added below: it is added only when something listens.
            checklist = await stack.enter_async_context(
                StandingChecklist(
                    home=home,
                    db=db,
                    roles=roles,
                    outbox=outbox,
                    delegator=delegator,
                    trunk_session=lambda: trunk.session.id if trunk.session else None,
                    zone=zone,
                    now=clock.now,
                    every_minutes=s.notices.checklist_minutes,
                    ledger=ledger,
                    awake=lambda: lifecycle.state is DaemonState.AWAKE,
                    quiet=courier.in_quiet_hours,
                )
            )
            stack.callback(checklist.register(bus))
        if bus.handlers(Heartbeat):
            # Only when something keeps a record on it: a heartbeat that does nothing is not one.
            scheduler.add_interval(
                "heartbeat", services.heartbeat, seconds=s.journal.heartbeat_minutes * 60
            )
        scheduler.add_interval(
            "checkpoint", services.checkpoint, seconds=s.store.checkpoint_interval_s
        )
        yield services
