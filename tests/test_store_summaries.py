"""Session summaries' marks in the sessions index (`SummariesRepo`), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from daemon.store.summaries import SummariesRepo
from daemon.store.transcripts import TranscriptMessage, TranscriptSession, TranscriptsRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401


def said(i: int, role: str = "user", **kw: str) -> TranscriptMessage:
    return TranscriptMessage(
        msg_id=f"m{i}", ts=f"2026-03-02T10:0{i}:00Z", role=role, content=f"line {i}", **kw
    )


async def _session(db: object, sid: str, kind: str, started: str, n: int) -> None:
    session = TranscriptSession(
        session_id=sid, kind=kind, transcript_path=f"/h/{sid}.jsonl", started_at=started
    )
    roles = ["user", "assistant", "tool"]
    await TranscriptsRepo(db).record(  # type: ignore[arg-type]
        session, [said(i, roles[(i - 1) % 3]) for i in range(1, n + 1)]
    )


@pytest.mark.anyio
async def test_sessions_wait_for_a_summary_until_it_covers_their_messages(
    store: Store,  # noqa: F811
) -> None:
    async with store.open("messages", "sessions") as db:
        repo = SummariesRepo(db)
        await _session(db, "fork-1", "fork", "2026-03-02T08:00:00Z", 2)
        await _session(db, "trunk-1", "trunk", "2026-03-01T08:00:00Z", 3)
        await _session(db, "imp-1", "imported", "2026-02-01T08:00:00Z", 3)  # never summarised
        assert await repo.unsummarised() == ["trunk-1", "fork-1"]  # oldest first
        assert await repo.kinds() == {"fork-1": "fork", "trunk-1": "trunk", "imp-1": "imported"}

        state = await repo.state("trunk-1")
        assert state is not None and (state.kind, state.summary_path, state.summarised_upto) == (
            "trunk",
            None,
            0,
        )
        assert state.started_at == "2026-03-01T08:00:00Z" and await repo.state("nobody") is None

        await repo.summarised(
            "trunk-1", path="/h/s-1.md", at="2026-03-02T12:00:00", upto=3, title="Roofs"
        )
        await repo.summarised(
            "trunk-1", path="/h/s-1.md", at="2026-03-02T13:00:00", upto=3, title="Other"
        )
        assert await repo.unsummarised() == ["fork-1"]
        again = await repo.state("trunk-1")
        assert again is not None and (again.summary_path, again.summarised_upto) == ("/h/s-1.md", 3)
        row = await db.fetchone("SELECT title, summarised_at FROM sessions WHERE id = 'trunk-1'")
        assert tuple(row) == ("Roofs", "2026-03-02T13:00:00")  # the first title stays

        # A message more: waiting again.
        await TranscriptsRepo(db).record(
            TranscriptSession(
                session_id="trunk-1",
                kind="trunk",
                transcript_path="/h/trunk-1.jsonl",
                started_at="2026-03-01T08:00:00Z",
            ),
            [said(9)],
        )
        assert await repo.unsummarised() == ["trunk-1", "fork-1"]


@pytest.mark.anyio
async def test_a_restored_summary_keeps_its_time_and_never_covers_less(
    store: Store,  # noqa: F811
) -> None:
    async with store.open("messages", "sessions") as db:
        repo = SummariesRepo(db)
        await _session(db, "trunk-1", "trunk", "2026-03-01T08:00:00Z", 3)
        await repo.summarised(
            "trunk-1", path="/h/old.md", at="2026-03-02T12:00:00", upto=3, title=None
        )
        await repo.restored("trunk-1", path="/h/new.md", at="2026-03-09T00:00:00", covered=1)
        state = await repo.state("trunk-1")
        assert state is not None and (state.summary_path, state.summarised_upto) == ("/h/new.md", 3)
        row = await db.fetchone("SELECT summarised_at FROM sessions WHERE id = 'trunk-1'")
        assert row[0] == "2026-03-02T12:00:00"
        await _session(db, "trunk-2", "trunk", "2026-03-03T08:00:00Z", 2)
        await repo.restored("trunk-2", path="/h/t2.md", at="2026-03-09T00:00:00", covered=2)
        fresh = await repo.state("trunk-2")
        assert fresh is not None and fresh.summarised_upto == 2
        assert await repo.unsummarised() == []


@pytest.mark.anyio
async def test_the_dialogue_leaves_tool_results_out(store: Store) -> None:  # noqa: F811
    async with store.open("messages", "sessions") as db:
        await _session(db, "trunk-1", "trunk", "2026-03-01T08:00:00Z", 4)
        await TranscriptsRepo(db).record(
            TranscriptSession(
                session_id="trunk-1",
                kind="trunk",
                transcript_path="/h/trunk-1.jsonl",
                started_at="2026-03-01T08:00:00Z",
            ),
            [said(5, speaker="Ana")],
        )
        rows = await SummariesRepo(db).dialogue("trunk-1")
        assert [(r.seq, r.role, r.speaker, r.content) for r in rows] == [
            (1, "user", "", "line 1"),
            (2, "assistant", "", "line 2"),
            (4, "user", "", "line 4"),
            (5, "user", "Ana", "line 5"),
        ]
        assert await SummariesRepo(db).dialogue("nobody") == []
