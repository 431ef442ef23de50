"""One contract over both storage backends: SQLite (embedded) and PostgreSQL with pgvector.

Every test here runs twice, on a fresh SQLite file and on a fresh database of a real
PostgreSQL server (tests/postgres_server.py), through the same daemon code: what the daemon stores
and finds must not depend on where it is stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC
from pathlib import Path

import anyio
import pytest

from daemon.clock import FakeClock
from daemon.memory.embedders import Embedder, HashEmbedder
from daemon.memory.index import MemoryIndex
from daemon.models.base import Usage
from daemon.models.ledger import UsageLedger
from daemon.schedule.store import ScheduleStore
from daemon.settings import MemorySettings, ScheduleSettings, SpendSettings
from daemon.store.db import Database
from daemon.store.vector_index import hnsw_index_name
from tests.memory_support import NOW, memory_system
from tests.postgres_server import pg_server, pg_url  # noqa: F401
from tests.test_memory_index import FACTS, T0, fact

Opener = Callable[..., AbstractAsyncContextManager[Database]]


@pytest.fixture(params=["sqlite", "postgresql"])
def open_db(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Open the backend's store: `async with open_db() as db` (the same store every time)."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None

    @asynccontextmanager
    async def opener(
        *, readonly: bool = False, namespace: str = "contract"
    ) -> AsyncIterator[Database]:
        db = await Database.open(
            tmp_path / "reverie.db", readonly=readonly, url=url, namespace=namespace
        )
        async with db:
            yield db

    return opener


@asynccontextmanager
async def memory(db: Database, embedder: Embedder | None = None) -> AsyncIterator[MemoryIndex]:
    index = MemoryIndex(db, embedder or HashEmbedder(), MemorySettings(), FakeClock(T0))
    async with index:
        yield index


@pytest.mark.anyio
async def test_migrations_reach_the_same_version(open_db: Opener) -> None:
    from daemon.store.migrations import discover

    async with open_db() as db:
        names = {r[0] for r in await db.fetchall("SELECT name FROM _migrations")}
    assert names == {m.name for m in discover()}


@pytest.mark.anyio
async def test_memories_upsert_get_search(open_db: Opener) -> None:
    with anyio.fail_after(30):
        async with open_db() as db, memory(db) as index:
            await index.upsert(FACTS)
            await index.upsert(FACTS)  # idempotent
            await index.flush()
            got = await index.get("fact:1")
            assert got is not None and got.text.startswith("My sister Ana")
            assert await index.get("fact:nope") is None
            hits = await index.search("where does my sister live?", k=2)
            assert hits[0].id == "fact:1" and hits[0].score > 0
            lexical = await index.search("peanut allergy", k=3, mode="lexical")
            assert [h.id for h in lexical][:1] == ["fact:2"]
            vec = await index.search("grey cat Miso", k=1, mode="vector")
            assert vec[0].id == "fact:4"
            if db.is_postgres:
                # The index stands once prepared (the daemon does at start); the vector side
                # then runs on the server's HNSW index, not only on numpy.
                await anyio.to_thread.run_sync(index.matrix.prepare_index)  # type: ignore[attr-defined]
                assert (await index.search("grey cat Miso", k=1, mode="vector"))[0].id == "fact:4"
                assert index.matrix.hnsw_queries > 0  # type: ignore[attr-defined]
                made = await db.fetchone(
                    "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() "
                    "AND indexname = ?",
                    (hnsw_index_name(index.embedder.dim),),
                )
                assert made[0] == 1
            stats = await index.stats()
            assert stats["memories"] == 4 and stats["with_vector"] == 4
            assert stats["pending_vectors"] == 0 and stats["db_bytes"] > 0


@pytest.mark.anyio
async def test_facts_keep_their_history(open_db: Opener, tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with open_db() as db, memory_system(tmp_path / "home", db=db) as memory:
            old = await memory.remember("The team meeting is on Thursdays")
            new = await memory.correct(
                old.id, "The team meeting moved to Wednesdays", origin="person"
            )
            assert new.status == "corrected"
            old_item = await memory.index.get(old.id)
            assert old_item is not None and old_item.meta["superseded_by"] == new.id
            assert [i.id for i in await memory.index.history(new.id)] == [old.id, new.id]
            found = await memory.index.search("team meeting")
            assert [i.id for i in found][:1] == [new.id]
            history = await memory.index.search("team meeting", include_retired=True)
            assert {old.id, new.id} <= {i.id for i in history}


@pytest.mark.anyio
async def test_usage_ledger_sums_a_day(open_db: Opener) -> None:
    async with open_db() as db:
        ledger = UsageLedger(db, SpendSettings(), FakeClock(NOW))
        for n in (100, 250):
            await ledger.record(
                role="trunk",
                provider="anthropic",
                model="claude-haiku-4-5",
                usage=Usage(input_tokens=n, output_tokens=10),
                session_id="s1",
            )
        today = await ledger.today()
        assert today.calls == 2 and today.input_tokens == 350 and today.output_tokens == 20
        assert isinstance(today.input_tokens, int) and today.cost_usd > 0


@pytest.mark.anyio
async def test_schedules_and_their_state(open_db: Opener) -> None:
    async with open_db() as db:
        store = ScheduleStore(db, clock=FakeClock(NOW), zone=UTC, settings=ScheduleSettings())
        first = await store.add("tomorrow at 9:00", "water the plants")
        await store.add("every day at 8:00", "stretch", kind="reminder")
        assert {s.text for s in await store.listing()} == {"water the plants", "stretch"}
        await store.cancel(first.id)
        assert (await store.counts()).get("cancelled") == 1
        assert [s.text for s in await store.listing()] == ["stretch"]
        assert await store.next_due() is not None


@pytest.mark.anyio
async def test_sessions_and_messages_index(open_db: Opener) -> None:
    async with open_db() as db:
        await db.execute(
            "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?,?,?,?)",
            ("s1", "trunk", "sessions/trunk/s1.jsonl", "2026-03-03T10:00:00+00:00"),
        )
        await db.conn.executemany(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, content) VALUES (?,?,?,?,?,?)"
            " ON CONFLICT(session_id, msg_id) DO NOTHING",
            [
                ("s1", f"m{i}", i, f"2026-03-03T10:00:0{i}+00:00", "user", f"line {i}")
                for i in range(5)
            ],
        )
        await db.conn.commit()
        await db.execute(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, content) VALUES (?,?,?,?,?,?)"
            " ON CONFLICT DO NOTHING",
            ("s1", "m0", 0, "2026-03-03T10:00:00+00:00", "user", "a second copy"),
        )
        rows = await db.fetchall(
            "SELECT seq, content FROM messages WHERE session_id = ? ORDER BY seq", ("s1",)
        )
        assert [r["content"] for r in rows] == [f"line {i}" for i in range(5)]
        assert [r[0] for r in rows] == list(range(5))


@pytest.mark.anyio
async def test_a_namespace_never_reads_another_agents_memories(
    open_db: Opener, request: pytest.FixtureRequest
) -> None:
    if request.node.callspec.params["open_db"] != "postgresql":
        pytest.skip("namespaces are PostgreSQL's (a SQLite store is one home's alone)")
    async with open_db(namespace="ada") as db, memory(db) as index:
        await index.upsert([fact(1, "Ada's private note: the spare key is under the blue pot")])
        await index.flush()
    async with open_db(namespace="bob") as db, memory(db) as index:
        await index.upsert([fact(1, "Bob keeps his bicycle in the shed")])
        await index.flush()
        for mode in ("hybrid", "lexical", "vector"):
            hits = await index.search("spare key blue pot", k=5, mode=mode)  # type: ignore[arg-type]
            assert all("spare key" not in h.text for h in hits), mode
        assert (await index.get("fact:1")).text.startswith("Bob")  # type: ignore[union-attr]
    async with open_db(namespace="ada") as db, memory(db) as index:
        hits = await index.search("spare key blue pot", k=5)
        assert hits and hits[0].text.startswith("Ada's private note")


@pytest.mark.anyio
async def test_exclusive_work_is_held_by_one_store_handle_at_a_time(
    open_db: Opener, request: pytest.FixtureRequest
) -> None:
    postgres = request.node.callspec.params["open_db"] == "postgresql"
    async with open_db() as first, open_db() as second:
        async with first.exclusive("maintenance") as held:
            assert held
            async with second.exclusive("maintenance") as also:
                # On SQLite the home's lock already keeps a second daemon out.
                assert also is not postgres
            async with second.exclusive("another job") as other:
                assert other
        async with second.exclusive("maintenance") as after:
            assert after
    if postgres:
        # A holder that dies (its connection closed, unlocked or not) frees the work.
        holder = await Database.open(Path("unused"), url=first.url, namespace="contract")
        async with holder.exclusive("maintenance") as held:
            assert held
            await holder.conn.close()
            async with open_db() as third:
                # The server ends the dead session's backend (and its locks) a moment later.
                with anyio.fail_after(5):
                    while True:
                        async with third.exclusive("maintenance") as freed:
                            if freed:
                                break
                        await anyio.sleep(0.05)
