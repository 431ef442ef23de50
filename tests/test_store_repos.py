"""The repositories under `daemon/store/`: one contract each, on SQLite and on PostgreSQL.

Every test runs twice, on a SQLite file and on a database of the real PostgreSQL server the
suite already starts (tests/postgres_server.py). Each backend's store is migrated once per
module and each test clears the tables it uses, so the pair stays fast.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.store.console import ConsoleQueries
from daemon.store.db import Database
from daemon.store.exams import ExamRow, ExamsRepo
from daemon.store.job_state import JobState, JobStateRepo
from daemon.store.journal_cursors import JournalCursorsRepo
from daemon.store.kv import KvRepo
from daemon.store.notices import NewNotice, NoticesRepo
from daemon.store.runs import RunsRepo
from daemon.store.schedules import Firing, ScheduleRow, SchedulesRepo, iso
from daemon.store.sessions import SessionsRepo
from daemon.store.sleep_cycles import SleepCyclesRepo
from daemon.store.threads import Thread, ThreadsRepo
from daemon.store.usage import UsageEntry, UsageRepo
from tests.postgres_server import database_url, pg_server  # noqa: F401

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class Store:
    """One migrated store of a backend; `open()` gives a handle with `tables` emptied."""

    def __init__(self, path: Path, url: str | None) -> None:
        self.path = path
        self.url = url

    @asynccontextmanager
    async def open(self, *tables: str) -> AsyncIterator[Database]:
        with anyio.fail_after(30):
            db = await Database.open(self.path, url=self.url, namespace="repos", migrate=False)
        async with db:
            for table in tables:
                await db.execute(f"DELETE FROM {table}")
            yield db


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    path = tmp_path_factory.mktemp(request.param) / "reverie.db"
    url: str | None = None
    if request.param == "postgresql":
        import psycopg

        server: str = request.getfixturevalue("pg_server")
        name = f"r_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = database_url(server, name)

    async def migrate() -> None:
        async with await Database.open(path, url=url, namespace="repos"):
            pass

    anyio.run(migrate)
    try:
        yield Store(path, url)
    finally:
        if url is not None:
            import psycopg

            with psycopg.connect(request.getfixturevalue("pg_server"), autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


def call(day: str, cost: float, **kw: Any) -> UsageEntry:
    fields: dict[str, Any] = {
        "ts": f"{day}T10:00:00+00:00",
        "day": day,
        "role": "trunk",
        "provider": "anthropic",
        "model": "claude",
        "input_tokens": 100,
        "output_tokens": 10,
        "cache_read_tokens": 300,
        "cache_write_tokens": 0,
        "cost_usd": cost,
    }
    fields.update(kw)
    return UsageEntry(**fields)


# ----- usage ledger -----------------------------------------------------------------------------
@pytest.mark.anyio
async def test_usage_sums_a_day_and_lists_days_in_order(store: Store) -> None:
    async with store.open("usage_ledger") as db:
        usage = UsageRepo(db)
        assert await usage.add(call("2026-03-02", 0.25, session_id="s1", turn_id="t1"))
        assert await usage.add(call("2026-03-02", 0.5, role="sleep", cache_read_tokens=0))
        assert await usage.add(call("2026-03-01", 1.0))
        assert await usage.add(call("2026-02-27", 9.0))

        day = await usage.day("2026-03-02")
        assert (day.calls, day.cost_usd, day.input_tokens, day.output_tokens) == (2, 0.75, 200, 20)
        assert day.cache_read_tokens == 300 and day.cache_hit_rate == 0.6
        empty = await usage.day("2026-03-05")
        assert (empty.calls, empty.cost_usd, empty.cache_hit_rate) == (0, 0.0, 0.0)

        assert await usage.calls() == 4
        days = await usage.days_since("2026-03-01")
        assert [(d.day, d.calls, d.cost_usd) for d in days] == [
            ("2026-03-01", 1, 1.0),
            ("2026-03-02", 2, 0.75),
        ]


# ----- daemon runs ------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_runs_open_close_and_reach_into_a_window(store: Store) -> None:
    async with store.open("daemon_runs") as db:
        runs = RunsRepo(db)
        assert not await runs.any_run()
        await runs.start("run-a", started_at=T0, seen_at=T0)
        await runs.seen("run-a", T0 + timedelta(minutes=5))
        await runs.start("run-b", started_at=T0 + timedelta(hours=1), seen_at=T0)
        assert await runs.any_run()
        opened = await runs.open_runs()
        assert [r.id for r in opened] == ["run-a", "run-b"]
        assert opened[0].seen_at == T0 + timedelta(minutes=5) and opened[0].stopped_at is None

        # A lost run closes at its last sign of life; a clean stop moves `seen_at` with it.
        await runs.close("run-a", at=opened[0].seen_at.isoformat(), ended="lost")
        stop = T0 + timedelta(hours=2)
        await runs.close("run-b", at=stop.isoformat(), ended="stopped", seen=True)
        assert await runs.open_runs() == []

        last = await runs.last_closed_before(T0 + timedelta(hours=3))
        assert last is not None and (last.id, last.ended, last.until) == ("run-b", "stopped", stop)
        before_b = await runs.last_closed_before(T0 + timedelta(minutes=30))
        assert before_b is not None and before_b.id == "run-a"
        assert before_b.until == T0 + timedelta(minutes=5)
        assert await runs.last_closed_before(T0) is None

        # Reaching into a window: stopped or seen in it, or still open.
        assert [r.id for r in await runs.reaching(T0 + timedelta(minutes=30))] == ["run-b"]
        assert [r.id for r in await runs.reaching(T0)] == ["run-a", "run-b"]
        await runs.add_closed(
            "run-unrecorded",
            started_at=(T0 - timedelta(days=3)).isoformat(),
            stopped_at=T0.isoformat(),
            ended="unrecorded",
        )
        reaching = await runs.reaching(T0 - timedelta(days=1))
        assert [r.id for r in reaching] == ["run-unrecorded", "run-a", "run-b"]


@pytest.mark.anyio
async def test_runs_find_the_oldest_trunk_session_before_a_time(store: Store) -> None:
    async with store.open("sessions") as db:
        runs = RunsRepo(db)
        assert await runs.oldest_trunk_session_before(T0) is None
        for sid, kind, began in (
            ("trunk-1", "trunk", T0 - timedelta(days=2)),
            ("fork-1", "fork", T0 - timedelta(days=5)),
            ("trunk-2", "trunk", T0 + timedelta(days=1)),
        ):
            await db.execute(
                "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, ?, ?, ?)",
                (sid, kind, f"{sid}.jsonl", began.isoformat()),
            )
        assert await runs.oldest_trunk_session_before(T0) == (T0 - timedelta(days=2)).isoformat()
        assert await runs.oldest_trunk_session_before(T0 - timedelta(days=3)) is None


# ----- threads ----------------------------------------------------------------------------------
def thread(tid: str, opened_by: str, at: datetime, **kw: Any) -> Thread:
    fields: dict[str, Any] = {
        "id": tid,
        "kind": "promise",
        "text": f"send the report ({tid})",
        "session_id": "trunk-1",
        "opened_by": opened_by,
        "opened_at": at,
    }
    fields.update(kw)
    return Thread(**fields)


@pytest.mark.anyio
async def test_threads_open_once_and_close_once(store: Store) -> None:
    async with store.open("threads") as db:
        threads = ThreadsRepo(db)
        due = date(2026, 3, 4)
        await threads.add(thread("t-b", "m2", T0 + timedelta(hours=1), due=due, kind="plan"))
        await threads.add(thread("t-a", "m1", T0))
        # The same message opening the same thread again keeps the first.
        await threads.add(thread("t-other-id", "m1", T0, text="send the report (t-a)"))
        opened = await threads.open_threads()
        assert [t.id for t in opened] == ["t-a", "t-b"]
        assert opened[1].due == due and opened[1].kind == "plan" and opened[1].status == "open"
        assert opened[0].opened_at == T0 and opened[0].due is None

        done_at = T0 + timedelta(hours=2)
        assert await threads.close("t-a", status="resolved", at=done_at, by="m9", note="done")
        assert not await threads.close("t-a", status="expired", at=done_at, by=None, note="x")
        assert not await threads.close("t-nope", status="resolved", at=done_at, by=None, note="")
        got = await threads.get("t-a")
        assert got is not None
        assert (got.status, got.resolved_at, got.resolved_by, got.note) == (
            "resolved",
            done_at,
            "m9",
            "done",
        )
        assert await threads.get("t-nope") is None
        assert [t.id for t in await threads.open_threads()] == ["t-b"]


@pytest.mark.anyio
async def test_threads_read_a_turn_and_the_person_afterwards(store: Store) -> None:
    async with store.open("messages", "sessions") as db:
        await db.execute(
            "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, ?, ?, ?)",
            ("trunk-1", "trunk", "trunk-1.jsonl", T0.isoformat()),
        )
        for seq, (msg_id, role, turn, minutes, text) in enumerate(
            [
                ("m1", "user", "turn-1", 0, "can you send the report?"),
                ("m2", "assistant", "turn-1", 1, "I will send it tomorrow."),
                ("m3", "user", "turn-2", 60, "the report is done"),
                ("m4", "assistant", "turn-2", 61, "good"),
            ]
        ):
            await db.execute(
                "INSERT INTO messages(session_id, seq, msg_id, turn_id, role, content, ts)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    "trunk-1",
                    seq,
                    msg_id,
                    turn,
                    role,
                    text,
                    (T0 + timedelta(minutes=minutes)).isoformat(),
                ),
            )
        threads = ThreadsRepo(db)
        turn = await threads.turn_messages("trunk-1", "turn-1")
        assert [(m.msg_id, m.role, m.content) for m in turn] == [
            ("m1", "user", "can you send the report?"),
            ("m2", "assistant", "I will send it tomorrow."),
        ]
        assert turn[1].at == T0 + timedelta(minutes=1)
        assert await threads.turn_messages("trunk-1", "turn-9") == []
        later = await threads.person_said_after(T0)
        assert [(m.msg_id, m.role) for m in later] == [("m3", "user")]


# ----- the sleep self-exam ----------------------------------------------------------------------
@pytest.mark.anyio
async def test_exams_keep_one_per_cycle_newest_first(store: Store) -> None:
    async with store.open("self_exams") as db:
        exams = ExamsRepo(db)
        item = {"key": "fact:1", "question": "Where does Ana live — Lisboa?", "result": "hit"}
        for n in range(3):
            await exams.add(
                ExamRow(
                    cycle_id=f"cycle-{n}",
                    taken_at=T0 + timedelta(days=n),
                    worded_by="offline",
                    items=[item, {**item, "key": f"open:{n}", "result": "miss"}],
                    score=50.0,
                    hits=1,
                )
            )
        await exams.add(ExamRow(cycle_id="cycle-1", taken_at=T0, worded_by="again", items=[]))
        recent = await exams.recent(2)
        assert [e.cycle_id for e in recent] == ["cycle-2", "cycle-1"]
        one = await exams.get("cycle-1")
        assert one is not None and one.worded_by == "offline"
        assert one.taken_at == T0 + timedelta(days=1)
        assert one.items == [item, {**item, "key": "open:1", "result": "miss"}]
        assert await exams.get("cycle-9") is None


# ----- the outbox's notices ---------------------------------------------------------------------
def new_notice(key: str, at: datetime, **kw: Any) -> NewNotice:
    fields: dict[str, Any] = {
        "key": key,
        "kind": "reminder",
        "text": f"call the dentist ({key})",
        "source": "agent",
        "created_at": at,
    }
    fields.update(kw)
    return NewNotice(**fields)


@pytest.mark.anyio
async def test_notices_post_once_by_key_and_stamp_once(store: Store) -> None:
    async with store.open("notices") as db:
        notices = NoticesRepo(db)
        due = T0 - timedelta(minutes=30)
        first, created = await notices.add(
            new_notice("fire:s1:a", T0, due_at=due, late_s=1800.0, schedule_id="s1")
        )
        assert created and first.pending and first.id.startswith("n-")
        again, created = await notices.add(new_notice("fire:s1:a", T0, text="other text"))
        assert not created and again == first and again.text == "call the dentist (fire:s1:a)"
        assert (again.due_at, again.late_s, again.schedule_id) == (due, 1800.0, "s1")
        second, _ = await notices.add(new_notice("greet:1", T0 + timedelta(minutes=1)))
        third, _ = await notices.add(new_notice("greet:2", T0 + timedelta(minutes=2)))

        assert await notices.get(second.id) == second
        assert await notices.by_key("greet:2") == third
        assert await notices.get("n-nope") is None and await notices.by_key("nope") is None

        later = T0 + timedelta(hours=1)
        assert await notices.stamp("delivered_at", [first.id, second.id, first.id], later) == 2
        assert await notices.stamp("delivered_at", [first.id], later) == 0  # stamped once
        assert await notices.stamp("acknowledged_at", [], later) == 0
        assert [n.id for n in await notices.pending()] == [third.id]
        assert await notices.stamp("acknowledged_at", [second.id, "n-nope"], later) == 1
        assert [n.id for n in await notices.unacknowledged()] == [first.id, third.id]
        got = await notices.get(first.id)
        assert got is not None and got.delivered_at == later and not got.pending
        assert [n.id for n in await notices.newest(2)] == [second.id, third.id]
        with pytest.raises(ValueError, match="stamp"):
            await notices.stamp("text", [first.id], later)  # type: ignore[arg-type]


# ----- schedules and their firings --------------------------------------------------------------
def schedule_row(sid: str, due: datetime | None, status: str = "active", **kw: Any) -> ScheduleRow:
    fields: dict[str, Any] = {
        "id": sid,
        "kind": "reminder",
        "text": f"water the plants ({sid})",
        "phrase": "tomorrow at 9",
        "rule": None,
        "next_due": iso(due) if due else None,
        "status": status,
        "requested_by": "person",
        "session_id": None,
        "created_at": iso(T0),
        "updated_at": iso(T0),
    }
    fields.update(kw)
    return ScheduleRow(**fields)


@pytest.mark.anyio
async def test_schedules_list_count_and_find_what_is_due(store: Store) -> None:
    async with store.open("schedule_fires", "schedules") as db:
        schedules = SchedulesRepo(db)
        assert await schedules.next_due() is None and await schedules.live_count() == 0
        later, soon = T0 + timedelta(days=2), T0 + timedelta(hours=1)
        await schedules.add(schedule_row("s-later", later, rule='{"every": "day"}'))
        await schedules.add(schedule_row("s-soon", soon))
        await schedules.add(schedule_row("s-pending", None, "pending", requested_by="tool"))
        await schedules.add(schedule_row("s-done", None, "done", fired_count=1))
        assert await schedules.live_count() == 3
        assert await schedules.counts() == {"active": 2, "pending": 1, "done": 1}
        assert [r.id for r in await schedules.listing(include_ended=False)] == [
            "s-soon",
            "s-later",
            "s-pending",
        ]
        assert len(await schedules.listing(include_ended=True)) == 4
        assert [r.id for r in await schedules.upcoming(1)] == ["s-soon"]
        assert await schedules.next_due() == soon
        assert [r.id for r in await schedules.due(T0 + timedelta(hours=1))] == ["s-soon"]
        assert await schedules.due(T0) == []
        got = await schedules.get("s-later")
        assert got is not None and got.rule == '{"every": "day"}' and got.next_due == iso(later)
        assert await schedules.get("s-nope") is None

        await schedules.set_status("s-soon", "cancelled", next_due=None, at=soon)
        cancelled = await schedules.get("s-soon")
        assert cancelled is not None and cancelled.status == "cancelled"
        assert cancelled.next_due is None and cancelled.updated_at == iso(soon)
        # A move is conditional on the due time read: a stale one moves nothing.
        await schedules.advance("s-later", stored=soon, following=None, at=soon)
        assert (await schedules.get("s-later")).status == "active"  # type: ignore[union-attr]
        await schedules.advance("s-later", stored=later, following=None, at=soon)
        assert (await schedules.get("s-later")).status == "done"  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_firing_is_recorded_once_with_its_notice_and_finished(store: Store) -> None:
    async with store.open("schedule_fires", "notices", "schedules") as db:
        schedules = SchedulesRepo(db)
        due = T0 + timedelta(hours=1)
        following = due + timedelta(days=1)
        await schedules.add(schedule_row("s-r", due, rule='{"every": "day"}'))
        await schedules.add(schedule_row("s-t", due, kind="task"))
        now = due + timedelta(minutes=3)
        reminder = Firing(
            schedule_id="s-r",
            due=due,
            stored=due,
            now=now,
            following=following,
            late_s=180.0,
            catch_up=True,
            status="delivered",
            notice=new_notice(f"fire:s-r:{iso(due)}", now, schedule_id="s-r", due_at=due),
        )
        notice, created = await schedules.commit_fire(reminder)
        assert created and notice is not None and notice.schedule_id == "s-r"
        # The same firing again (a crash before anyone was told): nothing new, nothing moved.
        again, created = await schedules.commit_fire(reminder)
        assert not created and again == notice
        row = await schedules.get("s-r")
        assert row is not None
        assert (row.next_due, row.status, row.fired_count, row.last_fired_at) == (
            iso(following),
            "active",
            1,
            iso(now),
        )
        [fire] = await schedules.fires("s-r")
        assert (fire.due_at, fire.late_s, fire.catch_up, fire.status) == (
            due,
            180.0,
            True,
            "delivered",
        )
        assert fire.notice_id == notice.id and fire.noted_at is None

        # A task: running until finished, then noted in the trunk's transcript.
        task = Firing(
            schedule_id="s-t",
            due=due,
            stored=due,
            now=now,
            following=None,
            late_s=0.0,
            catch_up=False,
            status="running",
        )
        assert await schedules.commit_fire(task) == (None, False)
        assert (await schedules.get("s-t")).status == "done"  # type: ignore[union-attr]
        assert [(f.schedule_id, f.status) for f in await schedules.unfinished_fires()] == [
            ("s-t", "running")
        ]
        end = now + timedelta(minutes=1)
        done, created = await schedules.finish_fire(
            "s-t",
            due,
            status="done",
            result="all watered",
            now=end,
            notice=new_notice(f"fire:s-t:{iso(due)}", end, kind="task", schedule_id="s-t"),
        )
        assert created
        [finished] = await schedules.fires("s-t")
        assert (finished.status, finished.result, finished.finished_at) == (
            "done",
            "all watered",
            end,
        )
        assert finished.notice_id == done.id
        assert [f.schedule_id for f in await schedules.unfinished_fires()] == ["s-t"]
        await schedules.fire_noted("s-t", due, end)
        assert await schedules.unfinished_fires() == []
        assert len(await schedules.fires()) == 2


# ----- sleep cycles and their checkpoints -------------------------------------------------------
@pytest.mark.anyio
async def test_sleep_cycles_checkpoint_phases_and_resume(store: Store) -> None:
    async with store.open("sleep_phases", "sleep_cycles") as db:
        cycles = SleepCyclesRepo(db)
        assert await cycles.unfinished() is None and await cycles.last_finished() is None
        first = await cycles.begin(cycle_id="c1", reason="nightly", session_id="trunk-1", at=T0)
        assert first.status == "running" and await cycles.get("c1") == first
        assert await cycles.phase_started("c1", "summarise", 1, T0) == 1
        assert await cycles.phase_started("c1", "summarise", 1, T0) == 2  # a retry
        await cycles.phase_error("c1", "summarise", "model away " + "x" * 3000)
        report = {"phase": "summarise", "notes": ["3 sessions"], "tokens": 120}
        await cycles.phase_ended("c1", "summarise", 1, status="done", at=T0, report=report)
        await cycles.phase_ended("c1", "dreams", 2, status="deferred", at=T0, error="no time")
        phases = await cycles.phase_rows("c1")
        assert list(phases) == ["summarise", "dreams"]
        done = phases["summarise"]
        assert (done.status, done.attempts, done.report) == ("done", 2, report)
        assert done.error is not None and len(done.error) == 2000  # kept, cut
        assert phases["dreams"].report is None and phases["dreams"].error == "no time"
        assert (await cycles.unfinished()) == first

        await cycles.mark_resumed("c1")
        end = T0 + timedelta(hours=1)
        await cycles.finish(
            "c1",
            at=end,
            status="done",
            new_session_id="trunk-2",
            woke_early=True,
            deferred=["dreams"],
        )
        # A later finish without a new session keeps the one recorded.
        await cycles.finish(
            "c1", at=end, status="done", new_session_id=None, woke_early=True, deferred=["dreams"]
        )
        got = await cycles.get("c1")
        assert got is not None
        assert (got.finished_at, got.new_session_id, got.woke_early, got.deferred, got.resumed) == (
            end,
            "trunk-2",
            True,
            ["dreams"],
            1,
        )
        assert await cycles.unfinished() is None and await cycles.last_finished() == got

        second_start = T0 + timedelta(days=1)
        await cycles.begin(cycle_id="c2", reason="manual", session_id="trunk-2", at=second_start)
        await cycles.set_new_session("c2", "trunk-3")
        assert [c.id for c in await cycles.cycles(limit=5)] == ["c2", "c1"]
        assert (await cycles.get("c2")).new_session_id == "trunk-3"  # type: ignore[union-attr]
        # When `summarise` last ran to completion in a cycle other than c2; never for `dreams`.
        assert await cycles.completed_since("summarise", before="c2") == end
        assert await cycles.completed_since("summarise", before="c1") is None
        assert await cycles.completed_since("dreams", before="c2") is None


# ----- the web console's queries ----------------------------------------------------------------
async def seed_console_turns(db: Database) -> None:
    """Two turns with reports, and the session's four messages."""
    for n, (turn, tokens) in enumerate([("turn-1", 1200), ("turn-2", 3400)]):
        ts = (T0 - timedelta(hours=2 - n)).isoformat()
        await db.execute(
            "INSERT INTO turn_reports(turn_id, session_id, ts, context_tokens, report) VALUES (?, ?, ?, ?, ?)",
            (turn, "trunk-1", ts, tokens, f'{{"layers": [], "n": {n}}}'),
        )
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, ?, ?, ?)",
        ("trunk-1", "trunk", "trunk-1.jsonl", T0.isoformat()),
    )
    for seq, (msg_id, role, turn, text) in enumerate(
        [
            ("m1", "user", "turn-1", "first question"),
            ("m2", "assistant", "turn-1", "first answer"),
            ("m3", "user", "turn-2", "second question"),
            ("m4", "user", "turn-2", "and a second line"),
        ]
    ):
        await db.execute(
            "INSERT INTO messages(session_id, seq, msg_id, turn_id, role, content, ts) VALUES (?, ?, ?, ?, ?, ?, ?)",
            ("trunk-1", seq, msg_id, turn, role, text, T0.isoformat()),
        )


