"""The HNSW index on PostgreSQL: built as this version builds it, replaced when an older build
stands, rebuilt when a build was cut short, built in the memory `[storage]` allows, and never
in the way of a search (exact in numpy until it stands).

Against a real PostgreSQL server with pgvector (tests/postgres_server.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import numpy as np
import pytest

from daemon.clock import FakeClock
from daemon.memory.embedders import HashEmbedder
from daemon.memory.index import MemoryIndex
from daemon.memory.pg_matrix import PgVectorMatrix
from daemon.settings import ConfigError, MemorySettings, Settings, load_settings
from daemon.store.db import Database
from daemon.store.postgres import PgConnection
from daemon.store.vector_index import (
    HNSW_EF_SEARCH,
    HNSW_EF_SEARCH_MAX,
    build_hnsw_index,
    hnsw_ef_search,
    hnsw_index_name,
)
from tests.postgres_server import pg_server, pg_url  # noqa: F401
from tests.test_memory_index import T0, fact

TEXTS = [
    f"{who} {verb} the {thing} on {day}"
    for who in ("Ana", "Ben", "Caro", "Dev", "Eli")
    for verb in ("moved", "painted", "sold", "fixed")
    for thing in ("kiln", "boat", "piano")
    for day in ("Monday", "Friday")
]


def _indexes(url: str, schema: str) -> dict[str, bool]:
    conn = PgConnection.connect(url, schema)
    try:
        rows = conn.raw.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE n.nspname = current_schema() AND t.relname = 'embeddings' "
            "AND c.relname LIKE 'embeddings_hnsw%%'"
        ).fetchall()
        return {str(r[0]): bool(r[1]) for r in rows}
    finally:
        conn.close()


def _raw(url: str, schema: str, sql: str) -> None:
    conn = PgConnection.connect(url, schema)
    try:
        conn.raw.execute(sql)
    finally:
        conn.close()


@pytest.mark.anyio
async def test_an_earlier_build_is_replaced_and_searches_meanwhile_are_exact(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with await Database.open(tmp_path / "reverie.db", url=pg_url, namespace="a") as db:
            index = MemoryIndex(
                db, HashEmbedder(), MemorySettings(), FakeClock(T0), background=False
            )
            async with index:
                await index.upsert([fact(i, t) for i, t in enumerate(TEXTS, 1)])
                await index.flush()
                d = index.embedder.dim
                # What an earlier version built: m 16 under the old name.
                _raw(
                    pg_url,
                    db.schema,
                    f"CREATE INDEX embeddings_hnsw_{d} ON embeddings USING hnsw "
                    f"((vector::vector({d})) vector_ip_ops) WITH (m = 16) WHERE dim = {d}",
                )
                matrix = index.matrix
                assert isinstance(matrix, PgVectorMatrix)
                # Before this version's index stands, a vector search is exact, in numpy.
                query = (await index.query_vectors(["Caro sold the piano on Friday"]))[0]
                mask = matrix.mask(
                    kinds=None, include_retired=True, after=None, before=None, need_vector=True
                )
                exact = [r for r, _ in matrix.top(matrix.similarities(query)[:, 0], mask, 5)]
                got = await anyio.to_thread.run_sync(
                    lambda: matrix.ranked(query.reshape(1, -1), [mask], 5)[0][0]
                )
                assert got == exact and matrix.hnsw_queries == 0

                await anyio.to_thread.run_sync(matrix.prepare_index)
                assert _indexes(pg_url, db.schema) == {hnsw_index_name(d): True}
                hits = await index.search(
                    "Caro sold the piano on Friday", k=3, mode="vector", query_vector=query
                )
                assert matrix.hnsw_queries > 0 and hits[0].text == "Caro sold the piano on Friday"
                # Searched as wide as the daemon means to at this size (the server's default: 40).
                shown = matrix._conn.raw.execute("SHOW hnsw.ef_search").fetchone()[0]
                assert int(shown) == hnsw_ef_search(matrix.vector_count) == HNSW_EF_SEARCH

                # A build cut short (an invalid index) is not asked, and is built again.
                _raw(
                    pg_url,
                    db.schema,
                    "UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
                    f"'{db.schema}.{hnsw_index_name(d)}'::regclass",
                )
                again = PgVectorMatrix(model=matrix.model, dim=d, url=pg_url, schema=db.schema)
                try:
                    assert not again._index_stands()
                    await anyio.to_thread.run_sync(again.prepare_index)
                    assert _indexes(pg_url, db.schema) == {hnsw_index_name(d): True}
                    assert again._index_stands()
                finally:
                    again.close()


def _fill(url: str, schema: str, n: int, *, seed: int) -> None:
    """`n` random unit vectors of 384 dimensions in the schema's embeddings (model 'bench')."""
    vecs = np.random.default_rng(seed).normal(size=(n, 384)).astype("<f4")
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    conn = PgConnection.connect(url, schema)
    try:
        with conn.raw.cursor() as cur:
            cur.executemany(
                "INSERT INTO embeddings(content_hash, model, dim, vector, version) "
                "VALUES (%s, 'bench', 384, %s, 1)",
                [(f"h{i}", v.tobytes()) for i, v in enumerate(vecs)],
            )
    finally:
        conn.close()


