"""The vector matrix persisted beside the database: reused while it matches, rebuilt when stale.

Real SQLite files and real matrix files; each "process" is a fresh Database + MemoryIndex, as
a CLI run would open them.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from daemon.clock import FakeClock
from daemon.memory.embedders import Embedder, HashEmbedder
from daemon.memory.index import MemoryIndex
from daemon.memory.matrix import MAGIC, StaleMatrix, VectorMatrix, matrix_path
from daemon.memory.rows import NewMemory
from daemon.settings import MemorySettings
from daemon.store.db import Database
from daemon.store.memories import IndexState

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 1, tzinfo=UTC)
WORDS = "garden boiler lisbon violin tortoise kestrel bakery marathon harbour lantern orchard canal".split()


def memory(n: int, text: str | None = None) -> NewMemory:
    text = (
        text
        or f"note {n}: {WORDS[n % len(WORDS)]} and {WORDS[(n * 7 + 3) % len(WORDS)]} number {n}"
    )
    return NewMemory(
        uid=f"fact:{n}", kind="fact", text=text, origin="person", created_at=T0 + timedelta(hours=n)
    )


@asynccontextmanager
async def opened(
    db_file: Path, embedder: Embedder | None = None, **kw: object
) -> AsyncIterator[MemoryIndex]:
    async with await Database.open(db_file) as db:
        index = MemoryIndex(
            db,
            embedder or HashEmbedder(64),
            MemorySettings(),
            FakeClock(T0),
            background=False,
            **kw,
        )  # type: ignore[arg-type]
        async with index:
            yield index


async def ranked(index: MemoryIndex, query: str) -> list[tuple[str, float]]:
    return [(m.id, round(m.score, 9)) for m in await index.search(query, k=8, mode="hybrid")]


async def fresh_ranking(db_file: Path, query: str) -> list[tuple[str, float]]:
    """The ranking a matrix built from the database alone gives (no file involved)."""
    async with opened(db_file, persist=False) as index:
        return await ranked(index, query)


async def seed(db_file: Path, n: int) -> None:
    async with opened(db_file, persist_rows=10**9) as index:
        await index.upsert([memory(i) for i in range(n)])
        await index.flush()


async def test_matrix_is_saved_reused_and_read_incrementally(tmp_path: Path) -> None:
    db_file = tmp_path / "reverie.db"
    await seed(db_file, 300)
    path = matrix_path(db_file, "hash-64", 64)
    assert path.exists()  # written at exit after a build from the database
    raw = path.read_bytes()
    size = int.from_bytes(raw[len(MAGIC) : len(MAGIC) + 8], "little")
    header = json.loads(raw[len(MAGIC) + 8 : len(MAGIC) + 8 + size])
    assert header["rows"] == 300

    async with opened(db_file) as index:
        got = await ranked(index, "lisbon violin")
        assert index.matrix_status.startswith("persisted")
        assert len(index.matrix) == 300 and index.matrix.vector_count == 300
    assert got == await fresh_ranking(db_file, "lisbon violin")

    # Another process writes: the next reader starts from the file and reads only the change.
    async with opened(db_file, persist_rows=10**9) as index:
        await index.upsert([memory(1000, "the kestrel nested in the lantern of the harbour")])
        await index.retire("fact:3", at=T0)
        await index.flush()
    mtime = path.stat().st_mtime_ns
    async with opened(db_file) as index:
        got = await ranked(index, "kestrel lantern harbour")
        assert index.matrix_status.startswith("persisted")
        assert index.matrix.rows_since_save <= 3
        assert got[0][0] == "fact:1000"
        assert "fact:3" not in [uid for uid, _ in await ranked(index, "note 3")]
    assert path.stat().st_mtime_ns == mtime  # a few rows never rewrite the file
    # Nor does a read-only view (what `reverie context` opens), background flag or not.
    async with await Database.open(db_file, readonly=True) as db:
        view = MemoryIndex(db, HashEmbedder(64), MemorySettings(), FakeClock(T0), background=True)
        async with view:
            assert (await ranked(view, "kestrel lantern harbour"))[0][0] == "fact:1000"
            assert view.matrix.rows_since_save > 0
    assert path.stat().st_mtime_ns == mtime
    assert got == await fresh_ranking(db_file, "kestrel lantern harbour")


async def test_stale_matrix_after_reindex_is_detected_and_rebuilt(tmp_path: Path) -> None:
    db_file = tmp_path / "reverie.db"
    await seed(db_file, 120)
    async with opened(db_file, persist=False) as index:
        await index.clear()  # reindex by a process that leaves the file alone: a new epoch
        await index.upsert(
            [memory(i, f"rebuilt memory {i} about the orchard canal") for i in range(40)]
        )
        await index.flush()
    async with opened(db_file) as index:
        got = await ranked(index, "orchard canal")
        assert index.matrix_status.startswith("rebuilt: epoch"), index.matrix_status
        assert len(index.matrix) == 40
    assert got == await fresh_ranking(db_file, "orchard canal")
    async with opened(db_file) as index:  # and the rebuilt one was saved for next time
        await index.refresh()
        assert index.matrix_status.startswith("persisted")


async def test_matrix_of_another_database_is_never_used(tmp_path: Path) -> None:
    db_file = tmp_path / "reverie.db"
    await seed(db_file, 80)
    saved = tmp_path / "old.matrix"
    shutil.copy(matrix_path(db_file, "hash-64", 64), saved)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_file}{suffix}").unlink(missing_ok=True)
    # A new database that reaches a higher generation with different contents.
    async with opened(db_file, persist=False) as index:
        for i in range(90):
            await index.upsert([memory(i, f"replacement {i} about the bakery marathon")])
        await index.flush()
    shutil.copy(saved, matrix_path(db_file, "hash-64", 64))
    async with opened(db_file) as index:
        got = await ranked(index, "bakery marathon")
        assert index.matrix_status == "rebuilt: made for another database"
    assert got == await fresh_ranking(db_file, "bakery marathon")


async def test_tampered_or_disagreeing_matrix_is_rebuilt(tmp_path: Path) -> None:
    db_file = tmp_path / "reverie.db"
    await seed(db_file, 100)
    path = matrix_path(db_file, "hash-64", 64)
    good = path.read_bytes()

    # A row removed behind the index's back (no generation bump): counts disagree.
    with sqlite3.connect(db_file) as conn:
        conn.execute("DELETE FROM memories WHERE uid = 'fact:7'")
    async with opened(db_file) as index:
        got = await ranked(index, "note 7")
        assert index.matrix_status == "rebuilt: it holds 100 rows, the index 99"
        assert "fact:7" not in [uid for uid, _ in got]
    assert got == await fresh_ranking(db_file, "note 7")

    # A torn file.
    path.write_bytes(good[: len(good) // 2])
    async with opened(db_file) as index:
        await index.refresh()
        assert index.matrix_status.startswith("rebuilt: ")
        assert "truncated" in index.matrix_status or "another" in index.matrix_status

    # A file claiming a generation the database never reached.
    matrix = VectorMatrix(model="hash-64", dim=64)
    with pytest.raises(StaleMatrix, match="ahead"):
        matrix.load(path, IndexState(generation=1, epoch="0", index_id=_index_id(db_file)))

    # Another embedding model reads its own file, never this one.
    async with opened(db_file, embedder=HashEmbedder(32)) as index:
        await index.refresh()
        assert index.matrix_status == "rebuilt: no persisted matrix"
        assert index.matrix.dim == 32


def _index_id(db_file: Path) -> str:
    with sqlite3.connect(db_file) as conn:
        return str(conn.execute("SELECT value FROM kv WHERE key = 'memory.index_id'").fetchone()[0])


async def test_the_daemon_rewrites_the_file_behind_its_searches(tmp_path: Path) -> None:
    import anyio

    db_file = tmp_path / "reverie.db"
    path = matrix_path(db_file, "hash-64", 64)
    async with await Database.open(db_file) as db:
        index = MemoryIndex(
            db, HashEmbedder(64), MemorySettings(), FakeClock(T0), background=True, persist_rows=50
        )
        async with index:
            await index.upsert([memory(i) for i in range(60)])
            await index.flush()
            with anyio.fail_after(10):
                while not (path.exists() and index.matrix.rows_since_save < 50):
                    await anyio.sleep(0.01)
            # Saved once 50 rows were in; the embedder may have taken the rest in a later batch.
            before = index.matrix.rows_since_save
            assert before < 50
            await index.upsert([memory(100, "one more about the canal")])
            await index.flush()
            assert before < index.matrix.rows_since_save < 50  # a few rows: not rewritten now...
    matrix = VectorMatrix(model="hash-64", dim=64)
    matrix.load(path, IndexState(generation=999, epoch="0", index_id=_index_id(db_file)))
    assert len(matrix) == 61  # ...but when the daemon stops


class CountingEmbedder(HashEmbedder):
    """A hash embedder that counts the texts it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(64)
        self.texts = 0

    def embed_sync(self, texts):  # type: ignore[no-untyped-def]
        self.texts += len(texts)
        return super().embed_sync(texts)


async def test_a_query_is_embedded_only_when_the_index_holds_vectors(tmp_path: Path) -> None:
    from daemon.commands.ops import search_batch

    db_file = tmp_path / "reverie.db"
    embedder = CountingEmbedder()
    async with await Database.open(db_file) as db:
        index = MemoryIndex(db, embedder, MemorySettings(), FakeClock(T0), background=False)
        async with index:
            await index.upsert([memory(i) for i in range(30)])
            hits = await search_batch(index, ["lisbon violin", "orchard"], now=T0, mode="hybrid")
            assert hits[0] and embedder.texts == 0  # no vector yet: lexical answers, no model
            await index.flush()
            embedded = embedder.texts
            await search_batch(index, ["lisbon violin"], now=T0, mode="lexical")
            assert embedder.texts == embedded  # lexical never embeds
            await search_batch(index, ["lisbon violin"], now=T0, mode="hybrid")
            assert embedder.texts > embedded
