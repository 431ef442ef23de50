"""`SleepReads` (daemon/store/sleep_reads.py): what the night reads from the memory index — the
dream's material and the chunks written since a generation — on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from daemon.store.db import Database
from daemon.store.sleep_reads import SleepReads
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

SINCE = "2026-03-02T00:00:00+00:00"


async def memory(
    db: Database,
    uid: str,
    kind: str,
    created: str,
    *,
    session: str | None = None,
    retired: str | None = None,
    version: int = 0,
) -> None:
    await db.execute(
        "INSERT INTO memories(uid, kind, text, title, origin, created_at, retired_at, session_id,"
        " version, content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (uid, kind, f"text of {uid}", "", "person", created, retired, session, version, uid),
    )


def day(d: int) -> str:
    return f"2026-03-0{d}T10:00:00+00:00"


@pytest.mark.anyio
async def test_dream_material_is_what_is_new_since_the_last_sleep(store: Store) -> None:  # noqa: F811
    async with store.open("memories", "sessions") as db:
        reads = SleepReads(db)
        assert await reads.dream_material(SINCE) == []
        await db.execute(
            "INSERT INTO sessions(id, kind, transcript_path, started_at, summarised_at)"
            " VALUES (?, ?, ?, ?, ?)",
            ("s-resummarised", "trunk", "x.jsonl", day(1), day(3)),
        )
        await memory(db, "fact:new", "fact", day(3))
        await memory(db, "profile:new", "profile", day(4))
        await memory(db, "fact:old", "fact", day(1))
        await memory(db, "fact:retired", "fact", day(3), retired=day(4))
        await memory(db, "summary:new", "summary", day(2), session="s-new")
        await memory(db, "summary:old", "summary", day(1), session="s-old")
        await memory(db, "summary:talked", "summary", day(1), session="s-talked")
        await memory(db, "chunk:s-talked:1", "chunk", day(3), session="s-talked")
        await memory(db, "summary:resummarised", "summary", day(1), session="s-resummarised")
        await memory(db, "chunk:s-open:1", "chunk", day(3), session="s-open")
        await memory(db, "chunk:s-open:1-w", "chunk", day(3), session="s-open")
        await memory(db, "chunk:s-open:0", "chunk", day(1), session="s-open")

        got = await reads.dream_material(SINCE)
        assert [m.uid for m in got] == [
            "profile:new",
            "fact:new",
            "chunk:s-open:1",
            "summary:new",
            "summary:talked",
            "summary:resummarised",
        ]
        assert (got[1].kind, got[1].text, got[1].origin, got[1].created_at, got[1].title) == (
            "fact",
            "text of fact:new",
            "person",
            day(3),
            "",
        )
        # No last sleep: everything live, but the chunks of summarised sessions.
        everything = {m.uid for m in await reads.dream_material(None)}
        assert everything == {
            "profile:new",
            "fact:new",
            "fact:old",
            "summary:new",
            "summary:old",
            "summary:talked",
            "summary:resummarised",
            "chunk:s-open:1",
            "chunk:s-open:0",
        }
        assert len(await reads.dream_material(None, limit=2)) == 2


@pytest.mark.anyio
async def test_chunks_written_since_a_generation(store: Store) -> None:  # noqa: F811
    async with store.open("memories") as db:
        reads = SleepReads(db)
        assert await reads.top_version() == 0
        assert await reads.chunks_since(0) == []
        await memory(db, "chunk:a:1", "chunk", day(1), session="a", version=3)
        await memory(db, "chunk:a:2", "chunk", day(2), session="a", version=5)
        await memory(db, "chunk:b:1", "chunk", day(2), session="b", version=6, retired=day(3))
        await memory(db, "chunk:loose", "chunk", day(2), version=7)
        await memory(db, "fact:x", "fact", day(2), session="a", version=8)
        assert await reads.top_version() == 8
        assert [(c.session_id, c.text) for c in await reads.chunks_since(4)] == [
            ("a", "text of chunk:a:2")
        ]
        assert sorted(c.text for c in await reads.chunks_since(0)) == [
            "text of chunk:a:1",
            "text of chunk:a:2",
        ]
