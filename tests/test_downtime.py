"""What fell while the daemon was down is told once in the first greeting after start, and
the first turn's context says how long since the person last wrote (issue 37)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from daemon.memory.last_word import away_phrase
from daemon.run_log import RunLog
from daemon.schedule.downtime import Downtime, DowntimeAccount, compose_account
from daemon.scheduler import MissedRuns
from tests.harness import DaemonProcess, daemon_env, run_cli, unavailable, wait_until
from tests.test_schedule_keeper import LONDON, Rig, SettlingClock, rig

DAY1 = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)
DAY22 = datetime(2026, 3, 22, 9, 0, tzinfo=UTC)


async def _noop() -> None:
    return None


async def _a_run(r: Rig, until: datetime) -> tuple[DowntimeAccount, RunLog]:
    """One daemon run on the rig until `until`: the run log, the nightly and heartbeat jobs,
    the account (served by the caller; `RunLog.end` is the clean stop)."""
    runs = RunLog(r.db, r.clock, started_at=r.clock.now())
    await runs.begin()
    r.scheduler.add_daily("nightly_sleep", _noop, at="03:30")
    r.scheduler.add_interval("heartbeat", _noop, seconds=1800)
    account = DowntimeAccount(
        db=r.db,
        outbox=r.outbox,
        keeper=r.keeper,
        scheduler=r.scheduler,
        zone=LONDON,
        now=r.clock.now,
        started_at=runs.started_at,
    )
    await r.run_until(until)
    return account, runs


@pytest.mark.anyio
@pytest.mark.parametrize("catch_up", [True, False])
async def test_three_weeks_down_every_missed_reminder_night_and_heartbeat_is_told_once(
    tmp_path: Path, catch_up: bool
) -> None:
    clock = SettlingClock(DAY1)
    db = tmp_path / "db.sqlite"
    async with rig(db, clock, catch_up=catch_up) as r:
        account, runs = await _a_run(r, DAY1 + timedelta(days=1))  # past a night: it slept
        plumber = await r.store.add(
            "2026-03-03T10:00", "call the plumber about the boiler", requested_by="person"
        )
        plants = await r.store.add("every day at 8", "water the plants", requested_by="person")
        assert await account.serve() is None  # the first run: nothing before it
        await runs.end()
    stopped = clock.now()
    clock.set(DAY22)
    async with rig(db, clock, catch_up=catch_up) as r:
        # The person last wrote on day 1: a trunk message in the store.
        await r.db.write(
            "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES ('s1', 'trunk', 't', ?)",
            (DAY1.isoformat(),),
        )
        await r.db.write(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, content)"
            " VALUES ('s1', 'm1', 1, ?, 'user', 'see you')",
            ((DAY1 + timedelta(hours=2)).isoformat(),),
        )
        account, runs = await _a_run(r, DAY22 + timedelta(minutes=1))
        notice = await account.serve()
        again = await account.serve()
        notices = await r.notices()
        await runs.end()
    assert notice is not None and again is not None and again.id == notice.id
    lines = notice.text.splitlines()
    assert lines[0] == "It's been three weeks since we last talked — welcome back."
    assert lines[1] == "I was off for three weeks (from Mon 2 Mar 06:00 to Sun 22 Mar 09:00)."
    assert lines[2] == "While I was off:"
    assert lines[3] == (
        "- reminder “call the plumber about the boiler” (due Tue 3 Mar 10:00):"
        " delivered 18 days 23 h late"
    )
    if catch_up:
        assert lines[4] == (
            "- reminder “water the plants” (due Sun 22 Mar 08:00, every day at 08:00):"
            " 20 occurrences skipped (one catch-up stood for them); delivered 1 h late"
        )
    else:
        assert lines[4] == (
            "- reminder “water the plants” (due Sun 22 Mar 08:00, every day at 08:00):"
            " 21 occurrences skipped ([schedule] catch_up = false)"
        )
    # 3 Mar 03:30 … 22 Mar 03:30; it had run on 2 Mar, so one run now stands for them.
    assert (
        lines[5]
        == "- the nightly sleep: 20 nights missed; caught up once, now, in place of them all"
    )
    # Every half hour from the stop to the start (the last run before the stop anchors them).
    beats = int((DAY22 - stopped) / timedelta(minutes=30))
    counted = int(lines[6].split(": ")[1].split(" ")[0].replace(",", ""))
    assert lines[6].startswith("- heartbeats (every 30 min): ") and beats - 1 <= counted <= beats
    assert lines[6].endswith("nothing happened while I was off, so there was nothing to record")
    assert len(lines) == 7
    # The one-off reached the person once, as its own late notice; the account once.
    said = [n for n in notices if "call the plumber" in n.text]
    assert [(n.kind, round(n.late_s / 86400)) for n in said] == [("reminder", 19), ("greeting", 0)]
    assert plumber.id and plants.id

    # A restart after it: its own time down (two hours) holds heartbeats alone — nothing to
    # tell; nothing is told twice.
    clock.advance(hours=2)
    async with rig(db, clock, catch_up=catch_up) as r:
        account, runs = await _a_run(r, clock.now() + timedelta(minutes=1))
        assert await account.serve() is None
        await runs.end()
        after = await r.notices()
    assert len(after) == len(notices)


def test_the_account_says_why_a_night_was_not_caught_up() -> None:
    down = Downtime(
        run_id="run-1",
        since=datetime(2026, 3, 1, 22, 0, tzinfo=UTC),
        until=datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
        ended="lost",
    )
    never = MissedRuns(
        job="nightly_sleep",
        count=1,
        first=None,
        last=None,
        caught_up=False,
        catch_up=True,
        ran_before=False,
        every=None,
    )
    text = compose_account(
        down,
        firings=[],
        nightly=never,
        heartbeats=None,
        away="",
        local_now=datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
        zone=UTC,
    )
    assert text.splitlines() == [
        "Good morning — I'm back.",
        "I was off for 11 hours (from Sun 1 Mar 22:00 to Mon 2 Mar 09:00).",
        "While I was off:",
        "- the nightly sleep: 1 night missed; not caught up (it was not yet scheduled here)",
    ]


@pytest.mark.parametrize(
    ("gap", "words"),
    [
        (timedelta(minutes=50), "an hour"),
        (timedelta(hours=5), "five hours"),
        (timedelta(days=2, hours=3), "two days"),
        (timedelta(days=20, hours=23), "three weeks"),
        (timedelta(days=33), "five weeks"),
        (timedelta(days=75), "two months"),
    ],
)
def test_a_gap_is_said_in_a_persons_words(gap: timedelta, words: str) -> None:
    assert away_phrase(gap) == words


# -- the real daemon on a faked clock --------------------------------------------------------

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def _notices(home: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT kind, text, key, late_s FROM notices ORDER BY rowid").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()
    return [{"kind": k, "text": t, "key": key, "late_s": late} for k, t, key, late in rows]


def _last_turn_away(home: Path) -> dict[str, Any]:
    """The away layer's row of the newest turn's recorded context report."""
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT report FROM turn_reports ORDER BY ts DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    return next(r for r in json.loads(row[0])["layers"] if r["name"] == "away")


def test_three_weeks_off_the_real_daemon_says_so_in_the_first_turn_and_the_greeting(
    tmp_path: Path,
) -> None:
    """Day 1: the person writes and sets a reminder for day 2; the daemon stops. Day 22: the
    first turn's context says three weeks and what was last said; the first chat opens with a
    greeting that says three weeks and reports the reminder once, 20 days late; a restart
    reports nothing again."""
    if not FAKETIME_LIB.exists():
        unavailable(f"{FAKETIME_LIB} is missing (apt-get install faketime)")
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(
        '[scheduler]\ntimezone = "UTC"\n\n[sleep]\nnightly = false\n'
    )

    def at(when: str) -> dict[str, str]:
        return daemon_env({"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": f"@{when}", "TZ": "UTC"})

    day1 = DaemonProcess(home=home, env=at("2026-11-01 09:00:00")).start(timeout=60)
    try:
        said = run_cli(
            "chat", "--home", str(home), "-m", "The boiler is making that noise again.",
            env=daemon_env(),
        )  # fmt: skip
        assert said.returncode == 0, said.stderr
        added = run_cli(
            "schedule", "add", "--home", str(home), "2026-11-02T10:00", "call the plumber",
            env=daemon_env(),
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
    finally:
        assert day1.stop() == 0

    day22 = DaemonProcess(home=home, env=at("2026-11-22 09:00:00")).start(timeout=60)
    try:
        wait_until(
            lambda: any(n["key"].startswith("downtime:") for n in _notices(home)), 30, "the account"
        )
        context = run_cli(
            "context", "--home", str(home), "--prompt", "hi, I'm back", "--json",
            env=at("2026-11-22 09:01:00"),
        )  # fmt: skip
        assert context.returncode == 0, context.stderr
        report = json.loads(context.stdout)
        away = next(b["text"] for b in report["blocks"] if b["layer"] == "away")
        assert "It has been three weeks since the person last wrote" in away
        assert "The boiler is making that noise again." in away
        first = run_cli("chat", "--home", str(home), "-m", "hi, I'm back", env=daemon_env())
        assert first.returncode == 0, first.stderr
    finally:
        assert day22.stop() == 0
    # The real first turn read it too; a turn minutes later does not.
    turn = _last_turn_away(home)
    assert turn["tokens"] > 0 and turn["why"].startswith("the person last wrote three weeks ago")
    # What the first chat opened with (its notices go to stderr): the account, once.
    shown = first.stderr
    assert "It's been three weeks since we last talked — welcome back." in shown, shown
    assert shown.count("Good morning") == 0
    account = next(n for n in _notices(home) if n["key"].startswith("downtime:"))
    assert (
        "- reminder “call the plumber” (due Mon 2 Nov 10:00): delivered 19 days 23 h late"
        in (account["text"])
    ), account["text"]
    reminder = [n for n in _notices(home) if n["kind"] == "reminder"]
    assert len(reminder) == 1 and round(reminder[0]["late_s"] / 3600) == 479  # 19 d 23 h

    before = _notices(home)
    again = DaemonProcess(home=home, env=at("2026-11-22 09:05:00")).start(timeout=60)
    try:
        later = run_cli("chat", "--home", str(home), "-m", "and again", env=daemon_env())
        assert later.returncode == 0, later.stderr
    finally:
        assert again.stop() == 0
    assert _notices(home) == before
    assert "call the plumber" not in later.stderr
    assert _last_turn_away(home)["tokens"] == 0


@pytest.mark.anyio
async def test_with_the_greeting_off_the_account_is_a_system_notice_without_the_opening(
    tmp_path: Path,
) -> None:
    clock = SettlingClock(DAY1)
    db = tmp_path / "db.sqlite"
    async with rig(db, clock) as r:
        _, runs = await _a_run(r, DAY1 + timedelta(hours=1))
        await r.store.add("2026-03-02T10:00", "call the plumber", requested_by="person")
        await runs.end()
    clock.set(DAY1 + timedelta(days=3))
    async with rig(db, clock) as r:
        account, runs = await _a_run(r, clock.now() + timedelta(minutes=1))
        quiet = DowntimeAccount(
            db=r.db,
            outbox=r.outbox,
            keeper=r.keeper,
            scheduler=r.scheduler,
            zone=LONDON,
            now=r.clock.now,
            started_at=account.started_at,
            greeting=False,
        )
        notice = await quiet.serve()
        await runs.end()
    assert notice is not None and notice.kind == "system"
    assert notice.text.splitlines()[:3] == [
        "I was off for three days (from Sun 1 Mar 07:00 to Wed 4 Mar 06:00).",
        "While I was off:",
        "- reminder “call the plumber” (due Mon 2 Mar 10:00): delivered 44 h late",
    ]


@pytest.mark.anyio
async def test_only_the_message_being_answered_is_passed_over(tmp_path: Path) -> None:
    """A message 30 s before this one is the last time they wrote (no time-away layer); the
    message being answered itself is not; and an answer to nothing passes nothing over."""
    from daemon.memory.last_word import last_person_word
    from daemon.store.db import Database

    now = DAY22
    async with await Database.open(tmp_path / "db.sqlite") as db:
        await db.write(
            "INSERT INTO sessions(id, kind, transcript_path, started_at)"
            " VALUES ('s1', 'trunk', 't', ?)",
            (DAY1.isoformat(),),
        )
        for seq, (ago, text) in enumerate(
            (
                (timedelta(days=21), "see you"),
                (timedelta(seconds=30), "hello"),
                (timedelta(seconds=2), "are you there?"),
            ),
            1,
        ):
            await db.write(
                "INSERT INTO messages(session_id, msg_id, seq, ts, role, content)"
                " VALUES ('s1', ?, ?, ?, 'user', ?)",
                (f"m{seq}", seq, (now - ago).isoformat(), text),
            )
        answered = await last_person_word(db, now, answering="are you there?")
        assert answered is not None and answered.text == "hello"
        plain = await last_person_word(db, now)
        assert plain is not None and plain.text == "are you there?"
        other = await last_person_word(db, now, answering="something else")
        assert other is not None and other.text == "are you there?"


def test_a_task_caught_up_late_says_its_result_follows() -> None:
    from daemon.schedule.downtime import firing_line
    from daemon.schedule.keeper import MissedFiring

    task = MissedFiring(
        schedule_id="s-1",
        kind="task",
        text="check the backup log",
        repeats="every day at 07:00",
        due=datetime(2026, 3, 22, 7, 0, tzinfo=UTC),
        late_s=7200.0,
        fired=True,
        skipped=3,
        reason="one catch-up stood for them",
    )
    assert firing_line(task, UTC) == (
        "task “check the backup log” (due Sun 22 Mar 07:00, every day at 07:00):"
        " 3 occurrences skipped (one catch-up stood for them);"
        " started 2 h late; its result comes as its own notice"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("welcomed", [False, True])
async def test_the_greeting_after_a_long_silence_says_how_long_once(
    tmp_path: Path, welcomed: bool
) -> None:
    """After three weeks the morning greeting opens with the gap — unless the account of the
    time down, posted since the person last wrote, has said it already."""
    from daemon.bus import EventBus
    from daemon.clock import FakeClock
    from daemon.paths import Home
    from daemon.schedule.greeting import MorningGreeting
    from daemon.schedule.outbox import Outbox
    from daemon.store.db import Database

    home = Home(tmp_path / "home")
    home.ensure()
    clock = FakeClock(DAY22 + timedelta(hours=5))  # 14:00
    async with await Database.open(home.db_file) as db, EventBus() as bus:
        await db.write(
            "INSERT INTO sessions(id, kind, transcript_path, started_at)"
            " VALUES ('s1', 'trunk', 't', ?)",
            (DAY1.isoformat(),),
        )
        await db.write(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, content)"
            " VALUES ('s1', 'm1', 1, ?, 'user', 'see you')",
            (DAY1.isoformat(),),
        )
        outbox = Outbox(db, bus=bus, clock=clock)
        if welcomed:
            await outbox.post(kind="greeting", text="It's been three weeks…", key="downtime:run-1")
        clock.advance(minutes=3)
        greeting = MorningGreeting(home=home, db=db, outbox=outbox, zone=UTC, now=clock.now)
        notice = await greeting.greet("s2", slept="s1")
    first = notice.text.splitlines()[0]
    if welcomed:
        assert first == "Good afternoon — I slept and I'm rested."
    else:
        assert first == (
            "It's been three weeks since we last talked — welcome back. I slept and I'm rested."
        )
