"""The wake-up reads the newest journal digest: its open threads reach WAKE.md."""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path

import pytest

from daemon.durable import write_atomic
from daemon.journal.digest import digest_path, journal_lines, render_digest
from daemon.journal.entries import JournalEntry, JournalStore
from daemon.paths import Home
from daemon.sleep.wake import WakeUp
from tests.sleep_support import START, rig

pytestmark = pytest.mark.anyio


def write_day(home: Home, entries: list[JournalEntry]) -> None:
    store = JournalStore(home.journal_dir, UTC)
    for entry in entries:
        store.append(entry)
    day = store.day_of(entries[0].ts)
    write_atomic(digest_path(home, day), render_digest(day, store.read_day(day), UTC))


def entries() -> list[JournalEntry]:
    return [
        JournalEntry(
            id="j-1",
            ts=START - timedelta(hours=3),
            session="trunk-a",
            summary="Planned the shed repairs with the person.",
            open_questions=("Should the shed get a zinc roof or felt?",),
        ),
        JournalEntry(
            id="j-2",
            ts=START - timedelta(hours=2),
            session="trunk-a",
            summary="sleep · maintenance: nothing to fold",
            trigger="note",
            source="note",
            tags=("sleep", "maintenance"),
        ),
    ]


def test_journal_lines_give_open_questions_then_entry_summaries_without_sleep_notes(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path)
    home.ensure()
    assert journal_lines(home) == []
    write_day(home, entries())
    lines = journal_lines(home)
    assert lines[0] == "- open: Should the shed get a zinc roof or felt?"
    assert any("Planned the shed repairs" in ln for ln in lines[1:])
    assert not any("maintenance" in ln for ln in lines)


async def test_the_offline_wake_letter_carries_the_journals_open_thread(tmp_path: Path) -> None:
    async with rig(tmp_path, phases=lambda t: [WakeUp(t)]) as r:
        write_day(r.home, entries())
        await r.say("my partner's name is Sam and we are going to Porto in May")
        outcome = await r.cycle.run("manual")
        assert outcome.steps["wake_up"]["status"] == "done"
        wake = r.home.wake_file.read_text()
        assert "Porto" in wake
        assert "## Open questions" in wake and "zinc roof or felt?" in wake
