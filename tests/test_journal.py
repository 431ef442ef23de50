"""The journal heartbeat: cadence, idleness, the lifecycle triggers, fallbacks, caps, crash safety."""

from __future__ import annotations

import json
from datetime import UTC, date, timedelta
from pathlib import Path

import anyio
import pytest

from daemon.events import (
    CompactionApproaching,
    Heartbeat,
    JournalNote,
    SessionShutdown,
    SleepStarted,
)
from daemon.journal import latest_digest
from daemon.journal.entries import JournalStore
from daemon.models.base import ModelRequest, ModelUnavailable
from daemon.records import parse_records
from daemon.testing import Reply, ScriptedModel
from daemon.tokens import count_tokens
from tests.journal_support import MIDNIGHT, answering, journal_rig, journal_settings

pytestmark = pytest.mark.anyio

STEP = timedelta(minutes=20)


async def test_a_day_of_activity_writes_entries_at_the_heartbeat_cadence(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with journal_rig(tmp_path / "home") as rig:
            worked: list[int] = []
            for step in range(72):  # a day of 20-minute heartbeats
                rig.clock.set(MIDNIGHT + step * STEP)
                # Work from 09:00 to 17:00, in bursts: two slots busy, one quiet.
                if 27 <= step < 51 and step % 3 != 0:
                    extra = " The zeppelin subsystem needs care." if step == 40 else ""
                    await rig.say(
                        f"Step {step}: let us refactor the kiln-{step} module.{extra}",
                        f"Done with kiln-{step}.",
                    )
                    worked.append(step)
                with anyio.fail_after(10):
                    await rig.bus.publish(Heartbeat(at=rig.clock.now()))
            entries = rig.lines()
            # One entry per heartbeat that had something new, at that heartbeat's time, none otherwise.
            assert [e["ts"] for e in entries] == [(MIDNIGHT + s * STEP).isoformat() for s in worked]
            assert len(rig.model.calls) == len(worked)
            assert all(
                e["trigger"] == "heartbeat" and e["source"] == "model" and e["schema"] == 1
                for e in entries
            )
            assert all(
                set(e)
                >= {
                    "ts",
                    "session",
                    "summary",
                    "decisions",
                    "progress",
                    "open_questions",
                    "files_touched",
                    "tags",
                    "token_usage",
                }
                for e in entries
            )
            assert all(
                e["token_usage"]["input"] > 0 and e["token_usage"]["output"] > 0 for e in entries
            )
            # Each entry saw only what happened since the one before it.
            for e, step in zip(entries, worked, strict=True):
                assert f"kiln-{step}" in e["summary"]
                assert e["span"]["messages"] == 2
            # The digest is rebuilt with every entry, newest first.
            day, text = latest_digest(rig.home) or (None, "")
            assert day == date(2026, 3, 2)
            assert text.index(f"kiln-{worked[-1]}") < text.index(f"kiln-{worked[0]}")
            assert f"{len(worked)} entries" in text
            # Entries are indexed: memory search finds them as kind `journal`.
            hits = await rig.index.search("zeppelin", k=5, kinds=["journal"])
            assert [h.kind for h in hits] == ["journal"] and "kiln-40" in hits[0].text
            assert (
                rig.journal.last_tick is not None
                and "nothing new" in rig.journal.last_tick.describe()
            )


async def test_an_idle_day_writes_nothing_and_calls_no_model(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with journal_rig(tmp_path / "home") as rig:
            await rig.say("Plan the garden beds.")
            await rig.journal.tick()
            assert len(rig.lines()) == 1 and len(rig.model.calls) == 1
            await rig.session("trunk-2")  # a session with only its header line is not activity
            before = {p.name: p.stat().st_mtime_ns for p in rig.home.journal_dir.iterdir()}
            for step in range(1, 73):
                rig.clock.set(MIDNIGHT + step * STEP)
                with anyio.fail_after(10):
                    await rig.bus.publish(Heartbeat(at=rig.clock.now()))
            assert len(rig.lines()) == 1
            assert len(rig.model.calls) == 1
            assert {p.name: p.stat().st_mtime_ns for p in rig.home.journal_dir.iterdir()} == before
            assert rig.journal.last_tick is not None and rig.journal.last_tick.written == ()


async def test_threshold_sleep_and_shutdown_triggers_fire_once_each(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with journal_rig(tmp_path / "home") as rig:
            await rig.say("We are deep into the migration plan.")
            with anyio.fail_after(10):
                await rig.bus.publish(
                    CompactionApproaching(
                        session_id="trunk-1",
                        used_tokens=170_000,
                        window_tokens=200_000,
                        fraction=0.85,
                    )
                )
                # Delivered by the bus beside the turn that crossed the mark.
                await rig.bus.drain()
                await rig.bus.publish(
                    CompactionApproaching(
                        session_id="trunk-1",
                        used_tokens=171_000,
                        window_tokens=200_000,
                        fraction=0.86,
                    )
                )
                await rig.bus.drain()
            assert [e["trigger"] for e in rig.lines()] == ["compaction"]

            await rig.say("Before bed: the schema change is half done.")
            with anyio.fail_after(10):
                await rig.bus.publish(SleepStarted(reason="nightly", session_id="trunk-1"))
                await rig.bus.publish(SleepStarted(reason="nightly", session_id="trunk-1"))
            assert [e["trigger"] for e in rig.lines()] == ["compaction", "sleep"]

            await rig.say("One last thing before you stop: rename the table.")
            path = str((await rig.session()).path)
            with anyio.fail_after(10):
                await rig.bus.publish(
                    SessionShutdown(session_id="trunk-1", transcript_path=path, reason="shutdown"),
                    wait=True,
                )
                await rig.bus.publish(
                    SessionShutdown(session_id="trunk-1", transcript_path=path, reason="shutdown"),
                    wait=True,
                )
                await rig.journal.tick()
            entries = rig.lines()
            assert [e["trigger"] for e in entries] == ["compaction", "sleep", "shutdown"]
            assert "rename the table" in entries[-1]["summary"]
            assert len(rig.model.calls) == 3


async def test_a_switch_writes_the_outgoing_session_in_the_background(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with journal_rig(tmp_path / "home") as rig:
            await rig.say("Wrap up the old session.")
            path = str((await rig.session()).path)
            with anyio.fail_after(10):
                await rig.bus.publish(
                    SessionShutdown(
                        session_id="trunk-1", transcript_path=path, reason="switch: fresh start"
                    )
                )
                await rig.bus.drain()
            assert (
                rig.lines()[0]["trigger"] == "shutdown" and rig.lines()[0]["session"] == "trunk-1"
            )


async def test_an_unusable_answer_or_a_model_outage_gives_the_extractive_entry(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        answers = iter(
            [
                "Sure! Here is your journal entry: it went well.",
                '{"summary": 42}',
                '{"decisions": ["x"]}',
            ]
        )
        model = ScriptedModel(lambda request: next(answers))
        async with journal_rig(tmp_path / "home", model=model) as rig:
            for text in (
                "We decided to use Postgres for the ledger.",
                "I fixed config/app.toml today.",
                "Should we ship on Friday?",
            ):
                await rig.say(text, "Okay.")
                await rig.journal.tick()
                rig.clock.advance(minutes=20)
            entries = rig.lines()
            assert [e["source"] for e in entries] == ["extractive"] * 3
            assert "We decided to use Postgres for the ledger." in entries[0]["decisions"]
            assert "config/app.toml" in entries[1]["files_touched"]
            assert "Should we ship on Friday?" in entries[2]["open_questions"]

        def down(request: ModelRequest) -> Reply:
            raise ModelUnavailable("overloaded")

        async with journal_rig(tmp_path / "home2", model=ScriptedModel(down)) as rig:
            await rig.say("Booked the venue for the 14th.", "I stored that.")
            await rig.journal.tick()
            (entry,) = rig.lines()
            assert entry["source"] == "extractive" and "Booked the venue" in entry["summary"]


async def test_at_shutdown_a_slow_model_is_cut_off_by_the_deadline(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        slow = ScriptedModel(lambda request: '{"summary": "too late"}', delay_s=30.0)
        async with journal_rig(
            tmp_path / "home", model=slow, config=journal_settings(shutdown_model_s=0.2)
        ) as rig:
            await rig.say("Stopping for today after fixing the parser.", "Good night.")
            path = str((await rig.session()).path)
            with anyio.fail_after(5):
                await rig.bus.publish(
                    SessionShutdown(session_id="trunk-1", transcript_path=path, reason="shutdown"),
                    wait=True,
                )
            (entry,) = rig.lines()
            assert entry["trigger"] == "shutdown" and entry["source"] == "extractive"
            assert "fixing the parser" in entry["summary"]


async def test_the_daily_cap_and_the_token_budgets_hold(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        long_answer = {
            "summary": " ".join(["The team worked through a long list of items."] * 60),
            "decisions": [
                f"decision number {i} with a fairly long explanation attached to it"
                for i in range(8)
            ],
            "progress": [
                f"progress item {i} that also goes on for quite a while" for i in range(8)
            ],
            "open_questions": [],
            "files_touched": [f"src/module_{i}.py" for i in range(8)],
            "tags": ["work"],
        }
        model = answering(lambda request: long_answer)
        cfg = journal_settings(max_entries_per_day=3, entry_tokens=120, entry_input_tokens=300)
        async with journal_rig(tmp_path / "home", model=model, config=cfg) as rig:
            for i in range(5):
                # A long stretch: far more transcript than the entry's input budget.
                for j in range(20):
                    await rig.say(
                        f"Message {i}-{j}: "
                        + "we keep discussing the build pipeline and its caches " * 3
                    )
                await rig.journal.tick()
                rig.clock.advance(minutes=20)
            entries = rig.lines()
            assert len(entries) == 3  # the cap
            assert len(model.calls) == 3  # no model call once the day is full
            assert (
                rig.journal.last_tick is not None
                and "daily cap" in rig.journal.last_tick.describe()
            )
            for call in model.calls:
                prompt = call.messages[-1].text
                shown = prompt.split("<<<TRANSCRIPT\n", 1)[1].split("\nTRANSCRIPT>>>")[0]
                assert count_tokens(shown) <= 300 + 20
                assert "earlier lines of this stretch are not shown" in shown
                assert "Message 4-19" not in prompt or call is model.calls[-1]
            for e in entries:
                text = "\n".join(
                    [
                        e["summary"],
                        *e["decisions"],
                        *e["progress"],
                        *e["open_questions"],
                        *e["files_touched"],
                        *e["tags"],
                    ]
                )
                assert count_tokens(text) <= 120
            # The next day the cap starts again, and the backlog is picked up within the budget.
            rig.clock.set(MIDNIGHT + timedelta(days=1, hours=9))
            await rig.journal.tick()
            assert len(rig.lines()) == 4 and len(model.calls) == 4


async def test_journal_notes_are_entries_without_a_model_call(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with journal_rig(tmp_path / "home") as rig:
            with anyio.fail_after(10):
                await rig.bus.publish(
                    JournalNote(
                        summary="Sleep maintenance folded 12 day memories into February; token=abc password=hunter22",
                        tags=("sleep", "maintenance"),
                        progress=("12 memories folded",),
                        files_touched=("memory/monthly/2026-02.md",),
                    )
                )
                await rig.bus.drain()
            (entry,) = rig.lines()
            assert (
                entry["trigger"] == "note"
                and entry["source"] == "note"
                and entry["tags"] == ["sleep", "maintenance"]
            )
            assert "hunter22" not in json.dumps(entry)
            assert entry["files_touched"] == ["memory/monthly/2026-02.md"]
            assert rig.model.calls == []
            assert "folded 12 day memories" in (latest_digest(rig.home) or (None, ""))[1]


async def test_a_crash_mid_write_leaves_no_broken_line_and_no_duplicate(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        root = tmp_path / "home"
        async with journal_rig(root) as rig:
            await rig.say("First: the boiler is fixed.")
            await rig.journal.tick()
            day_file = rig.home.journal_dir / "2026-03-02.jsonl"
            # A crash in the middle of the next append: half a line, no newline.
            whole = day_file.read_bytes()
            first = json.loads(whole)["summary"]
            torn = json.dumps(
                {"ts": MIDNIGHT.isoformat(), "summary": "half written entry"}
            ).encode()[:25]
            day_file.write_bytes(whole + torn)
            store = JournalStore(rig.home.journal_dir, UTC)
            assert [e.summary for e in store.read_day(date(2026, 3, 2))] == [first]
            rig.clock.advance(minutes=20)
            await rig.say("Second: the radiator bleeds fine.")
            await rig.journal.tick()
            raw = day_file.read_bytes()
            assert raw.endswith(b"\n")
            # The torn fragment sits alone on its line; every other line is a whole entry.
            lines = raw.decode().splitlines()
            assert lines[1] == torn.decode()
            read = store.read_day(date(2026, 3, 2))
            assert [e.trigger for e in read] == ["heartbeat", "heartbeat"]
            assert "radiator" in read[-1].summary
            calls = len(rig.model.calls)
        # A crash after the append but before the cursor moved: the next start repairs the cursor.
        import sqlite3

        with sqlite3.connect(root / "reverie.db") as conn:
            conn.execute("DELETE FROM journal_cursors")
        async with journal_rig(root, start=MIDNIGHT + timedelta(hours=1)) as rig:
            await rig.journal.tick()
            assert len(JournalStore(rig.home.journal_dir, UTC).read_day(date(2026, 3, 2))) == 2
            assert rig.model.calls == [] and calls == 2


async def test_the_offline_model_writes_an_extractive_entry(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        from daemon.models.offline import OfflineModel

        async with journal_rig(tmp_path / "home", model=OfflineModel()) as rig:
            await rig.say(
                "Let's use SQLite for the cache. I updated daemon/cache.py and tests/test_cache.py. Is the TTL right?",
                "I'll keep the TTL at an hour; the cache layer is implemented.",
            )
            await rig.journal.tick()
            (entry,) = rig.lines()
            assert (
                entry["source"] == "extractive"
            )  # the offline provider never claims to be a model
            assert entry["files_touched"] == ["daemon/cache.py", "tests/test_cache.py"]
            assert any("SQLite" in d for d in entry["decisions"])
            assert "Is the TTL right?" in entry["open_questions"]
            assert any("implemented" in p for p in entry["progress"])
            assert entry["token_usage"] == {"input": 0, "output": 0}


def test_the_transcript_is_read_by_whole_lines_past_a_torn_one(tmp_path: Path) -> None:
    from daemon.journal.activity import read_since

    path = tmp_path / "t.jsonl"
    first = json.dumps({"type": "message", "role": "user", "content": "one"}) + "\n"
    torn = '{"type": "message", "role": "user", "content": "to'  # a crash mid-append
    second = json.dumps({"type": "message", "role": "user", "content": "two"}) + "\n"
    path.write_text(first + torn)
    got = read_since("s", path, 0)
    # The unfinished last line is left for later: only whole lines are consumed.
    assert [r["content"] for r in got.records] == ["one"] and got.end == len(first)
    # The next append started on a fresh line (durable.append_lines); the fragment is skipped.
    path.write_text(first + torn + "\n" + second)
    again = read_since("s", path, got.end)
    assert [r["content"] for r in again.records] == ["two"] and again.end == path.stat().st_size
    assert read_since("s", path, again.end).records == ()


async def test_a_fork_session_ending_writes_no_entry_of_its_own(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        from daemon.agent.session import Session

        async with journal_rig(tmp_path / "home") as rig:
            fork = await Session.open(
                db=rig.db,
                directory=rig.home.forks_dir,
                session_id="fork-1",
                kind="fork",
                now=rig.clock.now(),
                parent_id="trunk-1",
            )
            await fork.record(
                *parse_records(
                    [
                        {
                            "type": "message",
                            "id": "f1",
                            "ts": rig.clock.now().isoformat(),
                            "role": "user",
                            "content": "Research kilns.",
                            "turn_id": "ft1",
                        }
                    ]
                )
            )
            with anyio.fail_after(10):
                await rig.bus.publish(
                    SessionShutdown(
                        session_id="fork-1", transcript_path=str(fork.path), reason="fork complete"
                    )
                )
                await rig.journal.tick()
                await rig.bus.drain()
            assert (
                rig.lines() == [] and rig.model.calls == []
            )  # the fork tree reports with a journal_note
