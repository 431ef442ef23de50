"""PostgreSQL's vector index: pgvector's HNSW graph over `embeddings`, one per dimension.

Only PostgreSQL has one (on SQLite the numpy matrix is the whole vector search). The index is
partial, over `vector::vector(dim)` where `dim` matches, built `CONCURRENTLY` so writes go on
meanwhile; how it is used — when to ask it, when to score exactly, when to set it aside for a
backlog — is `daemon.memory.pg_matrix`'s. Every call takes a raw psycopg connection (the
matrix's own, beside the database thread's).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

# How the graph is built, and how wide it is searched. On MiniLM-shaped vectors (bench.pg_bench)
# a graph of m 16 kept 0.94 of the exact top 10 at 100k but 0.82 at 300k and 0.59 at 1M; m 32
# with ef_construction 200 keeps 0.94 at 300k for 6 ms a query (p50) at about twice the build
# time, and at 1M 0.80 searched 400 wide (8 ms), 0.87 searched 1,000 wide (22 ms). So the
# search widens as the store grows: 400 up to 200k vectors, then with the size to pgvector's
# most, 1,000, at 1M.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 400
HNSW_EF_SEARCH_MAX = 1000
HNSW_WIDEN_FROM = 200_000
# How often a second build of the same index looks whether the first is done.
HNSW_LOCK_POLL_S = 0.5


def hnsw_ef_search(vectors: int) -> int:
    """How wide the index is searched (`hnsw.ef_search`) over `vectors` rows, in steps of 50."""
    if vectors <= HNSW_WIDEN_FROM:
        return HNSW_EF_SEARCH
    # 400 × (n / 200k)^0.57: 1,000 at 1M.
    ef = HNSW_EF_SEARCH * (vectors / HNSW_WIDEN_FROM) ** 0.57
    return int(min(HNSW_EF_SEARCH_MAX, round(ef / 50) * 50))


def hnsw_index_name(dim: int) -> str:
    """The name of the index of one dimension, built as this version builds it."""
    return f"embeddings_hnsw_{int(dim)}_m{HNSW_M}_ef{HNSW_EF_CONSTRUCTION}"


def hnsw_index_sql(dim: int, *, table: str = "embeddings", name: str | None = None) -> str:
    """`CREATE INDEX CONCURRENTLY` of the HNSW index over `table`'s vectors of one dimension."""
    d = int(dim)
    return (
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name or hnsw_index_name(d)} ON {table} "
        f"USING hnsw ((vector::vector({d})) vector_ip_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE dim = {d}"
    )


def build_hnsw_index(raw: Any, dim: int, build_memory: str) -> list[str]:
    """Make the index of `dim` on the connection's schema, valid; drop older builds of it.

    Built `CONCURRENTLY`, so the embedding writes go on meanwhile; with `maintenance_work_mem`
    at `build_memory` for this statement, so the graph is built in memory while it fits. A
    build cut short leaves an invalid index: it is dropped and built again. An index of the
    same dimension built with other parameters (an earlier version's) is dropped once this one
    stands. Returns what was done, for the log.
    """
    d = int(dim)
    with hnsw_index_lock(raw, d):
        return _build_hnsw_index(raw, d, build_memory)


@contextlib.contextmanager
def hnsw_index_lock(raw: Any, dim: int) -> Iterator[None]:
    """Hold the schema's index of `dim` alone: one build or drop at a time (the daemon's start,
    a reindex, another daemon on the same namespace); the second waits, then finds the index
    standing. Without it, an index another session is building looks like one cut short
    (neither is valid yet), and dropping it fails."""
    key = f"reverie.hnsw.{int(dim)}"
    # Tried, not waited for in the server: a session waiting inside a statement would be a
    # transaction the holder's `CREATE INDEX CONCURRENTLY` waits on in turn (a deadlock).
    while not raw.execute(
        "SELECT pg_try_advisory_lock(hashtext(current_schema() || %s))", (key,)
    ).fetchone()[0]:
        time.sleep(HNSW_LOCK_POLL_S)
    try:
        yield
    finally:
        raw.execute("SELECT pg_advisory_unlock(hashtext(current_schema() || %s))", (key,))


def _build_hnsw_index(raw: Any, d: int, build_memory: str) -> list[str]:
    name = hnsw_index_name(d)
    found = {
        str(r[0]): bool(r[1])
        for r in raw.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE n.nspname = current_schema() AND t.relname = 'embeddings'"
        ).fetchall()
    }
    done: list[str] = []
    if found.get(name) is False:
        raw.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        done.append(f"dropped {name} (a build cut short)")
    if not found.get(name):
        raw.execute(f"SET maintenance_work_mem = '{build_memory}'")
        try:
            raw.execute(hnsw_index_sql(d, name=name))
        finally:
            raw.execute("RESET maintenance_work_mem")
        done.append(f"built {name}")
    older = f"embeddings_hnsw_{d}"
    for other in sorted(found):
        if other != name and (other == older or other.startswith(older + "_")):
            raw.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {other}")
            done.append(f"dropped {other} (an earlier build)")
    return done


def drop_hnsw_index(raw: Any, dim: int) -> None:
    """Drop this version's index of `dim` (waiting for a build or drop under way)."""
    with hnsw_index_lock(raw, dim):
        raw.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {hnsw_index_name(dim)}")


def analyze_memories(raw: Any) -> None:
    """Bring the planner's statistics of `embeddings` and `memories` up to date (after a
    backlog: a plan made on stale ones joins the index's neighbours by scanning every memory)."""
    raw.execute("ANALYZE embeddings, memories")


def hnsw_index_valid(raw: Any, dim: int) -> bool | None:
    """Whether this version's index of `dim` is valid (None: there is none)."""
    row = raw.execute(
        "SELECT i.indisvalid FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relname = %s",
        (hnsw_index_name(dim),),
    ).fetchone()
    return None if row is None else bool(row[0])


def set_ef_search(raw: Any, ef: int) -> None:
    """Search the index `ef` wide on this session."""
    raw.execute(f"SET hnsw.ef_search = {int(ef)}")


def nearest_rowids(raw: Any, *, dim: int, model: str, vector: bytes, want: int) -> list[int]:
    """The rowids of the memories whose embedding (of `model`, `dim`) is among the index's
    `want` nearest to `vector` (float32 bytes), nearest first; memories sharing a content are
    listed by rowid."""
    d = int(dim)
    sql = (
        "SELECT m.rowid FROM (SELECT content_hash, "
        f"vector::vector({d}) <#> %s::vector({d}) AS dist FROM embeddings "
        f"WHERE dim = {d} AND model = %s ORDER BY dist LIMIT {int(want)}) e "
        "JOIN memories m ON m.content_hash = e.content_hash ORDER BY e.dist, m.rowid"
    )
    return [int(r[0]) for r in raw.execute(sql, (vector, model)).fetchall()]