async def seed_console(db: Database) -> None:
    """Two cycles (one still running), turns with reports and messages, forks, firings, memories."""
    cycles = SleepCyclesRepo(db)
    await cycles.begin(
        cycle_id="c-old", reason="nightly", session_id="trunk-1", at=T0 - timedelta(days=3)
    )
    await cycles.finish(
        "c-old",
        at=T0 - timedelta(days=3) + timedelta(hours=2),
        status="done",
        new_session_id=None,
        woke_early=False,
        deferred=[],
    )
    await cycles.begin(cycle_id="c-now", reason="manual", session_id="trunk-1", at=T0)
    await cycles.phase_ended("c-now", "wind_down", 1, status="done", at=T0 + timedelta(minutes=5))
    await seed_console_turns(db)
    for fork_id, turn, depth, began, ended in [
        ("f-1", "turn-1", 1, T0 - timedelta(hours=2), T0 - timedelta(hours=1)),
        ("f-2", "turn-1", 1, T0 - timedelta(days=2), None),
        ("f-3", "turn-2", 1, T0 - timedelta(minutes=30), T0 - timedelta(minutes=20)),
        ("f-4", "turn-2", 2, T0 - timedelta(minutes=25), T0 - timedelta(minutes=21)),
        ("f-5", "turn-0", 1, T0 - timedelta(days=4), T0 - timedelta(days=4)),
    ]:
        await db.execute(
            "INSERT INTO forks(id, parent_session_id, parent_turn_id, root_session_id, depth, task,"
            " status, transcript_path, started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                fork_id,
                "trunk-1",
                turn,
                "trunk-1",
                depth,
                "look",
                "complete",
                f"{fork_id}.jsonl",
                began.isoformat(),
                ended.isoformat() if ended else None,
            ),
        )
    for uid, kind, day, retired in [
        ("summary:a", "summary", "2026-02-27", None),
        ("summary:b", "summary", "2026-03-01", None),
        ("summary:c", "summary", "2026-03-01", "2026-03-02"),
        ("fact:1", "fact", "2026-03-01", None),
    ]:
        await db.execute(
            "INSERT INTO memories(uid, kind, text, title, origin, created_at, retired_at, source,"
            " content_hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                uid,
                kind,
                f"text of {uid}",
                f"title {uid}",
                "system",
                f"{day}T10:00:00+00:00",
                retired,
                "s.md",
                f"hash-{uid}",
            ),
        )
    schedules = SchedulesRepo(db)
    await schedules.add(schedule_row("s-1", T0))
    for due in (T0 - timedelta(days=2), T0 - timedelta(hours=1)):
        await schedules.commit_fire(
            Firing(
                schedule_id="s-1",
                due=due,
                stored=T0,
                now=due,
                following=T0,
                late_s=0.0,
                catch_up=False,
                status="delivered",
            )
        )


