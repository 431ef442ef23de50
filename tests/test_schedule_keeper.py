"""Firing schedules on the injected clock: a month of a daily reminder, downtime caught up once,
daylight-saving changes in Europe/London, and a real daemon killed between firing and delivery
(issue 23)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import anyio.lowlevel
import pytest

from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.events import JournalNote, NoticePosted
from daemon.schedule.keeper import JOB, ScheduleKeeper
from daemon.schedule.keeper import journaled as journaled_for
from daemon.schedule.outbox import Notice, Outbox
from daemon.schedule.store import ScheduleError, ScheduleStore
from daemon.schedule.tools import schedule_command, schedule_tools
from daemon.scheduler import Scheduler
from daemon.settings import ScheduleSettings
from daemon.store.db import Database
from tests.faults import CRASH_STATUS
from tests.harness import REPO, Client, DaemonProcess, daemon_env, run_cli, wait_until

pytestmark = pytest.mark.anyio

LONDON = ZoneInfo("Europe/London")


class SettlingClock(FakeClock):
    """Simulated time that moves only once the keeper's firing has finished its work.

    A plain fake clock jumps ahead on every scheduler nap, also while a firing still waits on
    the database thread — days of simulated time per real millisecond. Here a nap first waits
    (in real time) for the firing to settle, as it would in a day that lasts a day.
    """

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self.busy: Callable[[], bool] = lambda: False

    async def sleep(self, seconds: float) -> None:
        while self.busy():
            await anyio.sleep(0.0005)
        # A nap the firing cut short (its new timer) ends here, before the clock moves.
        await anyio.lowlevel.checkpoint_if_cancelled()
        await super().sleep(seconds)


@dataclass
class Rig:
    db: Database
    bus: EventBus
    clock: SettlingClock
    outbox: Outbox
    store: ScheduleStore
    scheduler: Scheduler
    keeper: ScheduleKeeper
    journal: list[JournalNote]

    async def run_until(self, until: datetime) -> None:
        """Run the scheduler on the fake clock until simulated time reaches `until`."""
        async with anyio.create_task_group() as tg:
            await tg.start(self.scheduler.run)
            with anyio.fail_after(60):
                while self.clock.now() < until:
                    await anyio.lowlevel.checkpoint()
                # Let a firing that started just before `until` finish.
                while self.scheduler.describe()[JOB]["running"]:
                    await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()

    async def notices(self) -> list[Notice]:
        return await self.outbox.recent(10_000)


@asynccontextmanager
async def rig(
    path: Path, clock: SettlingClock, *, nap_s: float = 3600.0, **settings: Any
) -> AsyncIterator[Rig]:
    """The keeper as the daemon wires it, on a fake clock (entered once per daemon 'run')."""
    cfg = ScheduleSettings(**settings)
    async with await Database.open(path) as db, EventBus() as bus:
        journal: list[JournalNote] = []
        bus.on(JournalNote, journal.append, name="test.journal")
        outbox = Outbox(db, bus=bus, clock=clock)
        store = ScheduleStore(db, clock=clock, zone=LONDON, settings=cfg, bus=bus)
        async with Scheduler(
            clock=clock, db=db, timezone="Europe/London", max_nap_s=nap_s
        ) as scheduler:
            clock.busy = lambda: bool(scheduler.describe().get(JOB, {}).get("running"))
            async with ScheduleKeeper(
                store=store,
                outbox=outbox,
                scheduler=scheduler,
                bus=bus,
                clock=clock,
                zone=LONDON,
                settings=cfg,
            ) as keeper:
                await keeper.start()
                yield Rig(db, bus, clock, outbox, store, scheduler, keeper, journal)
        await bus.drain()


async def test_a_daily_reminder_fires_thirty_times_in_a_simulated_month(tmp_path: Path) -> None:
    clock = SettlingClock(datetime(2026, 3, 1, 6, 0, tzinfo=UTC))
    async with rig(tmp_path / "db.sqlite", clock) as r:
        made = await r.store.add("every day at 7", "stretch", requested_by="person")
        # Other schedules far ahead cost no wake-up.
        for i in range(50):
            await r.store.add("2027-01-01T09:00", f"far {i}", requested_by="agent")
        await r.run_until(datetime(2026, 3, 31, 5, 0, tzinfo=UTC))
        fires = await r.store.fires(made.id)
        notices = await r.notices()
        wakeups = r.keeper.wakeups
    assert len(fires) == 30
    assert len(notices) == 30
    # 07:00 London every day, across the change to summer time on 29 March.
    assert {f.due_at.astimezone(LONDON).strftime("%H:%M") for f in fires} == {"07:00"}
    assert [f.due_at.astimezone(LONDON).day for f in fires] == list(range(1, 31))
    assert fires[27].due_at == datetime(2026, 3, 28, 7, 0, tzinfo=UTC)
    assert fires[28].due_at == datetime(2026, 3, 29, 6, 0, tzinfo=UTC)
    assert all(not f.late_s and not f.catch_up for f in fires)
    assert {n.text for n in notices} == {"stretch"}
    assert {n.key for n in notices} == {f"fire:{made.id}:{f.due_at.isoformat()}" for f in fires}
    # One wake-up per firing (and the 51 changes when the schedules were added and armed).
    assert wakeups <= 30 + 52, wakeups
    assert sum(1 for n in r.journal if "stretch" in n.summary) == 30


async def test_two_days_down_one_late_delivery_per_one_off_and_one_catch_up_per_recurring(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db.sqlite"
    clock = SettlingClock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    async with rig(path, clock) as r:
        plumber = await r.store.add("tomorrow at 9", "call the plumber")
        dentist = await r.store.add("2026-03-04T07:30", "dentist at 8")
        daily = await r.store.add("every day at 8", "water the plants")
        hourly = await r.store.add("every 2 hours", "stand up")
        await r.run_until(datetime(2026, 3, 2, 13, 0, tzinfo=UTC))
        assert [n.text for n in await r.notices()] == ["stand up"]
    # Down from Monday 13:00 to Wednesday 12:30.
    clock.set(datetime(2026, 3, 4, 12, 30, tzinfo=UTC))
    async with rig(path, clock) as r:
        await r.run_until(datetime(2026, 3, 4, 14, 30, tzinfo=UTC))
        after = [n for n in await r.notices() if n.created_at >= datetime(2026, 3, 4, tzinfo=UTC)]
        by_schedule: dict[str | None, list[Notice]] = {}
        for n in after:
            by_schedule.setdefault(n.schedule_id, []).append(n)
        # One each, at start; the two-hourly one also at its next regular time (14:00).
        assert {k: len(v) for k, v in by_schedule.items()} == {
            plumber.id: 1,
            dentist.id: 1,
            daily.id: 1,
            hourly.id: 2,
        }, [n.text for n in after]
        (late,) = by_schedule[plumber.id]
        assert late.late_s == pytest.approx(27.5 * 3600)  # due Tuesday 09:00
        assert late.text == "call the plumber"
        assert late.due_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
        assert by_schedule[dentist.id][0].late_s == pytest.approx(5 * 3600)
        (catch_up,) = await r.store.fires(daily.id)
        # The catch-up answers the latest missed run (today 08:00), never one per missed day.
        assert catch_up.catch_up and catch_up.due_at == datetime(2026, 3, 4, 8, 0, tzinfo=UTC)
        assert catch_up.late_s == pytest.approx(4.5 * 3600)
        # Each recurring one moved on to its next time after now; the one-offs are done.
        assert (await r.store.get(daily.id)).next_due == datetime(2026, 3, 5, 8, 0, tzinfo=UTC)  # type: ignore[union-attr]
        assert (await r.store.get(plumber.id)).status == "done"  # type: ignore[union-attr]
        hourly_fires = await r.store.fires(hourly.id)
        # Monday 12:00 before the downtime; one catch-up (Wednesday 12:00, the latest of the 18
        # missed); Wednesday 14:00 on time.
        assert [(f.due_at.hour, f.due_at.day, f.catch_up) for f in hourly_fires] == [
            (12, 2, False),
            (12, 4, True),
            (14, 4, False),
        ]
    # A third start fires nothing again.
    async with rig(path, clock) as r:
        before = len(await r.notices())
        await r.run_until(datetime(2026, 3, 4, 15, 45, tzinfo=UTC))
        assert len(await r.notices()) == before


async def test_with_catch_up_off_a_missed_recurring_run_is_skipped_but_a_one_off_still_fires(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db.sqlite"
    clock = SettlingClock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    async with rig(path, clock, catch_up=False) as r:
        once = await r.store.add("tomorrow at 9", "call the plumber")
        daily = await r.store.add("every day at 8", "water the plants")
    clock.set(datetime(2026, 3, 4, 12, 0, tzinfo=UTC))
    async with rig(path, clock, catch_up=False) as r:
        await r.run_until(datetime(2026, 3, 4, 12, 30, tzinfo=UTC))
        assert [n.schedule_id for n in await r.notices()] == [once.id]
        assert await r.store.fires(daily.id) == []
        assert (await r.store.get(daily.id)).next_due == datetime(2026, 3, 5, 8, 0, tzinfo=UTC)  # type: ignore[union-attr]


async def test_daylight_saving_in_london_march_and_october(tmp_path: Path) -> None:
    clock = SettlingClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    async with rig(tmp_path / "db.sqlite", clock, nap_s=600) as r:
        nine = await r.store.add("every day at 9", "nine o'clock")
        skipped = await r.store.add("every day at 1:30", "half past one")
        await r.run_until(datetime(2026, 3, 31, 0, 0, tzinfo=UTC))
        march_nine = [f.due_at for f in await r.store.fires(nine.id)]
        march_gap = [f.due_at for f in await r.store.fires(skipped.id)]
        clock.set(datetime(2026, 10, 23, 12, 0, tzinfo=UTC))
        r.keeper.rearm()
        await r.run_until(datetime(2026, 10, 27, 0, 0, tzinfo=UTC))
        oct_nine = [f.due_at for f in await r.store.fires(nine.id)][len(march_nine) + 1 :]
        oct_twice = [f.due_at for f in await r.store.fires(skipped.id)][len(march_gap) + 1 :]
    # 09:00 local every day: GMT until the 29th, BST after.
    assert [d.astimezone(LONDON).strftime("%d %H:%M %Z") for d in march_nine] == [
        "28 09:00 GMT",
        "29 09:00 BST",
        "30 09:00 BST",
    ]
    # 01:30 does not exist on the 29th: it fires once at 02:00 BST, the first instant after.
    assert [d.astimezone(LONDON).strftime("%d %H:%M %Z") for d in march_gap] == [
        "28 01:30 GMT",
        "29 02:00 BST",
        "30 01:30 BST",
    ]
    assert [d.astimezone(LONDON).strftime("%d %H:%M %Z") for d in oct_nine] == [
        "24 09:00 BST",
        "25 09:00 GMT",
        "26 09:00 GMT",
    ]
    # 01:30 happens twice on the 25th: it fires once, at the first.
    assert [d.astimezone(LONDON).strftime("%d %H:%M %Z") for d in oct_twice] == [
        "24 01:30 BST",
        "25 01:30 BST",
        "26 01:30 GMT",
    ]


async def test_a_firing_found_done_after_a_crash_is_not_repeated(tmp_path: Path) -> None:
    clock = SettlingClock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    async with rig(tmp_path / "db.sqlite", clock) as r:
        announced: list[NoticePosted] = []
        r.bus.on(NoticePosted, announced.append, name="test.announced")
        made = await r.store.add("in 5 minutes", "tea")
        clock.advance(minutes=5)
        (due,) = await r.store.due(clock.now())
        assert await r.keeper.fire(due, clock.now())
        # The same occurrence fired again (a retry after a crash mid-way, or a replay of the
        # schedule as it was read): nothing new, and the person is told once.
        assert await r.keeper.fire(due, clock.now())
        await r.bus.drain()
        (notice,) = await r.notices()
        assert [e.notice_id for e in announced] == [notice.id]
        assert len(await r.store.fires(made.id)) == 1
        assert (await r.store.get(made.id)).fired_count == 1  # type: ignore[union-attr]


async def test_store_refuses_what_it_cannot_keep(tmp_path: Path) -> None:
    clock = SettlingClock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    async with rig(tmp_path / "db.sqlite", clock, max_schedules=2) as r:
        with pytest.raises(ScheduleError, match="cannot read the time 'whenever'"):
            await r.store.add("whenever", "x")
        with pytest.raises(ScheduleError, match="say what to remind of"):
            await r.store.add("in 5 minutes", "   ")
        with pytest.raises(ScheduleError, match="unknown kind"):
            await r.store.add("in 5 minutes", "x", kind="alarm")
        first = await r.store.add("in 5 minutes", "a")
        await r.store.add("in 6 minutes", "b", requested_by="tool")
        with pytest.raises(ScheduleError, match="max_schedules = 2"):
            await r.store.add("in 7 minutes", "c")
        await r.store.cancel(first.id)
        with pytest.raises(ScheduleError, match="already cancelled"):
            await r.store.cancel(first.id)
        with pytest.raises(ScheduleError, match="no schedule 's-nope'"):
            await r.store.cancel("s-nope")
        await r.store.add("in 7 minutes", "c")
        # The pending one ("tool") never fires until approved.
        await r.run_until(datetime(2026, 3, 2, 10, 30, tzinfo=UTC))
        assert [n.text for n in await r.notices()] == ["c"]


# -- a real daemon, killed between firing and delivery ------------------------------------


def _rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def _start_unprobed(d: DaemonProcess, *, crash_at: str | None = None) -> None:
    """Start the daemon and wait for it to be ready without connecting (a probe is a client:
    it would be handed what is pending). `crash_at`: a fault point where it dies at once
    (`tests/faults.py` installs the crash; the daemon has no switch for it)."""
    d.log_path = d.home.parent / f"daemon-{len(d.started)}.log"
    d._log = open(d.log_path, "wb")  # closed by d.wait()
    program = ["tests.faults", crash_at] if crash_at else ["daemon.cli"]
    d.proc = subprocess.Popen(
        [sys.executable, "-m", *program, "run", "--home", str(d.home)],
        cwd=REPO,
        env=d.env,
        stdout=d._log,
        stderr=subprocess.STDOUT,
    )
    d.started.append(time.monotonic())
    wait_until(
        lambda: any(e.get("event") == "daemon ready" for e in d.log_events()),
        30,
        "the daemon to be ready",
    )


def test_a_daemon_killed_between_firing_and_delivery_delivers_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text('[scheduler]\ntimezone = "Europe/London"\n')
    env = daemon_env()
    due = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    added = run_cli(
        "schedule", "add", due.isoformat(), "call the plumber", "--home", str(home), env=env
    )
    assert added.returncode == 0, added.stderr
    schedule_id = added.stdout.split()[1].rstrip(":")
    # The daemon exits abruptly right after the firing is committed, before anyone is told.
    d = DaemonProcess(home=home, env=env)
    _start_unprobed(d, crash_at="schedule.fire_committed")
    assert d.wait(30) == CRASH_STATUS, d.logs()
    fired = _rows(home, "SELECT schedule_id, due_at FROM schedule_fires")
    assert fired == [(schedule_id, due.isoformat())]
    ((key, delivered),) = _rows(home, "SELECT key, delivered_at FROM notices")
    assert key == f"fire:{schedule_id}:{due.isoformat()}" and delivered is None
    # Started again: the notice is still owed; the next client of the person gets it once.
    d = DaemonProcess(home=home, env=env)
    _start_unprobed(d)
    try:
        with Client(d.socket_path, timeout=10) as c:
            assert c.recv()["type"] == "hello"
            frame = c.recv()
            assert frame["type"] == "notice", frame
            assert frame["schedule_id"] == schedule_id and "call the plumber" in frame["text"]
            # Delivered once a client that shows notices says it showed it.
            c.send({"type": "seen", "ids": [frame["id"]]})
            wait_until(
                lambda: _rows(home, "SELECT delivered_at FROM notices")[0][0] is not None,
                10,
                "the notice marked delivered",
            )
        with Client(d.socket_path, timeout=5) as c:
            assert c.recv()["type"] == "hello"
            c.sock.settimeout(1.0)
            with pytest.raises(TimeoutError):
                c.recv()
    finally:
        d.stop()
    # Not fired again, not posted again, and the schedule is done.
    assert len(_rows(home, "SELECT 1 FROM schedule_fires")) == 1
    assert len(_rows(home, "SELECT 1 FROM notices")) == 1
    assert _rows(home, "SELECT status FROM schedules") == [("done",)]


async def test_a_reminder_repeating_more_often_than_hourly_does_not_fill_the_journal(
    tmp_path: Path,
) -> None:
    clock = SettlingClock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    async with rig(tmp_path / "db.sqlite", clock, min_interval_minutes=5) as r:
        often = await r.store.add("every 30 minutes", "drink water")
        hourly = await r.store.add("every hour", "stretch")
        await r.run_until(datetime(2026, 3, 2, 13, 5, tzinfo=UTC))
        assert len(await r.store.fires(often.id)) == 6
        assert len(await r.store.fires(hourly.id)) == 3
    journaled = [n.summary for n in r.journal]
    assert sum("stretch" in s for s in journaled) == 3
    assert not any("drink water" in s for s in journaled)
    assert not journaled_for(often) and journaled_for(hourly)


async def test_what_the_agent_schedules_on_a_tools_word_waits_pending_until_approved(
    tmp_path: Path,
) -> None:
    from daemon.settings import PermissionRule
    from daemon.tools.approvals import Approvals, PermissionGuard
    from daemon.tools.policy import PermissionPolicy
    from daemon.tools.registry import ToolContext, ToolRegistry

    clock = SettlingClock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))

    def registry(rules: list[PermissionRule]) -> ToolRegistry:
        # Nobody is connected to answer: an ask is settled as no at once.
        guard = PermissionGuard(
            policy=PermissionPolicy(rules), approvals=Approvals(), timeout_s=5, clock=clock
        )
        reg = ToolRegistry(guard=guard)
        for tool in schedule_tools(r.store, guard=guard):
            reg.register(tool)
        return reg

    def ctx(origin: str) -> ToolContext:
        return ToolContext(session_id="trunk-1", turn_id="t-1", extras={"origin": origin})

    async with rig(tmp_path / "db.sqlite", clock, nap_s=60) as r:
        tools = registry([])
        mine = await tools.call("schedule", {"when": "in 10 minutes", "what": "tea"}, ctx("person"))
        assert mine.content.startswith("scheduled s-") and not mine.is_error
        theirs = await tools.call(
            "schedule", {"when": "in 10 minutes", "what": "wire 500 EUR"}, ctx("tool")
        )
        assert not theirs.is_error and "pending" in theirs.content
        assert "reverie schedule approve" in theirs.content
        unclear = await tools.call("schedule", {"when": "soonish", "what": "x"}, ctx("person"))
        assert unclear.is_error and "cannot read the time 'soonish'" in unclear.content
        rows = {s.text: (s.requested_by, s.status) for s in await r.store.listing()}
        assert rows == {"tea": ("person", "active"), "wire 500 EUR": ("tool", "pending")}
        await r.run_until(datetime(2026, 3, 2, 10, 15, tzinfo=UTC))
        assert [n.text for n in await r.notices()] == ["tea"]
        # The person approves it (as `reverie schedule approve` does): it fires, late.
        (pending,) = [s for s in await r.store.listing() if s.status == "pending"]
        await schedule_command(r.store, {"action": "approve", "id": pending.id})
        await r.run_until(datetime(2026, 3, 2, 10, 20, tzinfo=UTC))
        texts = [n.text for n in await r.notices()]
        assert texts[0] == "tea"
        assert texts[1] == "wire 500 EUR"
        (late,) = [n for n in await r.notices() if n.text == "wire 500 EUR"]
        assert late.due_at == datetime(2026, 3, 2, 10, 10, tzinfo=UTC)
        assert 5 * 60 <= late.late_s <= 7 * 60
        listed = await tools.call("list_schedules", {"all": True}, ctx("person"))
        assert "wire 500 EUR" in listed.content and "[done]" in listed.content
        # A rule allowing `schedule` is the person's yes given in advance.
        allowed = registry([PermissionRule(tool="schedule", match="*", decision="allow")])
        ok = await allowed.call("schedule", {"when": "in 1 hour", "what": "call Ada"}, ctx("tool"))
        assert "the person approved it" in ok.content
        cancel = await tools.call("cancel_schedule", {"id": "s-nope"}, ctx("person"))
        assert cancel.is_error and "no schedule 's-nope'" in cancel.content


async def test_a_task_a_restart_interrupted_is_reported_once_never_run_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db.sqlite"
    clock = SettlingClock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    async with rig(path, clock) as r:
        task = await r.store.add("in 5 minutes", "count the herons", kind="task")
        # What a crash mid-task leaves: the firing committed (fire record `running`, the
        # schedule moved on), no result, no notice.
        await r.db.execute(
            "INSERT INTO schedule_fires(schedule_id, due_at, fired_at, late_s, catch_up, status)"
            " VALUES (?, '2026-03-02T10:05:00+00:00', '2026-03-02T10:05:00+00:00', 0, 0, 'running')",
            (task.id,),
        )
        await r.db.execute(
            "UPDATE schedules SET status = 'done', next_due = NULL WHERE id = ?", (task.id,)
        )
    clock.set(datetime(2026, 3, 2, 10, 30, tzinfo=UTC))
    for _ in range(2):  # and a second start finds nothing left to do
        async with rig(path, clock) as r:
            await r.run_until(datetime(2026, 3, 2, 10, 40, tzinfo=UTC))
            (notice,) = await r.notices()
            (fire,) = await r.store.fires(task.id)
    assert notice.kind == "task" and notice.schedule_id == task.id
    assert notice.text.startswith("Task failed: count the herons")
    assert "interrupted" in notice.text and "not run again" in notice.text
    assert fire.status == "failed" and fire.notice_id == notice.id


async def test_a_schedule_that_cannot_fire_is_set_aside_and_the_others_keep_firing(
    tmp_path: Path,
) -> None:
    clock = SettlingClock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    async with rig(tmp_path / "db.sqlite", clock, nap_s=600) as r:
        broken = await r.store.add("every day at 11", "unreadable")
        fine = await r.store.add("every day at 11:30", "readable")
        # A row this build cannot read (written by a newer one, or damaged by hand).
        await r.db.execute(
            "UPDATE schedules SET rule = ? WHERE id = ?",
            ('{"kind": "daily", "at": "eleven"}', broken.id),
        )
        await r.run_until(datetime(2026, 3, 3, 12, 0, tzinfo=UTC))
        assert [n.text for n in await r.notices()] == ["readable", "readable"]
        assert (await r.db.fetchone("SELECT status FROM schedules WHERE id = ?", (broken.id,)))[
            0
        ] == "failed"
        assert len(await r.store.fires(fine.id)) == 2
        # No wake-up loop on the broken one: one per firing, plus the start and the adds.
        assert r.keeper.wakeups <= 6, r.keeper.wakeups
