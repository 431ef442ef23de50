"""Recall's reads (`daemon.store.recall_reads`): the changed facts, the generation, sessions.

Each test runs on a SQLite file and on the real PostgreSQL server (`tests.test_store_repos`'s
fixture): the same calls, the same answers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.store.db import Database
from daemon.store.memories import MemoriesRepo, MemoryWrite, Supersession
from daemon.store.memory_reads import MemoryReads
from daemon.store.recall_reads import RecallReads, SessionMessage, SessionRef
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

TABLES = ("mention_links", "memories", "embeddings", "messages", "sessions")


def mem(uid: str, text: str, **kw: Any) -> MemoryWrite:
    fields: dict[str, Any] = {
        "uid": uid,
        "kind": "fact",
        "text": text,
        "title": "",
        "tags": "",
        "importance": 0.5,
        "origin": "person",
        "created_at": "2026-03-02T09:00:00.000000+00:00",
        "valid_from": None,
        "supersedes": None,
        "session_id": None,
        "message_ids": "[]",
        "source": "",
        "content_hash": f"h-{text}",
        "explicit": True,
        "meta": "{}",
    }
    fields.update(kw)
    return MemoryWrite(**fields)


@pytest.mark.anyio
async def test_the_facts_of_a_correction_chain_and_those_naming_what_they_replaced(
    store: Store,  # noqa: F811
) -> None:
    async with store.open(*TABLES) as db:
        repo, reads = MemoriesRepo(db), RecallReads(db)
        assert await reads.superseded_rowids() == [] and await reads.changed_rowids() == []
        await repo.upsert(
            [
                mem("fact:tea", "My favourite tea is earl grey", meta='{"value": "earl grey"}'),
                mem("fact:dog", "Our dog is called Rex"),
                # A summary whose meta names a replaced value is no fact: never read here.
                mem("summary:s1", "moved the offsite", kind="summary", meta='{"replaced": "x"}'),
                mem("chunk:s1:1", "user: tea talk", kind="chunk"),
            ]
        )
        await repo.upsert(
            [mem("fact:tea2", "My favourite tea is rooibos", supersedes="fact:tea")],
            [Supersession("fact:tea", "fact:tea2", "2026-03-05T00:00:00Z")],
        )
        told = json.dumps({"replaced": "Bergen", "value": "Kotor", "subject": "offsite"})
        await repo.upsert(
            [mem("profile:offsite", "The offsite is in Kotor", kind="profile", meta=told)]
        )

        rows = MemoryReads(db)
        chain = await reads.superseded_rowids()
        # The chain's both ends, in the order they were written.
        got = await rows.rows(chain)
        assert [got[r].uid for r in chain] == ["fact:tea", "fact:tea2"]
        assert got[chain[0]].superseded_by == "fact:tea2"
        assert got[chain[1]].supersedes == "fact:tea"
        changed = await reads.changed_rowids()
        assert changed[:2] == chain
        told_row = (await rows.rows(changed[2:]))[changed[2]]
        assert (
            told_row.uid == "profile:offsite" and json.loads(told_row.meta)["replaced"] == "Bergen"
        )
        assert len(changed) == 3


@pytest.mark.anyio
async def test_the_generation_follows_the_index_writes_and_a_table_is_known(
    store: Store,  # noqa: F811
) -> None:
    async with store.open(*TABLES) as db:
        reads = RecallReads(db)
        assert await reads.has_memories()
        gen = await MemoriesRepo(db).upsert([mem("fact:a", "Ana sails")])
        assert await reads.generation() == gen
        again = await MemoriesRepo(db).upsert([mem("fact:b", "Ben rows")])
        assert again > gen and await reads.generation() == again


@pytest.mark.anyio
async def test_a_bare_sqlite_store_has_no_memories_and_no_generation(tmp_path: Any) -> None:
    db = await Database.open(tmp_path / "bare.db", migrate=False)
    async with db:
        await db.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)")
        reads = RecallReads(db)
        assert not await reads.has_memories()
        assert await reads.generation() == 0


async def _session(db: Database, sid: str, summary: str | None) -> None:
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at, summary_path)"
        " VALUES (?, ?, ?, ?, ?)",
        (sid, "trunk", f"sessions/{sid}.jsonl", "2026-03-01T09:00:00+00:00", summary),
    )


@pytest.mark.anyio
async def test_a_session_is_found_by_id_or_summary_name_and_read_in_order(
    store: Store,  # noqa: F811
) -> None:
    async with store.open(*TABLES) as db:
        reads = RecallReads(db)
        summary = "/home/x/summaries/session-2026-03-01_0900__tea.md"
        await _session(db, "s1", summary)
        await _session(db, "s2", None)
        for seq, role in ((2, "assistant"), (1, "user"), (3, "user")):
            await db.execute(
                "INSERT INTO messages(session_id, seq, msg_id, role, content, ts)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                ("s1", seq, f"m{seq}", role, f"said {seq}", f"2026-03-01T10:00:0{seq}+00:00"),
            )
        found = SessionRef(id="s1", summary_path=summary, started_at="2026-03-01T09:00:00+00:00")
        assert await reads.find_session("s1", "s1") == found
        assert await reads.find_session("x", "session-2026-03-01_0900__tea") == found
        # The summary's name matches whatever its case, on both backends.
        assert await reads.find_session("x", "Session-2026-03-01_0900__TEA") == found
        assert await reads.find_session("session-s2", "session-s2") is not None
        assert await reads.find_session("nope", "nope") is None
        assert await reads.summary_path("s1") == summary
        assert await reads.summary_path("s2") is None and await reads.summary_path("s9") is None
        got = await reads.messages("s1")
        assert [m.seq for m in got] == [1, 2, 3]
        assert got[0] == SessionMessage(
            seq=1, msg_id="m1", ts="2026-03-01T10:00:01+00:00", role="user", content="said 1"
        )
        assert await reads.messages("s2") == []
        assert await reads.message_count("s1") == 3 and await reads.message_count("s2") == 0