@pytest.mark.anyio
async def test_console_queries_read_the_timeline_and_the_pages(store: Store) -> None:
    tables = (
        "schedule_fires",
        "schedules",
        "notices",
        "memories",
        "forks",
        "messages",
        "sessions",
        "turn_reports",
        "sleep_phases",
        "sleep_cycles",
    )
    async with store.open(*tables) as db:
        await seed_console(db)
        q = ConsoleQueries(db)
        since = (T0 - timedelta(days=1)).isoformat()

        spans = await q.sleep_spans(wind_down="wind_down", since=since)
        assert [(s.started_at, s.finished_at, s.wind_down_end) for s in spans] == [
            (T0.isoformat(), None, (T0 + timedelta(minutes=5)).isoformat())
        ]
        assert (
            len(
                await q.sleep_spans(
                    wind_down="wind_down", since=(T0 - timedelta(days=4)).isoformat()
                )
            )
            == 2
        )
        assert [(t.turn_id, t.context_tokens) for t in await q.turns_since(since)] == [
            ("turn-1", 1200),
            ("turn-2", 3400),
        ]
        # Started since, still running (f-2, begun before), or ended since; f-5 is long over.
        assert [f.id for f in await q.forks_reaching(since)] == ["f-2", "f-1", "f-3", "f-4"]
        running = [f for f in await q.forks_reaching(since) if f.ended_at is None]
        assert [(f.id, f.parent_turn_id) for f in running] == [("f-2", "turn-1")]
        assert [(c.id, c.reason, c.finished_at) for c in await q.cycles_since(since)] == [
            ("c-now", "manual", None)
        ]
        assert [(f.schedule_id, f.due_at, f.status) for f in await q.fires_since(since)] == [
            ("s-1", iso(T0 - timedelta(hours=1)), "delivered")
        ]

        assert await q.prompts(["turn-2", "turn-1", "turn-9"]) == {
            "turn-1": "first question",
            "turn-2": "second question",
        }
        assert await q.prompts([]) == {}
        recent = await q.recent_turn_reports(1)
        assert [(r.turn_id, r.session_id, r.context_tokens) for r in recent] == [
            ("turn-2", "trunk-1", 3400)
        ]
        one = await q.turn_report("turn-1")
        assert one is not None and one.report == '{"layers": [], "n": 0}'
        assert await q.turn_report("turn-9") is None
        assert await q.reply_before("trunk-1", "turn-2") == "first answer"
        assert await q.reply_before("trunk-1", "turn-1") == ""

        assert [(d.day, d.kind, d.count) for d in await q.memories_per_day()] == [
            ("2026-02-27", "summary", 1),
            ("2026-03-01", "fact", 1),
            ("2026-03-01", "summary", 2),
        ]
        old_start = T0 - timedelta(days=3)
        assert await q.finished_cycles_since((T0 - timedelta(days=5)).isoformat()) == [
            (old_start.isoformat(), (old_start + timedelta(hours=2)).isoformat())
        ]
        assert await q.memory_kinds() == {"fact": 1, "summary": 3}
        newest = await q.newest_memories("summary", 5)
        assert [(m.uid, m.title, m.source) for m in newest] == [
            ("summary:b", "title summary:b", "s.md"),
            ("summary:a", "title summary:a", "s.md"),
        ]
        assert await q.turns_with_forks(2) == [("turn-2", 1), ("turn-1", 2)]


