"""One contract over both storage backends: SQLite (embedded) and PostgreSQL with pgvector.

Every test here runs twice, on a fresh SQLite file and on a fresh database of a real
PostgreSQL server (tests/pgserver.py), through the same daemon code: what the daemon stores
and finds must not depend on where it is stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from daemon.clock import FakeClock
from daemon.memory.embedders import Embedder, HashEmbedder
from daemon.memory.index import MemoryIndex
from daemon.memory.rows import NewMemory
from daemon.settings import MemorySettings
from daemon.store.db import Database
from tests.postgres_server import pg_server, pg_url  # noqa: F401

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)

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


def fact(n: int, text: str, *, days: int = 0, **kw: object) -> NewMemory:
    return NewMemory(
        uid=f"fact:{n}",
        kind="fact",
        text=text,
        origin="person",
        created_at=T0 + timedelta(days=days),
        **kw,
    )  # type: ignore[arg-type]


FACTS = [
    fact(1, "My sister Ana lives in Porto and works as an architect", days=1),
    fact(2, "I am allergic to peanuts", days=2, explicit=True),
    fact(3, "The Reverie project deploys with systemd on a small VPS", days=3),
    fact(4, "We adopted a grey cat named Miso last spring", days=4),
]


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
            stats = await index.stats()
            assert stats["memories"] == 4 and stats["with_vector"] == 4
            assert stats["pending_vectors"] == 0 and stats["db_bytes"] > 0
