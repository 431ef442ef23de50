"""The scheduler: jobs on the injectable clock, in the daemon's task group, persisted, caught up once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from daemon.clock import FakeClock
from daemon.scheduler import Scheduler, parse_hhmm
from daemon.status_offline import persisted_jobs
from daemon.store.db import Database

pytestmark = pytest.mark.anyio

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def _run_until(s: Scheduler, clock: FakeClock, until: datetime) -> None:
    """Run the scheduler on the fake clock until simulated time reaches `until`."""
    async with anyio.create_task_group() as tg:
        await tg.start(s.run)
        with anyio.fail_after(30):
            while clock.now() < until:
                await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()


async def test_a_simulated_month_with_two_days_down_catches_up_once(tmp_path: Path) -> None:
    clock = FakeClock(START)
    nights: list[datetime] = []
    current: list[Scheduler] = []

    async def nightly() -> str:
        # When the run was started (the fake clock runs on while the job task is scheduled).
        when = current[-1].last_run("nightly_sleep")
        assert when is not None
        nights.append(when)
        return "slept"

    async with await Database.open(tmp_path / "r.db") as db:
        # Days 1-10 of March: the daemon runs.
        async with Scheduler(clock=clock, db=db, timezone="Europe/Lisbon", max_nap_s=6 * 3600) as s:
            current.append(s)
            s.add_daily("nightly_sleep", nightly, at="03:30")
            await _run_until(s, clock, START + timedelta(days=10))
        assert len(nights) == 10
        # Down for two days (11 and 12), back at noon on the 13th: one catch-up, not two.
        clock.set(START + timedelta(days=12))
        async with Scheduler(clock=clock, db=db, timezone="Europe/Lisbon", max_nap_s=6 * 3600) as s:
            current.append(s)
            s.add_daily("nightly_sleep", nightly, at="03:30")
            assert s.next_run("nightly_sleep") == clock.now()
            await _run_until(s, clock, START + timedelta(days=30))
        state = await persisted_jobs(db)
    catch_up = nights[10]
    assert catch_up == START + timedelta(days=12)
    regular = nights[:10] + nights[11:]
    # Every regular run is at 03:30 Lisbon time (across the DST change on 29 March).
    from zoneinfo import ZoneInfo

    local = [n.astimezone(ZoneInfo("Europe/Lisbon")) for n in regular]
    assert all((t.hour, t.minute) == (3, 30) for t in local), local
    assert [t.day for t in local] == [*range(2, 12), *range(14, 32)]
    assert len(nights) == 10 + 1 + 18
    assert state["nightly_sleep"]["runs"] == len(nights)
    assert state["nightly_sleep"]["last_status"] == "ok"


async def test_first_start_and_a_short_stop_do_not_catch_up(tmp_path: Path) -> None:
    clock = FakeClock(START)
    runs: list[datetime] = []

    async def job() -> None:
        runs.append(clock.now())

    async with await Database.open(tmp_path / "r.db") as db:
        async with Scheduler(clock=clock, db=db, timezone="UTC", max_nap_s=3600) as s:
            s.add_daily("nightly", job, at="03:30")
            assert s.next_run("nightly") == datetime(2026, 3, 2, 3, 30, tzinfo=UTC)
            await _run_until(s, clock, datetime(2026, 3, 2, 4, 0, tzinfo=UTC))
        assert len(runs) == 1
        # Restarted the same morning: nothing was missed.
        clock.set(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        async with Scheduler(clock=clock, db=db, timezone="UTC") as s:
            s.add_daily("nightly", job, at="03:30")
            assert s.next_run("nightly") == datetime(2026, 3, 3, 3, 30, tzinfo=UTC)


async def test_a_catch_up_stands_in_for_a_regular_run_due_soon(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2026, 3, 1, 3, 30, tzinfo=UTC))
    runs: list[datetime] = []
    current: list[Scheduler] = []

    async def job() -> None:
        when = current[-1].last_run("nightly")
        assert when is not None
        runs.append(when)

    async with await Database.open(tmp_path / "r.db") as db:
        async with Scheduler(clock=clock, db=db, timezone="UTC", max_nap_s=3600) as s:
            current.append(s)
            s.add_daily("nightly", job, at="03:30")
            await _run_until(s, clock, datetime(2026, 3, 1, 4, 0, tzinfo=UTC))
        # Down until 01:00 two days later: the 2nd's run was missed, the 3rd's is 2.5 h away.
        clock.set(datetime(2026, 3, 3, 1, 0, tzinfo=UTC))
        async with Scheduler(clock=clock, db=db, timezone="UTC", max_nap_s=3600) as s:
            current.append(s)
            s.add_daily("nightly", job, at="03:30")
            await _run_until(s, clock, datetime(2026, 3, 4, 5, 0, tzinfo=UTC))
    assert runs == [
        datetime(2026, 3, 1, 3, 30, tzinfo=UTC),
        datetime(2026, 3, 3, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 4, 3, 30, tzinfo=UTC),
    ]


async def test_failures_are_isolated_and_a_running_job_never_overlaps(tmp_path: Path) -> None:
    clock = FakeClock(START)
    calls = {"bad": 0, "slow": 0, "good": 0}
    release = anyio.Event()

    async def bad() -> None:
        calls["bad"] += 1
        raise RuntimeError("job bug")

    async def slow() -> None:
        calls["slow"] += 1
        await release.wait()

    async def good() -> str:
        calls["good"] += 1
        return "ok"

    async with await Database.open(tmp_path / "r.db") as db:
        async with Scheduler(clock=clock, db=db, max_nap_s=60) as s:
            s.add_interval("bad", bad, seconds=60)
            s.add_interval("slow", slow, seconds=60)
            s.add_interval("good", good, seconds=60)
            await _run_until(s, clock, START + timedelta(minutes=10))
            described = s.describe()
            release.set()
        state = await persisted_jobs(db)
    assert calls["bad"] >= 9 and calls["good"] >= 9
    assert calls["slow"] == 1  # still running: later runs were skipped, not stacked
    assert (
        described["bad"]["last_status"] == "failed" and "job bug" in described["bad"]["last_result"]
    )
    assert described["good"]["last_status"] == "ok" and described["good"]["last_result"] == "ok"
    assert state["slow"]["last_status"] in ("skipped", "cancelled")


async def test_cancelling_the_scheduler_cancels_and_awaits_running_jobs(tmp_path: Path) -> None:
    clock = FakeClock(START)
    started = anyio.Event()
    finished: list[str] = []

    async def long_job() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            finished.append("cleaned up")

    async with Scheduler(clock=clock, db=None, max_nap_s=60) as s:
        s.add_interval("long", long_job, seconds=30)
        async with anyio.create_task_group() as tg:
            await tg.start(s.run)
            with anyio.fail_after(5):
                await started.wait()
            tg.cancel_scope.cancel()
    assert finished == ["cleaned up"]


def test_unknown_time_zone_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        Scheduler(clock=FakeClock(START), db=None, timezone="Mars/Olympus")


def test_parse_hhmm_rejects_nonsense() -> None:
    assert parse_hhmm("07:05") == (7, 5)
    for bad in ("7", "24:00", "12:60", "ab:cd"):
        with pytest.raises(ValueError):
            parse_hhmm(bad)


async def test_a_daemon_up_only_by_day_catches_its_first_missed_night_up(tmp_path: Path) -> None:
    """Never up at 03:30, the nightly job never ran: a start after its first due time runs it."""
    clock = FakeClock(datetime(2026, 3, 1, 8, 30, tzinfo=UTC))
    runs: list[datetime] = []

    async def job() -> None:
        runs.append(clock.now())

    async with await Database.open(tmp_path / "r.db") as db:
        async with Scheduler(clock=clock, db=db, timezone="UTC", max_nap_s=3600) as s:
            s.add_daily("nightly", job, at="03:30")
            await _run_until(s, clock, datetime(2026, 3, 1, 18, 0, tzinfo=UTC))
        assert runs == []
        # Started again that evening: the night is still ahead, nothing to catch up.
        clock.set(datetime(2026, 3, 1, 20, 0, tzinfo=UTC))
        async with Scheduler(clock=clock, db=db, timezone="UTC", max_nap_s=3600) as s:
            s.add_daily("nightly", job, at="03:30")
            assert s.next_run("nightly") == datetime(2026, 3, 2, 3, 30, tzinfo=UTC)
            await _run_until(s, clock, datetime(2026, 3, 1, 23, 0, tzinfo=UTC))
        # The next morning: the night between was missed, and is caught up once.
        clock.set(datetime(2026, 3, 2, 8, 30, tzinfo=UTC))
        async with Scheduler(clock=clock, db=db, timezone="UTC", max_nap_s=3600) as s:
            s.add_daily("nightly", job, at="03:30")
            assert s.next_run("nightly") == clock.now()
            await _run_until(s, clock, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
            assert s.last_run("nightly") == datetime(2026, 3, 2, 8, 30, tzinfo=UTC)
        assert len(runs) == 1
        # A brand-new job on a home that ran before (a new feature's job) does not catch up.
        clock.set(datetime(2026, 3, 5, 8, 30, tzinfo=UTC))
        async with Scheduler(clock=clock, db=db, timezone="UTC", max_nap_s=3600) as s:
            s.add_daily("another", job, at="03:30")
            assert s.next_run("another") == datetime(2026, 3, 6, 3, 30, tzinfo=UTC)