def _spilled(url: str, schema: str, build_memory: str) -> bool:
    """Build the index over the schema's vectors with `build_memory`; whether the graph spilled."""
    conn = PgConnection.connect(url, schema)
    notices: list[str] = []
    conn.raw.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
    try:
        conn.raw.execute(f"DROP INDEX IF EXISTS {hnsw_index_name(384)}")
        build_hnsw_index(conn.raw, 384, build_memory)
    finally:
        conn.close()
    return any("no longer fits into maintenance_work_mem" in n for n in notices)


@pytest.mark.anyio
async def test_the_index_is_built_in_the_memory_storage_allows(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with await Database.open(tmp_path / "reverie.db", url=pg_url, namespace="b") as db:
        _fill(pg_url, db.schema, 2000, seed=3)
        # 2,000 vectors of 384 dimensions need ~5 MB of graph: 1 MB spills, 256 MB does not.
        assert await anyio.to_thread.run_sync(_spilled, pg_url, db.schema, "1MB")
        assert not await anyio.to_thread.run_sync(_spilled, pg_url, db.schema, "256MB")


def test_storage_names_the_build_memory(tmp_path: Path) -> None:
    (tmp_path / "reverie.toml").write_text('[storage]\nindex_build_memory = "512MB"\n')
    assert load_settings(tmp_path).storage.index_build_memory == "512MB"
    assert Settings().storage.index_build_memory == "2GB"
    (tmp_path / "reverie.toml").write_text('[storage]\nindex_build_memory = "lots"\n')
    with pytest.raises(ConfigError, match="not a size PostgreSQL reads"):
        load_settings(tmp_path)


def test_the_search_widens_as_the_store_grows() -> None:
    sizes = [1_000, 100_000, 200_000, 300_000, 500_000, 1_000_000, 10_000_000]
    widths = [hnsw_ef_search(n) for n in sizes]
    assert widths[:3] == [HNSW_EF_SEARCH] * 3
    assert widths == sorted(widths) and HNSW_EF_SEARCH < widths[3] < widths[4] < widths[5]
    assert widths[5] == widths[6] == HNSW_EF_SEARCH_MAX  # pgvector takes no more than 1,000


def _index_oid(url: str, schema: str, dim: int) -> int | None:
    conn = PgConnection.connect(url, schema)
    try:
        row = conn.raw.execute(
            "SELECT c.oid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relname = %s AND i.indisvalid",
            (hnsw_index_name(dim),),
        ).fetchone()
        return int(row[0]) if row else None
    finally:
        conn.close()


@pytest.mark.anyio
async def test_a_large_backlog_goes_in_with_the_index_set_aside_and_built_again_after(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    def notes(start: int, n: int) -> list:
        return [fact(i, f"note {i}: the {TEXTS[i % len(TEXTS)]}") for i in range(start, start + n)]

    with anyio.fail_after(120):
        async with await Database.open(tmp_path / "reverie.db", url=pg_url, namespace="c") as db:
            index = MemoryIndex(
                db, HashEmbedder(), MemorySettings(), FakeClock(T0), background=False
            )
            async with index:
                matrix = index.matrix
                assert isinstance(matrix, PgVectorMatrix)
                d = index.embedder.dim
                await index.upsert(notes(1, 30))
                await index.flush()
                await anyio.to_thread.run_sync(matrix.prepare_index)
                first = _index_oid(pg_url, db.schema, d)
                assert first is not None
                # A backlog under the threshold is linked into the standing index.
                await index.upsert(notes(100, 600))
                await index.flush()
                assert _index_oid(pg_url, db.schema, d) == first
                # One over it (and over half what is indexed): set aside, built again after.
                matrix.set_aside_min = 500
                await index.upsert(notes(1000, 700))
                await index.flush()
                rebuilt = _index_oid(pg_url, db.schema, d)
                assert rebuilt is not None and rebuilt != first and matrix.index_ready
                # The tables' statistics were brought up to date for the plans that follow.
                analyzed = await db.fetchall(
                    "SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() "
                    "AND last_analyze IS NOT NULL ORDER BY relname",
                    (),
                )
                assert [r[0] for r in analyzed] == ["embeddings", "memories"]
                asked = matrix.hnsw_queries
                hits = await index.search("note 1500", k=3, mode="vector")
                assert matrix.hnsw_queries > asked and hits
                assert (await index.stats())["pending_vectors"] == 0


class _FailsAfter(HashEmbedder):
    """The hashing embedder, failing from its `calls`-th batch on (an endpoint going down)."""

    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls -= 1
        if self.calls < 0:
            raise ConnectionError("the embedding endpoint went away")
        return await super().embed(texts)


@pytest.mark.anyio
async def test_an_embedder_failing_part_way_leaves_the_index_built_over_what_went_in(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    with anyio.fail_after(120):
        async with await Database.open(tmp_path / "reverie.db", url=pg_url, namespace="e") as db:
            index = MemoryIndex(
                db, _FailsAfter(2), MemorySettings(), FakeClock(T0), background=False
            )
            async with index:
                matrix = index.matrix
                assert isinstance(matrix, PgVectorMatrix)
                await anyio.to_thread.run_sync(matrix.prepare_index)
                first = _index_oid(pg_url, db.schema, index.embedder.dim)
                matrix.set_aside_min = 500
                await index.upsert(
                    [fact(i, f"note {i}: the {TEXTS[i % len(TEXTS)]}") for i in range(1, 1500)]
                )
                with pytest.raises(ConnectionError):
                    await index.flush()
                rebuilt = _index_oid(pg_url, db.schema, index.embedder.dim)
                assert rebuilt is not None and rebuilt != first and matrix.index_ready
                stats = await index.stats()
                assert 0 < stats["with_vector"] < stats["memories"]


@pytest.mark.anyio
async def test_two_builds_of_one_index_at_once_wait_for_each_other(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The daemon's start and a reindex (or two daemons on one namespace) preparing the same
    index: the second waits for the first and finds it standing — it does not take the index
    being built for one cut short and drop it under the builder."""
    async with await Database.open(tmp_path / "reverie.db", url=pg_url, namespace="f") as db:
        _fill(pg_url, db.schema, 6000, seed=5)
        builders = [
            PgVectorMatrix(model="bench", dim=384, url=pg_url, schema=db.schema) for _ in range(2)
        ]
        failures: list[BaseException] = []

        def build(m: PgVectorMatrix) -> None:
            try:
                m.prepare_index()
            except BaseException as exc:
                failures.append(exc)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, build, builders[0])
                await anyio.sleep(0.3)  # the first is building by now
                tg.start_soon(anyio.to_thread.run_sync, build, builders[1])
        assert failures == []
        assert _indexes(pg_url, db.schema) == {hnsw_index_name(384): True}
