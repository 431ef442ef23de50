"""The schedule store tells of its changes on the bus (`schedules_changed`); the keeper listens.

No callback list: the store publishes `SchedulesChanged` and waits for its handlers, the
keeper subscribes while it runs and re-arms its timer. The keeper's firing itself is covered
by tests/test_schedule_keeper.py (a schedule added while it runs fires only through this).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.events import HOOKS_BY_NAME, SchedulesChanged
from daemon.schedule.keeper import ScheduleKeeper
from daemon.schedule.outbox import Outbox
from daemon.schedule.store import ScheduleStore
from daemon.scheduler import Scheduler
from daemon.settings import ScheduleSettings
from daemon.store.db import Database

LONDON = ZoneInfo("Europe/London")
NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

pytestmark = pytest.mark.anyio


def test_schedules_changed_is_an_awaited_observer_hook() -> None:
    spec = HOOKS_BY_NAME["schedules_changed"]
    assert spec.event_type is SchedulesChanged
    assert spec.kind.value == "observer" and spec.wait


async def test_every_change_is_published_and_handled_before_the_call_returns(
    tmp_path: Path,
) -> None:
    async with await Database.open(tmp_path / "db.sqlite") as db, EventBus() as bus:
        seen: list[tuple[str, str]] = []
        bus.on(SchedulesChanged, lambda e: seen.append((e.schedule_id, e.change)), name="t")
        store = ScheduleStore(
            db, clock=FakeClock(NOW), zone=LONDON, settings=ScheduleSettings(), bus=bus
        )
        one = await store.add("tomorrow at 9", "dentist")
        assert seen == [(one.id, "added")]
        await store.cancel(one.id)
        asked = await store.add("tomorrow at 10", "wire money", requested_by="tool")
        other = await store.add("tomorrow at 11", "call back", requested_by="tool")
        await store.approve(asked.id)
        await store.decline(other.id)
        assert seen == [
            (one.id, "added"),
            (one.id, "cancelled"),
            (asked.id, "added"),
            (other.id, "added"),
            (asked.id, "approved"),
            (other.id, "declined"),
        ]
        # Refused changes tell nothing.
        with pytest.raises(ValueError):
            await store.cancel(one.id)
        assert len(seen) == 6


async def test_a_store_without_a_bus_changes_quietly(tmp_path: Path) -> None:
    async with await Database.open(tmp_path / "db.sqlite") as db:
        store = ScheduleStore(db, clock=FakeClock(NOW), zone=LONDON, settings=ScheduleSettings())
        made = await store.add("tomorrow at 9", "dentist")
        assert (await store.cancel(made.id)).status == "cancelled"


async def test_the_keeper_listens_while_it_runs(tmp_path: Path) -> None:
    """That its handler re-arms the timer: a schedule added while the keeper runs fires
    (tests/test_schedule_keeper.py, e.g. the pending-until-approved test)."""
    clock = FakeClock(NOW)
    cfg = ScheduleSettings()
    async with await Database.open(tmp_path / "db.sqlite") as db, EventBus() as bus:
        store = ScheduleStore(db, clock=clock, zone=LONDON, settings=cfg, bus=bus)
        async with (
            Scheduler(clock=clock, db=db, timezone="Europe/London") as scheduler,
            _keeper(store, scheduler, bus, clock) as keeper,
        ):
            await keeper.start()
            assert bus.handlers(SchedulesChanged) == ["schedule.keeper.rearm"]
        assert bus.handlers(SchedulesChanged) == []


async def test_the_keeper_refuses_a_store_that_tells_another_bus(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    async with await Database.open(tmp_path / "db.sqlite") as db:
        bus = EventBus()
        quiet = ScheduleStore(db, clock=clock, zone=LONDON, settings=ScheduleSettings())
        keeper = _keeper(quiet, Scheduler(clock=clock, db=db, timezone="UTC"), bus, clock)
        with pytest.raises(ValueError, match="another bus"):
            await keeper.start()
        assert bus.handlers(SchedulesChanged) == []


def _keeper(
    store: ScheduleStore, scheduler: Scheduler, bus: EventBus, clock: FakeClock
) -> ScheduleKeeper:
    return ScheduleKeeper(
        store=store,
        outbox=Outbox(store.db, bus=bus, clock=clock),
        scheduler=scheduler,
        bus=bus,
        clock=clock,
        zone=LONDON,
        settings=store.settings,
    )
