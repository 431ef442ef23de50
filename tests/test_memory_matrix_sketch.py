"""The daemon's sign-bit sketch: candidates by Hamming distance, then exact scores.

Through the real index over a real SQLite file. The embedder is a table the test fills
(text -> chosen vector), so the geometry is known: what the sketch must find, and where a
stale sketch would look instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from daemon.clock import FakeClock
from daemon.memory.index import MemoryIndex
from daemon.memory.rows import NewMemory
from daemon.settings import MemorySettings
from daemon.store.db import Database

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DIM = 128
ROWS = 6000  # more than twice the minimum candidate count, so the sketch really pre-selects


class TableEmbedder:
    """Vectors chosen by the test, one per text (unit length)."""

    name = "table-128"
    dim = DIM

    def __init__(self) -> None:
        self.table: dict[str, np.ndarray] = {}

    def put(self, text: str, vec: np.ndarray) -> None:
        self.table[text] = (vec / np.linalg.norm(vec)).astype(np.float32)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def fact(i: int, text: str, kind: str = "fact") -> NewMemory:
    return NewMemory(
        uid=f"{kind}:{i}",
        kind=kind,  # type: ignore[arg-type]
        text=text,
        origin="person",
        created_at=T0 + timedelta(minutes=i),
    )


@asynccontextmanager
async def index_over(
    db_file: Path, embedder: TableEmbedder, *, sketch: bool, background: bool = False
) -> AsyncIterator[MemoryIndex]:
    async with await Database.open(db_file) as db:
        index = MemoryIndex(
            db, embedder, MemorySettings(), FakeClock(T0), background=background, persist=False
        )
        index.matrix.sketch = sketch
        index.matrix.sketch_min_rows = 0
        async with index:
            yield index


@pytest.fixture
def table() -> TableEmbedder:
    rng = np.random.default_rng(11)
    emb = TableEmbedder()
    for i in range(ROWS):
        emb.put(f"memory number {i}", rng.normal(size=DIM))
    return emb


async def seeded(tmp_path: Path, emb: TableEmbedder) -> Path:
    db_file = tmp_path / "reverie.db"
    async with index_over(db_file, emb, sketch=False) as index:
        await index.upsert([fact(i, f"memory number {i}") for i in range(ROWS)])
        await index.flush()
    return db_file


async def vector_hits(index: MemoryIndex, query: str, k: int = 10, **kw: object) -> list[str]:
    return [m.id for m in await index.search(query, k=k, mode="vector", **kw)]  # type: ignore[arg-type]


async def test_sketched_search_finds_what_exact_search_finds(
    tmp_path: Path, table: TableEmbedder
) -> None:
    db_file = await seeded(tmp_path, table)
    rng = np.random.default_rng(3)
    for j, i in enumerate(range(0, ROWS, 300)):
        table.put(f"query {j}", table.table[f"memory number {i}"] + rng.normal(0, 0.05, DIM))
    async with index_over(db_file, table, sketch=False) as exact:
        expected = [await vector_hits(exact, f"query {j}") for j in range(ROWS // 300)]
        assert not exact.matrix.sketching
    async with index_over(db_file, table, sketch=True) as sketched:
        got = [await vector_hits(sketched, f"query {j}") for j in range(ROWS // 300)]
        assert sketched.matrix.sketching and sketched.matrix.sketch_ready
    for j, i in enumerate(range(0, ROWS, 300)):
        # Recency nudges the order, so the row the query was made from is near the top.
        assert f"fact:{i}" in got[j][:3]
        assert got[j][0] == expected[j][0]
        assert len(set(got[j]) & set(expected[j])) >= 9


async def test_a_changed_vector_is_found_by_its_new_bits(
    tmp_path: Path, table: TableEmbedder
) -> None:
    db_file = await seeded(tmp_path, table)
    target = np.random.default_rng(5).normal(size=DIM)
    table.put("the question", target)
    # Row 17 points the other way: every sign bit differs, the farthest a row can be.
    table.put("memory number 17", -target)
    table.put("a new text for row 17", target)
    async with index_over(db_file, table, sketch=True) as index:
        await index.upsert([fact(17, "memory number 17")])
        await index.flush()
        assert "fact:17" not in await vector_hits(index, "the question")
        assert index.matrix.sketch_ready
        await index.upsert([fact(17, "a new text for row 17")])
        await index.flush()
        assert "fact:17" in (await vector_hits(index, "the question"))[:3]


async def test_rows_added_after_the_sketch_is_built_are_searched(
    tmp_path: Path, table: TableEmbedder
) -> None:
    db_file = await seeded(tmp_path, table)
    rng = np.random.default_rng(8)
    target = rng.normal(size=DIM)
    table.put("where is the new one", target)
    old = table.table["memory number 1"]
    async with index_over(db_file, table, sketch=True) as index:
        await vector_hits(index, "memory number 1")  # the sketch exists from here
        extra = [fact(ROWS + i, f"added later {i}") for i in range(4000)]
        # Past the old capacity, so the arrays grow: rows near an old row crowd the candidates,
        # and that old row still has to be one of them (its bits carried over).
        for i in range(4000):
            table.put(f"added later {i}", old + rng.normal(0, 0.06, DIM))
        table.put("added later 3999", target)
        await index.upsert(extra)
        await index.flush()
        assert (await vector_hits(index, "where is the new one"))[0] == f"fact:{ROWS + 3999}"
        assert "fact:1" in (await vector_hits(index, "memory number 1"))[:3]


async def test_filters_hold_in_the_sketched_path(tmp_path: Path, table: TableEmbedder) -> None:
    db_file = await seeded(tmp_path, table)
    target = np.random.default_rng(9).normal(size=DIM)
    table.put("find me", target)
    table.put("a chunk that matches best", target)
    table.put("a fact that matches well", target + np.random.default_rng(1).normal(0, 0.3, DIM))
    async with index_over(db_file, table, sketch=True) as index:
        await index.upsert(
            [
                fact(90_001, "a chunk that matches best", kind="chunk"),
                fact(90_002, "a fact that matches well"),
            ]
        )
        await index.flush()
        assert (await vector_hits(index, "find me"))[0] == "chunk:90001"
        assert (await vector_hits(index, "find me", kinds=["fact"]))[0] == "fact:90002"


async def test_the_daemon_and_a_one_shot_command_return_the_same_hits(
    tmp_path: Path, table: TableEmbedder
) -> None:
    """Both sketch; the daemon's index builds it before its first search, a command's index on
    its first vector query (a lexical search never pays for it)."""
    db_file = await seeded(tmp_path, table)
    rng = np.random.default_rng(4)
    for j in range(12):
        table.put(f"probe {j}", rng.normal(size=DIM))
    async with index_over(db_file, table, sketch=True, background=True) as daemon_index:
        await daemon_index.refresh()
        assert daemon_index.matrix.sketch_ready
        daemon_hits = [await vector_hits(daemon_index, f"probe {j}") for j in range(12)]
    async with index_over(db_file, table, sketch=True) as command_index:
        await command_index.search("memory number 5", k=5, mode="lexical")
        assert command_index.matrix.sketching and not command_index.matrix.sketch_ready
        command_hits = [await vector_hits(command_index, f"probe {j}") for j in range(12)]
        assert command_index.matrix.sketch_ready
    assert command_hits == daemon_hits


async def test_the_sketch_starts_once_the_index_is_large_enough(
    tmp_path: Path, table: TableEmbedder
) -> None:
    """Below `sketch_min_rows` search is exact; the sketch is built when the index grows past it."""
    async with index_over(tmp_path / "reverie.db", table, sketch=True) as index:
        index.matrix.sketch_min_rows = 4000
        await index.upsert([fact(i, f"memory number {i}") for i in range(3000)])
        await index.flush()
        assert not index.matrix.sketching and not index.matrix.sketch_ready
        await index.upsert([fact(i, f"memory number {i}") for i in range(3000, 5000)])
        await index.flush()  # the arrays now hold more room than rows
        assert index.matrix.sketching
        assert "fact:4321" in (await vector_hits(index, "memory number 4321"))[:3]
        assert index.matrix.sketch_ready


async def test_a_hybrid_memory_search_encodes_the_question_alone(tmp_path: Path) -> None:
    """`memory search` (hybrid): one vector pass, the question's; its sub-queries are BM25's."""
    from daemon.commands.ops import search_batch
    from daemon.memory.embedders import HashEmbedder

    class Counting(HashEmbedder):
        def __init__(self) -> None:
            super().__init__(64)
            self.seen: list[str] = []

        async def embed(self, texts: Sequence[str]) -> np.ndarray:
            self.seen.extend(texts)
            return await super().embed(texts)

    emb = Counting()
    async with await Database.open(tmp_path / "reverie.db") as db:
        index = MemoryIndex(
            db, emb, MemorySettings(), FakeClock(T0), background=False, persist=False
        )
        async with index:
            await index.upsert([fact(i, f"the boiler and the garden, note {i}") for i in range(20)])
            await index.flush()
            question = "what did the plumber say about the boiler and when is the garden party"
            emb.seen.clear()
            [hybrid] = await search_batch(index, [question], now=T0, mode="hybrid")
            assert emb.seen == [question] and hybrid
            emb.seen.clear()
            await search_batch(index, [question], now=T0, mode="vector")
            # Every sub-query gets a pass (the question's vector is cached from the first call).
            assert emb.seen and question not in emb.seen