# ----- the journal's cursors --------------------------------------------------------------------
@pytest.mark.anyio
async def test_journal_cursors_only_move_forward(store: Store) -> None:
    async with store.open("journal_cursors", "sessions") as db:
        for sid, kind, began, ended in [
            ("trunk-old", "trunk", T0 - timedelta(days=9), T0 - timedelta(days=8)),
            ("trunk-a", "trunk", T0 - timedelta(days=1), T0 - timedelta(hours=1)),
            ("trunk-b", "trunk", T0, None),
            ("fork-1", "fork", T0, None),
        ]:
            await db.execute(
                "INSERT INTO sessions(id, kind, transcript_path, started_at, ended_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (
                    sid,
                    kind,
                    f"{sid}.jsonl",
                    began.isoformat(),
                    ended.isoformat() if ended else None,
                ),
            )
        cursors = JournalCursorsRepo(db)
        recent = await cursors.trunk_sessions(ended_since=T0 - timedelta(days=2))
        assert [(c.session_id, c.transcript_path, c.offset) for c in recent] == [
            ("trunk-a", "trunk-a.jsonl", 0),
            ("trunk-b", "trunk-b.jsonl", 0),
        ]
        assert await cursors.trunk_session("fork-1") is None
        assert await cursors.offset("trunk-a") is None

        await cursors.advance("trunk-a", 500, entry_id="j-1", at=T0)
        await cursors.advance("trunk-a", 200, entry_id=None, at=T0)  # behind: stays at 500
        assert await cursors.offset("trunk-a") == 500
        await cursors.advance("trunk-a", 900, entry_id=None, at=T0)
        got = await cursors.trunk_session("trunk-a")
        assert got is not None and got.offset == 900
        row = await db.fetchone(
            "SELECT entry_id FROM journal_cursors WHERE session_id = ?", ("trunk-a",)
        )
        assert row[0] == "j-1"  # a move naming no entry keeps the last one's


