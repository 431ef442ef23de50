"""The systems that reach the person and keep time: the outbox and its courier, the chat
gateway, the scheduler and the schedule keeper, the morning greeting, the account of time
down, and the standing checklist."""

from __future__ import annotations

from daemon.agent.gateway import ChatGateway
from daemon.agent.trunk import Trunk
from daemon.delegate.fork import Delegator
from daemon.journal import JournalHeartbeat
from daemon.lifecycle import DaemonState
from daemon.models.ledger import UsageLedger
from daemon.models.roles import ModelRoles
from daemon.schedule.checklist import StandingChecklist
from daemon.schedule.courier import NoticeCourier
from daemon.schedule.downtime import DowntimeAccount
from daemon.schedule.greeting import MorningGreeting
from daemon.schedule.keeper import ScheduleKeeper
from daemon.schedule.outbox import Outbox
from daemon.scheduler import Scheduler
from daemon.threads import ThreadBook
from daemon.tools.approvals import Approvals
from daemon.wiring.core import Core
from daemon.wiring.doing import Toolkit


async def open_notices(core: Core) -> tuple[Outbox, NoticeCourier]:
    """What the agent tells the person unasked (the outbox), and the courier that delivers it."""
    outbox = Outbox(core.db, bus=core.bus, clock=core.clock)
    courier = await core.stack.enter_async_context(
        NoticeCourier(
            outbox=outbox, settings=core.settings.notices, zone=core.zone, clock=core.clock
        )
    )
    return outbox, courier


def chat_gateway(
    core: Core, trunk: Trunk, approvals: Approvals, courier: NoticeCourier
) -> ChatGateway:
    """The chat gateway: the socket's clients to the trunk, approvals and notices."""
    return ChatGateway(
        trunk,
        state=lambda: core.lifecycle.state.value,
        session_id=lambda: trunk.session.id if trunk.session else "",
        approvals=approvals,
        notices=courier,
    )


async def open_schedules(
    core: Core,
    kit: Toolkit,
    outbox: Outbox,
    trunk: Trunk,
    ledger: UsageLedger,
    journal: JournalHeartbeat,
) -> tuple[Scheduler, ScheduleKeeper]:
    """The scheduler of the daemon's jobs, and the keeper that fires the person's schedules."""
    s = core.settings
    scheduler = await core.stack.enter_async_context(
        Scheduler(clock=core.clock, db=core.db, timezone=s.scheduler.timezone)
    )
    journal.next_heartbeat = lambda: scheduler.next_run("heartbeat")
    keeper = await core.stack.enter_async_context(
        ScheduleKeeper(
            store=kit.schedules,
            outbox=outbox,
            scheduler=scheduler,
            bus=core.bus,
            clock=core.clock,
            zone=kit.schedules.zone,
            settings=s.schedule,
            trunk=trunk,
            delegator=kit.delegator,
            ledger=ledger,
        )
    )
    await keeper.start()
    return scheduler, keeper


def morning_greeting(core: Core, outbox: Outbox, threads: ThreadBook) -> None:
    """The morning greeting, on the bus (`notices.greeting`)."""
    if core.settings.notices.greeting:
        greeting = MorningGreeting(
            home=core.home,
            db=core.db,
            outbox=outbox,
            zone=core.zone,
            now=core.clock.now,
            threads=threads,
        )
        core.stack.callback(greeting.register(core.bus))


def downtime_account(
    core: Core, outbox: Outbox, keeper: ScheduleKeeper, scheduler: Scheduler
) -> DowntimeAccount:
    """What fell while the daemon was down, told once after the start's catch-up."""
    return DowntimeAccount(
        db=core.db,
        outbox=outbox,
        keeper=keeper,
        scheduler=scheduler,
        zone=core.zone,
        now=core.clock.now,
        started_at=core.started_at,
        greeting=core.settings.notices.greeting,
    )


async def standing_checklist(
    core: Core,
    *,
    roles: ModelRoles,
    outbox: Outbox,
    delegator: Delegator,
    trunk: Trunk,
    ledger: UsageLedger,
    courier: NoticeCourier,
) -> None:
    """The standing checklist (`HEARTBEAT.md`), on the bus (`notices.checklist`)."""
    s = core.settings
    if not s.notices.checklist:
        return
    checklist = await core.stack.enter_async_context(
        StandingChecklist(
            home=core.home,
            db=core.db,
            roles=roles,
            outbox=outbox,
            delegator=delegator,
            trunk_session=lambda: trunk.session.id if trunk.session else None,
            zone=core.zone,
            now=core.clock.now,
            every_minutes=s.notices.checklist_minutes,
            ledger=ledger,
            awake=lambda: core.lifecycle.state is DaemonState.AWAKE,
            quiet=courier.in_quiet_hours,
        )
    )
    core.stack.callback(checklist.register(core.bus))
