"""The greeting after a sleep names what is really open — questions, promises, plans — never a
summary's headings or a tool's line, and names the day they are from (issue 33)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.events import SleepFinished
from daemon.journal.entries import JournalEntry, JournalStore
from daemon.paths import Home
from daemon.schedule.greeting import (
    MorningGreeting,
    compose_greeting,
    day_phrase,
    is_open_matter,
    open_items,
    open_threads,
)
from daemon.schedule.outbox import Outbox
from daemon.store.db import Database
from tests.harness import DaemonProcess, daemon_env, run_cli, unavailable, wait_until

# What the offline wake-up wrote after a session in which the offline model called `remember`:
# the summary's "## Work done" section ended up inside a sentence of "Where things stand".
JUNK_LETTER = """# Wake-up notes

## Where things stand
- The person: remember that Ada lives in Lisbon ## Work done - - called remember
- Reverie: Noted.

## Open threads
- ## Work done
- called remember
- - called remember
- Ask Ada whether her Lisbon flat is free on 12 May.

## Decisions
- Porto in May.
"""


def test_open_matters_are_the_items_under_open_headings_and_nothing_else() -> None:
    assert open_threads(JUNK_LETTER) == ["Ask Ada whether her Lisbon flat is free on 12 May."]
    # No open section: nothing is open (the rest of the letter is not an open matter).
    assert open_threads("## Where things stand\n- A quiet day.\n\n## Decisions\n- Porto.\n") == []
    assert open_threads("") == []
    summary = (
        "# Planning the trip\n\nThe person asked about trains.\n\n"
        "## Work done\n\n- called remember\n- ran `ls` (exit 0)\n\n"
        "## Open questions\n\n- Which train leaves Porto before noon?\n"
        "1. I promised to compare the two hotels\n\n"
        "### Decisions\n- Porto in May\n"
    )
    assert open_items(summary) == [
        "Which train leaves Porto before noon?",
        "I promised to compare the two hotels",
    ]


@pytest.mark.parametrize(
    ("text", "matter"),
    [
        ("called remember", False),
        ("called mcp__notes__add (failed)", False),
        ("read notes/plan.md (×2)", False),
        ("ran `pytest -q` (exit 1)", False),
        ("fetched https://example.org/trains", False),
        ("delegated “compare the hotels” (by a fork)", False),
        ("searched /Porto/ in notes", False),
        ("… and 3 more: 2 read, 1 listed", False),
        ("## Work done", False),
        ("- called remember", False),
        ("Read the lease before Friday", True),
        ("read the lease before Friday", True),
        ("Called Ada about the flat?", True),
        ("Which train leaves before noon?", True),
    ],
)
def test_a_tool_line_or_a_heading_is_never_an_open_matter(text: str, matter: bool) -> None:
    assert is_open_matter(text) is matter


def test_the_day_is_named_from_the_greetings_local_date() -> None:
    today = date(2026, 11, 12)  # a Thursday
    assert day_phrase(today, today) == "earlier today"
    assert day_phrase(date(2026, 11, 11), today) == "yesterday"
    assert day_phrase(date(2026, 11, 9), today) == "Monday"
    assert day_phrase(date(2026, 11, 2), today) == "2 Nov"
    assert day_phrase(date(2025, 12, 30), today) == "30 Dec 2025"
    at = datetime(2026, 11, 12, 15, 10)
    assert compose_greeting(["Book the train"], [], at, date(2026, 11, 12)) == (
        "Good afternoon — I slept and I'm rested.\nStill open from earlier today:\n- Book the train"
    )
    assert compose_greeting(["Book the train"], [], at, None).splitlines()[1] == "Still open:"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("last_message", "said"),
    [
        (datetime(2026, 3, 3, 9, 15, tzinfo=UTC), "earlier today"),
        (datetime(2026, 3, 2, 22, 40, tzinfo=UTC), "yesterday"),
        (datetime(2026, 2, 28, 18, 0, tzinfo=UTC), "Saturday"),
        (datetime(2026, 2, 20, 18, 0, tzinfo=UTC), "20 Feb"),
    ],
)
async def test_the_greeting_gathers_the_letter_the_journal_and_the_summary_and_dates_them(
    tmp_path: Path, last_message: datetime, said: str
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    home.wake_file.write_text(JUNK_LETTER)
    summary = home.summaries_dir / "session-x.md"
    summary.write_text(
        '---\nsession: "s-1"\n---\n\n# Trip\n\nThe person: ## Work done - - called remember\n\n'
        "## Work done\n\n- called remember\n\n## Open\n\n- Send Ada the dates\n"
    )
    zone = UTC
    journal = JournalStore(home.journal_dir, zone)
    for session, questions, trigger in (
        ("s-1", ("Is the flat free?",), "heartbeat"),
        ("s-1", ("Which train leaves before noon?", "called remember"), "heartbeat"),
        ("s-1", ("why did the dreams phase fail?",), "note"),  # the sleep's own note
        ("s-0", ("What about the old plan?",), "heartbeat"),  # another session's
    ):
        journal.append(
            JournalEntry(
                id=f"j-{len(questions)}-{trigger}-{session}",
                ts=last_message,
                session=session,
                summary="talked",
                open_questions=questions,
                trigger=trigger,
            )
        )
    clock = FakeClock(datetime(2026, 3, 3, 14, 5, tzinfo=UTC))  # a Tuesday afternoon
    async with await Database.open(home.db_file) as db, EventBus() as bus:
        await db.write(
            "INSERT INTO sessions(id, kind, transcript_path, started_at, summary_path)"
            " VALUES (?, 'trunk', 't.jsonl', ?, ?)",
            ("s-1", (last_message - timedelta(hours=1)).isoformat(), str(summary)),
        )
        for seq, ts in enumerate((last_message - timedelta(minutes=30), last_message), 1):
            await db.write(
                "INSERT INTO messages(session_id, msg_id, seq, ts, role, content)"
                " VALUES ('s-1', ?, ?, ?, 'user', 'hello')",
                (f"m{seq}", seq, ts.isoformat()),
            )
        outbox = Outbox(db, bus=bus, clock=clock)
        greeting = MorningGreeting(home=home, db=db, outbox=outbox, zone=zone, now=clock.now)
        notice = await greeting.on_sleep_finished(
            SleepFinished(reason="manual", old_session_id="s-1", new_session_id="s-2")
        )
    assert notice is not None
    # Two days or more since the person last wrote: the greeting says how long (issue 37).
    opening = {
        "Saturday": "It's been three days since we last talked — welcome back.",
        "20 Feb": "It's been 11 days since we last talked — welcome back.",
    }.get(said, "Good afternoon —")
    assert notice.text == (
        f"{opening} I slept and I'm rested.\n"
        f"Still open from {said}:\n"
        "- Ask Ada whether her Lisbon flat is free on 12 May.\n"
        "- Which train leaves before noon?\n"
        "- Send Ada the dates"
    )


def _notices(home: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        return [
            tuple(r)
            for r in conn.execute("SELECT kind, text, created_at FROM notices ORDER BY rowid")
        ]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _last_message_ts(home: Path) -> str:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        row: Any = conn.execute(
            "SELECT ts FROM messages WHERE role = 'user' ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        return str(row[0])
    finally:
        conn.close()


def test_after_a_same_day_nap_the_real_daemon_greets_with_open_matters_from_earlier_today(
    tmp_path: Path,
) -> None:
    """The offline model end to end. A nap after a fact was told (its `remember` call is in
    the summary's "Work done", which never reaches the letter): nothing is open.
    A nap after a question was left open: the greeting names it and "earlier today", and
    nothing of the summary's scaffolding."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(
        '[scheduler]\ntimezone = "UTC"\n\n[sleep]\nnightly = false\n'
    )
    env = daemon_env()
    d = DaemonProcess(home=home, env=env).start()

    def nap(said: str, greetings: int) -> str:
        done = run_cli("chat", "--home", str(home), "-m", said, env=env)
        assert done.returncode == 0, done.stderr
        slept = run_cli("sleep", "--home", str(home), "--wait", env=env, timeout=120)
        assert slept.returncode == 0, slept.stderr + d.logs()
        wait_until(lambda: len(_notices(home)) == greetings, 30, "the greeting")
        kind, text, _ = _notices(home)[-1]
        assert kind == "greeting"
        lines = text.splitlines()
        assert not any("#" in ln or "called" in ln or ln.startswith("- -") for ln in lines), text
        return text

    try:
        first = nap("remember that my sister Ada lives in Lisbon", 1)
        letter = (home / "WAKE.md").read_text()
        # The summary's lists stay out of the letter too (the greeting's own filter is tested
        # above on a letter that still holds them).
        assert "Work done" not in letter and "called remember" not in letter, letter
        assert first.splitlines()[1:] == ["Nothing is waiting on us today."], first
        second = nap("Could you check whether the Lisbon flat is free on 12 May?", 2)
    finally:
        assert d.stop() == 0
    posted = _notices(home)[-1][2]
    spoke = datetime.fromisoformat(_last_message_ts(home)).astimezone(UTC).date()
    greeted = datetime.fromisoformat(posted).astimezone(UTC).date()
    day = "earlier today" if spoke == greeted else "yesterday"  # a run across midnight
    assert second.splitlines()[1:] == [
        f"Still open from {day}:",
        "- Could you check whether the Lisbon flat is free on 12 May?",
    ], second


FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def test_a_question_left_open_in_the_evening_is_from_yesterday_after_the_mornings_sleep(
    tmp_path: Path,
) -> None:
    """The real daemon on a faked clock (libfaketime): asked on Monday evening, asleep and
    greeting on Tuesday morning — "yesterday"; the same daemon, the same words, a day apart."""
    if not FAKETIME_LIB.exists():
        unavailable(f"{FAKETIME_LIB} is missing (apt-get install faketime)")
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(
        '[scheduler]\ntimezone = "UTC"\n\n[sleep]\nnightly = false\n'
    )

    def at(when: str) -> dict[str, str]:
        return daemon_env({"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": f"@{when}", "TZ": "UTC"})

    monday = DaemonProcess(home=home, env=at("2026-03-02 21:00:00")).start(timeout=60)
    try:
        asked = run_cli(
            "chat",
            "--home",
            str(home),
            "-m",
            "Which train leaves Porto before noon?",
            env=daemon_env(),
        )
        assert asked.returncode == 0, asked.stderr
    finally:
        assert monday.stop() == 0
    tuesday = DaemonProcess(home=home, env=at("2026-03-03 07:30:00")).start(timeout=60)
    try:
        slept = run_cli("sleep", "--home", str(home), "--wait", env=daemon_env(), timeout=120)
        assert slept.returncode == 0, slept.stderr + tuesday.logs()
        wait_until(lambda: len(_notices(home)) == 1, 30, "the greeting")
    finally:
        assert tuesday.stop() == 0
    kind, text, posted = _notices(home)[0]
    assert kind == "greeting" and posted.startswith("2026-03-03T07:3"), posted
    assert text.splitlines() == [
        "Good morning — I slept and I'm rested.",
        "Still open from yesterday:",
        "- Which train leaves Porto before noon?",
    ], text