# ----- the daemon's jobs' state -----------------------------------------------------------------
@pytest.mark.anyio
async def test_job_state_is_saved_replaced_and_listed_by_name(store: Store) -> None:
    async with store.open("schedule_state") as db:
        jobs = JobStateRepo(db)
        assert await jobs.all() == []
        first = JobState(
            job="nightly_sleep",
            last_run=None,
            last_status=None,
            last_result=None,
            next_run=T0.isoformat(),
            runs=0,
        )
        await jobs.save(first, at=T0.isoformat())
        ran = JobState(
            job="nightly_sleep",
            last_run=T0.isoformat(),
            last_status="ok",
            last_result="slept",
            next_run=(T0 + timedelta(days=1)).isoformat(),
            runs=1,
        )
        await jobs.save(ran, at=T0.isoformat())
        beat = JobState(
            job="heartbeat",
            last_run=None,
            last_status="skipped",
            last_result=None,
            next_run=None,
            runs=0,
        )
        await jobs.save(beat, at=T0.isoformat())
        assert await jobs.all() == [beat, ran]


# ----- what the greeting reads: today's schedules, a time-down notice, a session ----------------
@pytest.mark.anyio
async def test_greeting_reads_schedules_notices_and_a_session(store: Store) -> None:
    async with store.open("schedules", "notices", "messages", "sessions") as db:
        schedules = SchedulesRepo(db)
        assert await schedules.exists()
        await schedules.add(schedule_row("s-past", T0 - timedelta(hours=1)))
        await schedules.add(schedule_row("s-late", T0 + timedelta(hours=5)))
        await schedules.add(schedule_row("s-soon", T0 + timedelta(hours=1)))
        await schedules.add(schedule_row("s-off", T0 + timedelta(hours=2), "cancelled"))
        assert [r.id for r in await schedules.active_from(T0, limit=5)] == ["s-soon", "s-late"]
        assert [r.id for r in await schedules.active_from(T0, limit=1)] == ["s-soon"]

        notices = NoticesRepo(db)
        await notices.add(new_notice("downtime:run-1", T0, kind="system"))
        await notices.add(new_notice("fire:s-1:x", T0 + timedelta(hours=2)))
        assert await notices.posted_since("downtime:", T0 - timedelta(minutes=1))
        assert not await notices.posted_since("downtime:", T0)
        assert not await notices.posted_since("down%", T0 - timedelta(minutes=1))  # no wildcard

        sessions = SessionsRepo(db)
        assert await sessions.summary_path("trunk-1") is None
        assert await sessions.last_message_ts("trunk-1") is None
        await db.execute(
            "INSERT INTO sessions(id, kind, transcript_path, started_at, summary_path)"
            " VALUES (?, ?, ?, ?, ?)",
            ("trunk-1", "trunk", "trunk-1.jsonl", T0.isoformat(), "memory/sessions/s.md"),
        )
        for seq in range(3):
            await db.execute(
                "INSERT INTO messages(session_id, seq, msg_id, role, content, ts)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    "trunk-1",
                    seq,
                    f"m{seq}",
                    "user",
                    "hi",
                    (T0 + timedelta(minutes=seq)).isoformat(),
                ),
            )
        assert await sessions.summary_path("trunk-1") == "memory/sessions/s.md"
        assert await sessions.last_message_ts("trunk-1") == (T0 + timedelta(minutes=2)).isoformat()


