"""The daemon's run log on a real SQLite store, and the timeline bands drawn from it.

A run is opened at start, seen while it runs and closed by a clean stop; a run left open (the
daemon killed) is closed as lost at its last sign of life by the next start; a home that ran
before the log existed gets one unrecorded span. The bands: off where no run covers the time,
no record where the log cannot know, the run's own states inside each run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from daemon.clock import FakeClock
from daemon.run_log import RunLog
from daemon.store.db import Database
from daemon.web.views.now import Band, run_bands

pytestmark = pytest.mark.anyio

DAY1 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


async def _rows(db: Database) -> list[tuple[str, str, str | None, str | None]]:
    rows = await db.fetchall(
        "SELECT started_at, seen_at, stopped_at, ended FROM daemon_runs ORDER BY started_at"
    )
    return [tuple(r) for r in rows]


async def test_a_clean_stop_a_kill_and_the_next_start(tmp_path: Path) -> None:
    clock = FakeClock(DAY1)
    with anyio.fail_after(30):
        async with await Database.open(tmp_path / "reverie.db") as db:
            # Day 1: started, seen an hour later, stopped cleanly two hours in.
            first = RunLog(db, clock, started_at=clock.now())
            await first.begin()
            clock.advance(hours=1)
            await first.seen()
            clock.advance(hours=1)
            await first.end()
            assert await _rows(db) == [
                (DAY1.isoformat(), (DAY1 + timedelta(hours=2)).isoformat(),
                 (DAY1 + timedelta(hours=2)).isoformat(), "stopped"),
            ]  # fmt: skip
            # Later that day: started, last seen at 18:30, then killed (no end).
            clock.set(DAY1 + timedelta(hours=8))
            killed = RunLog(db, clock, started_at=clock.now())
            await killed.begin()
            clock.advance(minutes=90)
            await killed.seen()
            last_seen = clock.now()
            clock.advance(minutes=20)  # it ran on unseen, then died
            # Day 3: the next start closes the killed run at its last sign of life.
            clock.set(DAY1 + timedelta(days=2))
            third = RunLog(db, clock, started_at=clock.now())
            await third.begin()
            rows = await _rows(db)
            assert rows[1] == (
                (DAY1 + timedelta(hours=8)).isoformat(),
                last_seen.isoformat(),
                last_seen.isoformat(),
                "lost",
            )
            assert rows[2] == (clock.now().isoformat(), clock.now().isoformat(), None, None)
            runs = await third.runs(DAY1 - timedelta(days=1))
            assert [(r.ended, r.until) for r in runs[:2]] == [
                ("stopped", DAY1 + timedelta(hours=2)),
                ("lost", last_seen),
            ]
            assert runs[2].id == third.current and runs[2].ended is None
            # Only the runs reaching into the window are read.
            assert [r.id for r in await third.runs(DAY1 + timedelta(hours=5))] == [
                runs[1].id,
                runs[2].id,
            ]


async def test_serve_records_the_run_while_it_runs_and_its_clean_stop(tmp_path: Path) -> None:
    clock = FakeClock(DAY1)
    with anyio.fail_after(30):
        async with await Database.open(tmp_path / "reverie.db") as db:
            log = RunLog(db, clock, started_at=clock.now(), seen_every_s=0.01)
            async with anyio.create_task_group() as tg:
                await tg.start(log.serve)
                assert await _rows(db) == [(DAY1.isoformat(), DAY1.isoformat(), None, None)]
                later = clock.advance(minutes=5)
                while (await _rows(db))[0][1] != later.isoformat():
                    await anyio.sleep(0.01)  # seen again, on its own
                clock.advance(minutes=1)
                tg.cancel_scope.cancel()
            stop = (DAY1 + timedelta(minutes=6)).isoformat()
            assert await _rows(db) == [(DAY1.isoformat(), stop, stop, "stopped")]


async def test_a_home_older_than_the_run_log_has_an_unrecorded_span(tmp_path: Path) -> None:
    clock = FakeClock(DAY1 + timedelta(days=10))
    with anyio.fail_after(30):
        async with await Database.open(tmp_path / "reverie.db") as db:
            for sid, kind, began in (
                ("trunk-old", "trunk", DAY1),
                ("imported-older", "imported", DAY1 - timedelta(days=300)),
            ):
                await db.execute(
                    "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?,?,?,?)",
                    (sid, kind, f"{sid}.jsonl", began.isoformat()),
                )
            log = RunLog(db, clock, started_at=clock.now())
            await log.begin()
            runs = await log.runs(DAY1 - timedelta(days=400))
            # From the oldest trunk session (an import is not a run) to this start: unknown.
            assert [(r.ended, r.started_at, r.until) for r in runs[:1]] == [
                ("unrecorded", DAY1, clock.now())
            ]
            # A second start does not write it again.
            await log.end()
            again = RunLog(db, clock, started_at=clock.now())
            await again.begin()
            assert sum(r.ended == "unrecorded" for r in await again.runs(DAY1)) == 1


async def test_a_new_home_has_no_unrecorded_span(tmp_path: Path) -> None:
    clock = FakeClock(DAY1)
    async with await Database.open(tmp_path / "reverie.db") as db:
        log = RunLog(db, clock, started_at=clock.now())
        await log.begin()
        assert [r.ended for r in await log.runs(DAY1 - timedelta(days=3))] == [None]


def test_the_bands_are_off_between_runs_and_unknown_before_the_log() -> None:
    start = DAY1 - timedelta(days=1)
    now = DAY1 + timedelta(days=2, hours=12)
    h = timedelta(hours=1)
    runs = [
        Band(state="unknown", start=start - 2 * h, end=start + 6 * h, note="no record"),
        Band(state="running", start=DAY1, end=DAY1 + 2 * h),
        Band(state="running", start=DAY1 + 8 * h, end=DAY1 + 10 * h, note="lost"),
        Band(state="running", start=DAY1 + timedelta(days=2), end=now),
    ]
    # A sleep cycle inside the first run; one the kill interrupted, resumed and finished by
    # the next start (shown in both runs, not in the gap between them).
    sleep = [
        Band(state="asleep", start=DAY1 + h, end=DAY1 + h + timedelta(minutes=30)),
        Band(state="winding-down", start=DAY1 + 9 * h, end=DAY1 + 9 * h + timedelta(minutes=30)),
        Band(
            state="asleep",
            start=DAY1 + 9 * h + timedelta(minutes=30),
            end=DAY1 + timedelta(days=2, hours=1),
        ),
    ]
    live = Band(state="winding-down", start=now - timedelta(minutes=5), end=now)
    bands = run_bands(runs, sleep, start, now, live)
    assert [(b.state, b.start, b.end) for b in bands] == [
        ("unknown", start, start + 6 * h),
        ("off", start + 6 * h, DAY1),
        ("awake", DAY1, DAY1 + h),
        ("asleep", DAY1 + h, DAY1 + h + timedelta(minutes=30)),
        ("awake", DAY1 + h + timedelta(minutes=30), DAY1 + 2 * h),
        ("off", DAY1 + 2 * h, DAY1 + 8 * h),
        ("awake", DAY1 + 8 * h, DAY1 + 9 * h),
        ("winding-down", DAY1 + 9 * h, DAY1 + 9 * h + timedelta(minutes=30)),
        ("asleep", DAY1 + 9 * h + timedelta(minutes=30), DAY1 + 10 * h),
        ("off", DAY1 + 10 * h, DAY1 + timedelta(days=2)),
        ("asleep", DAY1 + timedelta(days=2), DAY1 + timedelta(days=2, hours=1)),
        ("awake", DAY1 + timedelta(days=2, hours=1), now - timedelta(minutes=5)),
        ("winding-down", now - timedelta(minutes=5), now),
    ]
    # How the killed run ended is said on its last band.
    assert bands[8].note == "lost" and not bands[4].note
    # A cycle never finished (its end on record is "now") stays in the run it began in.
    abandoned = [Band(state="winding-down", start=DAY1 + 9 * h, end=now, open=True)]
    bands = run_bands(runs, abandoned, start, now, None)
    assert [(b.state, b.start, b.end) for b in bands[-3:]] == [
        ("winding-down", DAY1 + 9 * h, DAY1 + 10 * h),
        ("off", DAY1 + 10 * h, DAY1 + timedelta(days=2)),
        ("awake", DAY1 + timedelta(days=2), now),
    ]
    # Nothing running at all: the whole window is off.
    assert [(b.state, b.start, b.end) for b in run_bands([], sleep, start, now, None)] == [
        ("off", start, now)
    ]
