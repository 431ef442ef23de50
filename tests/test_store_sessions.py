"""The session's own writes (`SessionsRepo`), the trunk's kv notes (`KvRepo.write_json`) and the
turn reports (`TurnReportsRepo`): contracts on SQLite and on the real PostgreSQL server, and the
writes the trunk may make while a PostgreSQL server is away queued and landing once it is back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from daemon.paths import Home
from daemon.settings import Settings
from daemon.store.console import ConsoleQueries
from daemon.store.db import Database
from daemon.store.kv import KvRepo
from daemon.store.sessions import IndexedMessage, SessionsRepo
from daemon.store.turn_reports import TurnReport, TurnReportsRepo
from tests.postgres_server import DedicatedServer, dedicated_pg, pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def message(seq: int, msg_id: str, *, session: str = "trunk-1", **kw: object) -> IndexedMessage:
    fields: dict[str, object] = {
        "session_id": session,
        "msg_id": msg_id,
        "seq": seq,
        "ts": (T0 + timedelta(minutes=seq)).isoformat(),
        "role": "user",
        "speaker": "Ana",
        "content": f"message {msg_id}",
        "turn_id": f"turn-{seq}",
    }
    fields.update(kw)
    return IndexedMessage(**fields)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_session_row_is_added_once_and_keeps_its_first_start(store: Store) -> None:  # noqa: F811
    async with store.open("messages", "sessions") as db:
        sessions = SessionsRepo(db)
        await sessions.add(
            "fork-1",
            kind="fork",
            parent_id="trunk-1",
            transcript_path="/h/forks/fork-1.jsonl",
            started_at=T0.isoformat(),
        )
        # Opened again (a restart resumes it): the row stays as it was first written.
        await sessions.add(
            "fork-1",
            kind="trunk",
            parent_id=None,
            transcript_path="/elsewhere.jsonl",
            started_at=(T0 + timedelta(days=1)).isoformat(),
        )
        rows = await db.fetchall(
            "SELECT id, kind, parent_id, transcript_path, started_at, ended_at FROM sessions"
        )
        assert [tuple(r) for r in rows] == [
            ("fork-1", "fork", "trunk-1", "/h/forks/fork-1.jsonl", T0.isoformat(), None)
        ]


@pytest.mark.anyio
async def test_a_session_ends_reopens_and_links_to_the_one_it_continues(store: Store) -> None:  # noqa: F811
    async with store.open("messages", "sessions") as db:
        sessions = SessionsRepo(db)
        for sid in ("trunk-1", "trunk-2"):
            await sessions.add(
                sid, kind="trunk", parent_id=None, transcript_path=f"{sid}.jsonl", started_at="t"
            )

        async def state(sid: str) -> tuple[object, ...]:
            row = await db.fetchone(
                "SELECT ended_at, previous_id, switch_reason FROM sessions WHERE id = ?", (sid,)
            )
            return tuple(row)

        ended = (T0 + timedelta(hours=2)).isoformat()
        assert await sessions.mark_ended("trunk-1", ended) is True
        await sessions.link_previous("trunk-2", previous_id="trunk-1", reason="nightly sleep")
        assert await state("trunk-1") == (ended, None, None)
        assert await state("trunk-2") == (None, "trunk-1", "nightly sleep")
        await sessions.reopen("trunk-1")
        assert await state("trunk-1") == (None, None, None)
        # Neither touches another session, nor makes one up.
        await sessions.reopen("trunk-9")
        assert await sessions.mark_ended("trunk-9", ended) is True
        assert await db.fetchone("SELECT id FROM sessions WHERE id = 'trunk-9'") is None
        assert await state("trunk-2") == (None, "trunk-1", "nightly sleep")


@pytest.mark.anyio
async def test_messages_are_indexed_once_and_read_back_per_session(store: Store) -> None:  # noqa: F811
    async with store.open("messages", "sessions") as db:
        sessions = SessionsRepo(db)
        assert await sessions.last_seq("trunk-1") == 0
        assert await sessions.message_ids("trunk-1") == set()
        assert await sessions.index_message(message(1, "m1")) is True
        assert await sessions.index_message(message(2, "m2", role="assistant", speaker=None))
        assert await sessions.index_message(message(7, "x1", session="trunk-2"))
        # Indexed again after a crash between the transcript and the index: kept as first written.
        assert await sessions.index_message(message(3, "m1", content="changed")) is True

        assert await sessions.last_seq("trunk-1") == 2
        assert await sessions.last_seq("trunk-2") == 7
        assert await sessions.message_ids("trunk-1") == {"m1", "m2"}
        assert await sessions.message_ids("trunk-2") == {"x1"}
        assert await sessions.message_count("trunk-1") == 2
        rows = await db.fetchall(
            "SELECT msg_id, seq, ts, role, speaker, content, turn_id FROM messages"
            " WHERE session_id = 'trunk-1' ORDER BY seq"
        )
        assert [tuple(r) for r in rows] == [
            (
                "m1",
                1,
                (T0 + timedelta(minutes=1)).isoformat(),
                "user",
                "Ana",
                "message m1",
                "turn-1",
            ),
            (
                "m2",
                2,
                (T0 + timedelta(minutes=2)).isoformat(),
                "assistant",
                None,
                "message m2",
                "turn-2",
            ),
        ]
        assert await sessions.person_message("trunk-1", "m1") == "message m1"


@pytest.mark.anyio
async def test_a_kv_note_written_through_the_queueable_path_reads_back(store: Store) -> None:  # noqa: F811
    async with store.open("kv") as db:
        kv = KvRepo(db)
        assert await kv.write_json("trunk_session", "trunk-1", at=T0) is True
        intent = {"from": "trunk-1", "to": "trunk-2", "reason": "réveil", "ts": T0.isoformat()}
        assert await kv.write_json("trunk_switch", intent, at=T0) is True
        assert await kv.write_json("trunk_session", "trunk-2", at=T0 + timedelta(hours=1))
        assert await kv.get_json("trunk_session") == "trunk-2"
        assert await kv.get_json("trunk_switch") == intent
        row = await db.fetchone("SELECT updated_at FROM kv WHERE key = 'trunk_session'")
        assert row[0] == (T0 + timedelta(hours=1)).isoformat()


@pytest.mark.anyio
async def test_a_turn_report_is_stored_and_a_second_one_for_the_turn_replaces_it(
    store: Store,  # noqa: F811
) -> None:
    async with store.open("turn_reports") as db:
        reports, console = TurnReportsRepo(db), ConsoleQueries(db)
        layers = {"total_tokens": 1200, "layers": [{"name": "memory", "tokens": 300}]}
        first = TurnReport(
            turn_id="turn-1",
            session_id="trunk-1",
            ts=T0.isoformat(),
            context_tokens=1200,
            report=layers,
        )
        assert await reports.add(first) is True
        stored = await console.turn_report("turn-1")
        assert stored is not None
        assert (stored.session_id, stored.ts, stored.context_tokens) == (
            "trunk-1",
            T0.isoformat(),
            1200,
        )
        assert json.loads(stored.report) == layers
        again = TurnReport(
            turn_id="turn-1",
            session_id="trunk-1",
            ts=(T0 + timedelta(minutes=1)).isoformat(),
            context_tokens=900,
            report={"total_tokens": 900},
        )
        assert await reports.add(again) is True
        rows = await console.recent_turn_reports(10)
        assert [(r.turn_id, r.context_tokens, json.loads(r.report)) for r in rows] == [
            ("turn-1", 900, {"total_tokens": 900})
        ]


@pytest.mark.anyio
async def test_the_trunks_writes_wait_out_a_server_away_and_land_once_it_is_back(
    tmp_path: Path,
    dedicated_pg: DedicatedServer,  # noqa: F811
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    settings = Settings.model_validate({"storage": {"url": dedicated_pg.url}})
    async with await Database.open_configured(home.db_file, settings) as db:
        caught: list[set[str]] = []

        async def after(sessions: set[str]) -> None:
            caught.append(sessions)

        db.after_outage(after)
        sessions, kv, reports = SessionsRepo(db), KvRepo(db), TurnReportsRepo(db)
        await sessions.add(
            "trunk-1", kind="trunk", parent_id=None, transcript_path="t.jsonl", started_at="t"
        )
        dedicated_pg.stop()
        try:
            # Each is queued in the home (False), the message with the session it indexes.
            assert await sessions.index_message(message(1, "m1")) is False
            assert await kv.write_json("trunk_session", "trunk-1", at=T0) is False
            assert await sessions.mark_ended("trunk-1", T0.isoformat()) is False
            report = TurnReport(
                turn_id="turn-1",
                session_id="trunk-1",
                ts=T0.isoformat(),
                context_tokens=10,
                report={"total_tokens": 10},
            )
            assert await reports.add(report) is False
            away = db.outage()
            assert away is not None and away["queued_writes"] == 4
        finally:
            dedicated_pg.start()
        for _ in range(240):
            if await db.catch_up():
                break
            await anyio.sleep(0.25)
        assert db.outage() is None and caught == [{"trunk-1"}]
        assert await sessions.message_ids("trunk-1") == {"m1"}
        assert await kv.get_json("trunk_session") == "trunk-1"
        row = await db.fetchone("SELECT ended_at FROM sessions WHERE id = 'trunk-1'")
        assert row[0] == T0.isoformat()
        stored = await ConsoleQueries(db).turn_report("turn-1")
        assert stored is not None and json.loads(stored.report) == {"total_tokens": 10}