# ----- key-value rows, and what status reads with the daemon stopped ----------------------------
@pytest.mark.anyio
async def test_kv_rows_put_replace_read_and_delete(store: Store) -> None:
    async with store.open("kv") as db:
        kv = KvRepo(db)
        assert await kv.get("trunk_session") is None and await kv.get_json("trunk_session") is None
        await kv.put_json("trunk_session", "trunk-1", at=T0)
        await kv.put_json("trunk_session", "trunk-2", at=T0 + timedelta(hours=1))
        await kv.put("handover.pending", '{"text": "où en étions-nous"}', at=T0)
        assert await kv.get_json("trunk_session") == "trunk-2"
        assert await kv.get_json("handover.pending") == {"text": "où en étions-nous"}
        assert await kv.get_many(["trunk_session", "nope"]) == {"trunk_session": '"trunk-2"'}
        await kv.delete("trunk_session")
        await kv.delete("nope")
        assert await kv.get("trunk_session") is None
        assert await kv.get_many(["handover.pending"]) == {
            "handover.pending": '{"text": "où en étions-nous"}'
        }


@pytest.mark.anyio
async def test_status_reads_the_last_turn_and_a_sessions_messages(store: Store) -> None:
    async with store.open("turn_reports", "messages", "sessions") as db:
        console, sessions = ConsoleQueries(db), SessionsRepo(db)
        assert await console.last_turn_report() is None
        assert await sessions.message_count("trunk-1") == 0
        await seed_console_turns(db)
        last = await console.last_turn_report()
        assert last is not None and (last.turn_id, last.context_tokens) == ("turn-2", 3400)
        assert await sessions.message_count("trunk-1") == 4
        assert await sessions.message_count("trunk-9") == 0
        # The person's message by id, for recall leaving the message it answers out.
        assert await sessions.person_message("trunk-1", "m3") == "second question"
        assert await sessions.person_message("trunk-1", "m2") is None  # the assistant's
        assert await sessions.person_message("trunk-9", "m1") is None
