"""What every system is wired over: the home, its settings and clock, the exit stack, the bus,
the database and the lifecycle; and the model roles over the usage ledger."""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime, tzinfo

from daemon.bus import EventBus
from daemon.clock import Clock, local_zone
from daemon.lifecycle import Lifecycle
from daemon.models.base import Model
from daemon.models.ledger import UsageLedger
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.settings import Settings
from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class Core:
    """The daemon's base: every service is entered on `stack` and closed with it, in reverse."""

    home: Home
    settings: Settings
    clock: Clock
    started_at: datetime
    stack: AsyncExitStack
    bus: EventBus
    lifecycle: Lifecycle
    db: Database

    @property
    def zone(self) -> tzinfo:
        """The person's time zone (`scheduler.timezone`, else the machine's)."""
        return local_zone(self.settings.scheduler.timezone)


async def open_core(
    stack: AsyncExitStack,
    home: Home,
    settings: Settings,
    clock: Clock,
    *,
    bus: EventBus,
    lifecycle: Lifecycle,
    started_at: datetime,
) -> Core:
    """Open the database (closed last) and enter the bus, before anything publishes or listens."""
    db = await Database.open_configured(home.db_file, settings)
    stack.push_async_callback(db.close)
    await stack.enter_async_context(bus)
    return Core(
        home=home,
        settings=settings,
        clock=clock,
        started_at=started_at,
        stack=stack,
        bus=bus,
        lifecycle=lifecycle,
        db=db,
    )


async def open_models(
    core: Core, overrides: dict[str, Model] | None
) -> tuple[UsageLedger, ModelRoles]:
    """The usage ledger, and the model roles that spend through it (`overrides`: scripted
    models or providers, as tests pass them)."""
    ledger = UsageLedger(core.db, core.settings.spend, core.clock)
    roles = await core.stack.enter_async_context(
        ModelRoles(core.settings, ledger, overrides=overrides or {})
    )
    return ledger, roles
