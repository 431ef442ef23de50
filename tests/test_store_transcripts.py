"""Transcripts recorded into the sessions index (`TranscriptsRepo`), on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from daemon.store.transcripts import TranscriptMessage, TranscriptSession, TranscriptsRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401


def msg(i: int, text: str, **kw: Any) -> TranscriptMessage:
    return TranscriptMessage(
        msg_id=f"m{i}", ts=f"2026-03-02T10:0{i}:00Z", role="user", content=text, **kw
    )


@pytest.mark.anyio
async def test_a_transcript_is_recorded_once_and_numbered_on(store: Store) -> None:  # noqa: F811
    async with store.open("messages", "sessions") as db:
        repo = TranscriptsRepo(db)
        session = TranscriptSession(
            session_id="imp-1",
            kind="imported",
            transcript_path="/h/imported/imp-1.jsonl",
            started_at="2026-03-02T10:01:00Z",
            ended_at="2026-03-02T10:02:00Z",
        )
        first = [msg(1, "hello", speaker="Ana"), msg(2, "hi", turn_id="t1")]
        assert await repo.record(session, first) == 2
        assert await repo.record(session, first) == 0  # again: nothing new
        later = replace(session, started_at="2026-03-01T09:00:00Z", ended_at="2026-03-02T10:05:00Z")
        assert await repo.record(later, [*first, msg(5, "and more")]) == 1
        rows = await db.fetchall(
            "SELECT msg_id, seq, speaker, turn_id, content FROM messages "
            "WHERE session_id = 'imp-1' ORDER BY seq"
        )
        assert [tuple(r) for r in rows] == [
            ("m1", 1, "Ana", None, "hello"),
            ("m2", 2, None, "t1", "hi"),
            ("m5", 3, None, None, "and more"),
        ]
        span = await db.fetchone(
            "SELECT kind, started_at, ended_at FROM sessions WHERE id = 'imp-1'"
        )
        assert tuple(span) == ("imported", "2026-03-01T09:00:00Z", "2026-03-02T10:05:00Z")


@pytest.mark.anyio
async def test_a_live_session_keeps_its_own_end_and_a_bad_message_writes_nothing(
    store: Store,  # noqa: F811
) -> None:
    async with store.open("messages", "sessions") as db:
        repo = TranscriptsRepo(db)
        trunk = TranscriptSession(
            session_id="trunk-1",
            kind="trunk",
            transcript_path="/h/trunk/1.jsonl",
            started_at="2026-03-02T10:01:00Z",
        )
        assert await repo.record(trunk, [msg(1, "hello")]) == 1
        await db.execute(
            "UPDATE sessions SET ended_at = '2026-03-02T11:00:00Z' WHERE id = 'trunk-1'"
        )
        assert await repo.record(trunk, [msg(2, "more")]) == 1
        row = await db.fetchone("SELECT ended_at FROM sessions WHERE id = 'trunk-1'")
        assert row[0] == "2026-03-02T11:00:00Z"

        broken = TranscriptSession(
            session_id="imp-2",
            kind="imported",
            transcript_path="/h/imported/imp-2.jsonl",
            started_at="2026-03-02T10:01:00Z",
            ended_at="2026-03-02T10:01:00Z",
        )
        bad = TranscriptMessage(msg_id="m9", ts="2026", role="user", content=None)  # type: ignore[arg-type]
        with pytest.raises(Exception):  # the backend's own NOT NULL error
            await repo.record(broken, [msg(1, "fine"), bad])
        for table, key in (("sessions", "id"), ("messages", "session_id")):
            left = await db.fetchone(f"SELECT count(*) FROM {table} WHERE {key} = 'imp-2'")
            assert left[0] == 0, table
