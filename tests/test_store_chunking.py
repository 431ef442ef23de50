"""ChunkingRepo (daemon/store/chunking.py): a session's messages and how far they are chunked,
on SQLite and on PostgreSQL."""

# ruff: noqa: F811  (the two-backend fixture is imported, then named by each test)

from __future__ import annotations

import pytest

from daemon.store.chunking import ChunkingRepo, SessionMessage
from daemon.store.db import Database
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

TABLES = ("memory_chunked", "messages", "sessions", "memories")


async def session(db: Database, sid: str, kind: str = "trunk") -> None:
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at, title) VALUES (?, ?, ?, ?, ?)",
        (sid, kind, f"sessions/{sid}.jsonl", "2026-03-01T09:00:00+00:00", f"title {sid}"),
    )


async def message(
    db: Database, sid: str, seq: int, role: str = "user", speaker: str | None = None
) -> None:
    await db.execute(
        "INSERT INTO messages(session_id, seq, msg_id, role, speaker, content, ts)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (sid, seq, f"m{seq}", role, speaker, f"said {seq}", f"2026-03-01T10:00:{seq:02d}+00:00"),
    )


@pytest.mark.anyio
async def test_a_session_and_its_messages_in_order(store: Store) -> None:
    async with store.open(*TABLES) as db:
        repo = ChunkingRepo(db)
        assert await repo.session("s1") is None
        await session(db, "s1", "imported")
        await session(db, "s2")
        for seq in (3, 1, 2):
            await message(db, "s1", seq, speaker="Maya" if seq == 2 else None)
        await message(db, "s2", 1)

        got = await repo.session("s1")
        assert got is not None
        assert (got.id, got.kind, got.transcript_path, got.title) == (
            "s1",
            "imported",
            "sessions/s1.jsonl",
            "title s1",
        )
        assert await repo.seqs("s1") == [1, 2, 3]
        assert await repo.seqs("nobody") == []
        assert await repo.messages_from("s1", 2) == [
            SessionMessage(
                msg_id="m2",
                seq=2,
                ts="2026-03-01T10:00:02+00:00",
                role="user",
                speaker="Maya",
                content="said 2",
            ),
            SessionMessage(
                msg_id="m3",
                seq=3,
                ts="2026-03-01T10:00:03+00:00",
                role="user",
                speaker=None,
                content="said 3",
            ),
        ]


@pytest.mark.anyio
async def test_the_chunked_mark_moves_to_where_it_is_set(store: Store) -> None:
    async with store.open(*TABLES) as db:
        repo = ChunkingRepo(db)
        assert await repo.chunked_upto("s1") is None
        await repo.mark_chunked("s1", 4)
        await repo.mark_chunked("s2", 1)
        assert await repo.chunked_upto("s1") == 4
        # A reindex chunks from the start again: the mark is set, not only raised.
        await repo.mark_chunked("s1", 2)
        assert (await repo.chunked_upto("s1"), await repo.chunked_upto("s2")) == (2, 1)


@pytest.mark.anyio
async def test_existing_counts_the_uids_already_indexed(store: Store) -> None:
    async with store.open(*TABLES) as db:
        repo = ChunkingRepo(db)
        for uid in ("chunk:s1:1", "chunk:s1:2"):
            await db.execute(
                "INSERT INTO memories(uid, kind, text, origin, created_at, content_hash)"
                " VALUES (?, 'chunk', 'x', 'person', '2026-03-01T10:00:00+00:00', ?)",
                (uid, f"h-{uid}"),
            )
        assert await repo.existing(["chunk:s1:1", "chunk:s1:2", "chunk:s1:3"]) == 2
        assert await repo.existing([]) == 0
