"""The vector matrix on PostgreSQL: pgvector's HNSW index picks each query's nearest memories.

The index itself (how it is built, found, dropped and asked) is `daemon.store.vector_index`;
this module decides when to ask it and when to score exactly in numpy instead.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from daemon.log import get_logger
from daemon.memory.matrix import VectorMatrix
from daemon.store.postgres import DEFAULT_BUILD_MEMORY, PgConnection
from daemon.store.vector_index import (
    analyze_memories,
    build_hnsw_index,
    drop_hnsw_index,
    hnsw_ef_search,
    hnsw_index_valid,
    nearest_rowids,
    set_ef_search,
)

log = get_logger("memory.matrix")

# Candidates asked of the index per query (at least, and per result asked for).
HNSW_MIN_CANDIDATES = 100
HNSW_OVERSAMPLE = 4
# An embedding backlog at least this large, and at least half the vectors already indexed, is
# embedded with the index set aside and built again after: pgvector builds a graph over rows
# already there several times faster than it links them in one by one (100k hashing vectors:
# 590 s kept up row by row).
HNSW_SET_ASIDE_MIN = 20_000


class PgVectorMatrix(VectorMatrix):
    """The matrix on PostgreSQL: pgvector's HNSW index picks each query's nearest memories.

    The rows' attributes (kind, retired, time …) and vectors are still loaded as on SQLite:
    filters, fusion and `similar` read them. `ranked` asks the server's HNSW index for the
    nearest embeddings of the model's dimension (one partial index per dimension, made by
    `prepare_index`), keeps those whose memory passes the window's mask, and scores exactly in
    numpy only when the approximate candidates leave a window short (a narrow filter) — or
    while the index is not there yet (being built), as the SQLite matrix does. It runs in a
    worker thread on a connection of its own, beside the database thread.
    """

    def __init__(
        self,
        *,
        model: str,
        dim: int,
        url: str,
        schema: str,
        build_memory: str = DEFAULT_BUILD_MEMORY,
    ) -> None:
        super().__init__(model=model, dim=dim)
        self.url = url
        self.schema = schema
        self.build_memory = build_memory
        self.hnsw_queries = 0
        # Whether the index of this dimension stands (None: not looked yet).
        self.index_ready: bool | None = None
        self._conn: Any = None
        self._lock = threading.Lock()
        # The `hnsw.ef_search` set on which server session (a reconnect opens a new one).
        self._ef_set: tuple[Any, int] | None = None
        self.set_aside_min = HNSW_SET_ASIDE_MIN

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = PgConnection.connect(self.url, self.schema)
        return self._conn

    @contextlib.contextmanager
    def _own_connection(self) -> Iterator[Any]:
        """A connection of its own for a build or a drop (the search's stays free), closed after."""
        conn = PgConnection.connect(self.url, self.schema)
        try:
            yield conn.raw
        finally:
            conn.close()

    def prepare_index(self) -> None:
        """Make sure the HNSW index of this dimension stands (the daemon does at start, off the loop).

        Made on an empty store it costs nothing and is kept up as rows arrive; over a large one
        (moved in, the embedder changed, or an earlier version's build) it is built here, on a
        connection of its own: searches meanwhile are exact in numpy, writes go on.
        """
        with self._own_connection() as raw:
            self._build(raw)

    def _build(self, raw: Any) -> None:
        done = build_hnsw_index(raw, self.dim, self.build_memory)
        if done:
            log.info("vector index", done="; ".join(done), schema=self.schema)
        self.index_ready = True

    def worth_setting_aside(self, pending: int) -> bool:
        """Whether `pending` new vectors go in faster with the index built again after."""
        return pending >= self.set_aside_min and 2 * pending >= self.vector_count

    def set_aside(self) -> None:
        """Drop the index of this dimension (`prepare_index` builds it again); searches go exact."""
        self.index_ready = False
        with self._own_connection() as raw:
            drop_hnsw_index(raw, self.dim)

    def rebuild(self) -> None:
        """After a backlog went in with the index set aside: the tables' statistics brought up
        to date (a plan made on stale ones joins the index's neighbours by scanning every
        memory), then the index built again."""
        with self._own_connection() as raw:
            analyze_memories(raw)
            self._build(raw)

    def _index_stands(self) -> bool:
        """Whether the index is there to ask (looked up once, then known)."""
        if self.index_ready is None:
            with self._lock:
                conn = self._connection()
                valid = conn._resilient(lambda: hnsw_index_valid(conn.raw, self.dim))
            if valid:
                self.index_ready = True
            else:
                return False  # looked again next time: the daemon may be building it
        return bool(self.index_ready)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def nearest_rowids(self, query: np.ndarray, want: int) -> list[int]:
        """The rowids of memories whose embedding is among the HNSW index's `want` nearest."""
        vec = np.asarray(query, dtype="<f4").tobytes()
        ef = hnsw_ef_search(self.vector_count)
        with self._lock:
            conn = self._connection()
            self.hnsw_queries += 1

            def ask() -> list[int]:
                raw = conn.raw
                if self._ef_set is None or self._ef_set[0] is not raw or self._ef_set[1] != ef:
                    set_ef_search(raw, ef)
                    self._ef_set = (raw, ef)
                return nearest_rowids(raw, dim=self.dim, model=self.model, vector=vec, want=want)

            found: list[int] = conn._resilient(ask)
            return found

    def ranked(
        self, queries: np.ndarray, masks: list[np.ndarray], limit: int
    ) -> list[list[list[int]]]:
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q.reshape(1, -1)
        if not self._index_stands():
            return super().ranked(q, masks, limit)
        want = max(HNSW_MIN_CANDIDATES, HNSW_OVERSAMPLE * limit)
        out: list[list[list[int]]] = [[] for _ in masks]
        for row in q:
            found = np.asarray(self.nearest_rowids(row, want), dtype=np.int64)
            pos = self._find(found)
            for mi, mask in enumerate(masks):
                ok = pos >= 0
                ok[ok] = mask[pos[ok]]
                kept = [int(r) for r in found[ok][:limit]]
                if len(kept) < limit and int(mask.sum()) > len(kept):
                    # The index's neighbours fell outside a narrow window: exact for this one.
                    kept = super().ranked(row.reshape(1, -1), [mask], limit)[0][0]
                out[mi].append(kept)
        return out
