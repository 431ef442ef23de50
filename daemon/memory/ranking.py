"""Rank memories for queries: BM25 and vector rankings fused by reciprocal rank, then nudged.

The ranker every stage of a search shares (`daemon.memory.search` puts the stages together):
one query or several, searched lexically (`LexicalSearcher`, on the database thread) and by
vector (the in-memory `VectorMatrix`, on a worker thread) at once, per time window; recency,
explicitness and importance nudge the fused order. It also reads the memories a search keeps
(`MemoryReads`): their texts, once per search, and the rows shown.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime
from typing import Any, Literal

import anyio
import numpy as np

from daemon.memory.api import MemoryItem
from daemon.memory.embedders import Embedder
from daemon.memory.lexical import LexicalSearcher, RowFilter
from daemon.memory.matrix import VectorMatrix
from daemon.memory.query import match_terms, terms
from daemon.memory.rows import row_to_item
from daemon.memory.text import stem
from daemon.resources import forgettable
from daemon.store.db import Database
from daemon.store.memories import MemoryRow
from daemon.store.memory_reads import MemoryReads

SearchMode = Literal["hybrid", "lexical", "vector"]

RRF_K = 60.0
LEXICAL_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0
RECENCY_WEIGHT = 0.15
# Multiplicative, so a boost reorders near-ties (about two places at the top) but cannot
# lift an irrelevant memory over a relevant one.
EXPLICIT_BOOST = 0.03
IMPORTANCE_WEIGHT = 0.04
CANDIDATES = 60

# (title, text) by row id: what one search has read of the memories, read once.
Known = dict[int, tuple[str, str]]
# Per query, fused scores by row id.
Ranking = dict[int, float]

# "Maya (8 May 2023): " -> "Maya: ": the same words from the same speaker on another day.
_UNDATED = re.compile(r"(?m)^([^\n:()]{1,60}?)\s*\([^)\n]{1,40}\):")


@functools.lru_cache(maxsize=8192)
def undated(text: str) -> str:
    """A memory's text with its speaker labels' dates left out ("Maya (8 May 2023): " -> "Maya: ")."""
    return _UNDATED.sub(r"\1:", text).strip()


@functools.lru_cache(maxsize=8192)
def stems_of(text: str) -> frozenset[str]:
    """The stems of a memory's content words (cached: the same memories are re-ranked often)."""
    return frozenset(stem(w) for w in terms(text))


# Both hold memories' whole texts: a sleep ends the day they were warm for.
forgettable(undated.cache_clear)
forgettable(stems_of.cache_clear)


def descending(scored: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The same order, each score capped by the one above it, so scores never rise down a list.

    The plan's search places some results by rule (the time window first, the first hop's best
    hits before the second hop's); a result's own fused score may be higher than that of the
    one placed above it. The score shown is then the one its place allows.
    """
    out: list[tuple[int, float]] = []
    cap = float("inf")
    for rowid, score in scored:
        cap = min(cap, score)
        out.append((rowid, cap))
    return out


def combine(
    ranked: list[Ranking], k: int, weights: Sequence[float] | None = None
) -> list[tuple[int, float]]:
    """Fuse per-query rankings by reciprocal rank, the first query weighted most."""
    if len(ranked) == 1:
        return sorted(ranked[0].items(), key=lambda kv: (-kv[1], -kv[0]))[:k]
    total: dict[int, float] = {}
    for i, scores in enumerate(ranked):
        weight = weights[i] if weights is not None else (1.0 if i == 0 else 0.5)
        for rank, (rid, _s) in enumerate(sorted(scores.items(), key=lambda kv: (-kv[1], -kv[0]))):
            total[rid] = total.get(rid, 0.0) + weight / (RRF_K + rank + 1)
    return sorted(total.items(), key=lambda kv: (-kv[1], -kv[0]))[:k]


def item_of(row: MemoryRow, score: float = 0.0) -> MemoryItem:
    """A stored memory as the `MemoryItem` the rest of the daemon reads."""
    return row_to_item(vars(row), score)


class Ranker:
    """Fused rankings over the index, and the reads of what they rank."""

    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        matrix: VectorMatrix,
        lexical: LexicalSearcher,
        query_vectors: Callable[[Sequence[str]], Awaitable[np.ndarray | None]],
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.matrix = matrix
        self.lexical = lexical
        self.query_vectors = query_vectors
        self.reads = MemoryReads(db)
        self.vector_weight = VECTOR_WEIGHT * float(getattr(embedder, "fusion_weight", 1.0))

    @property
    def has_vectors(self) -> bool:
        """Whether a vector ranking can find anything (an embedder, and vectors stored)."""
        return self.embedder.dim > 0 and self.matrix.vector_count > 0

    @staticmethod
    def where(
        kinds: Collection[str] | None,
        include_retired: bool,
        after: datetime | None,
        before: datetime | None,
    ) -> RowFilter:
        return RowFilter(
            kinds=tuple(kinds) if kinds else None,
            include_retired=include_retired,
            after=after,
            before=before,
        )

    def vector_masks(self, windows: Sequence[RowFilter]) -> list[np.ndarray]:
        """Per window, the rows a vector search may return (with a vector, passing its filters)."""
        return [
            self.matrix.mask(
                kinds=w.kinds,
                include_retired=w.include_retired,
                after=w.after,
                before=w.before,
                need_vector=True,
            )
            for w in windows
        ]

    def by_vector(self, rowids: Sequence[int]) -> Ranking:
        """A vector ranking's reciprocal-rank scores, in the order given."""
        return {r: self.vector_weight / (RRF_K + rank + 1) for rank, r in enumerate(rowids)}

    async def informative(self, queries: Sequence[str], rows: int) -> list[str]:
        """The queries worth a search: the first always, the others unless every term is common
        (in an index of `rows` memories)."""
        if len(queries) <= 1:
            return list(queries)

        def choose(conn: Any) -> list[str]:
            phrases = {p: None for q in queries for p in match_terms(q)}
            df = self.lexical.doc_freqs(conn, phrases, rows, self.matrix.generation)
            return [queries[0], *(q for q in queries[1:] if self.lexical.informative(q, df, rows))]

        kept: list[str] = await self.db.run(choose)
        return kept

    async def rank_queries(
        self,
        queries: Sequence[str],
        *,
        limit: int,
        mode: SearchMode,
        windows: Sequence[RowFilter],
        query_vector: np.ndarray | None = None,
        drop_common: bool = True,
        vector_queries: int | None = None,
    ) -> list[list[Ranking]]:
        """Return, per window, per informative query, fused scores by rowid (no hydration).

        Secondary queries whose every term is common are dropped (the first query never is).
        Lexical searches run on the database thread in one hop; meanwhile a worker thread
        computes all query similarities in one matrix product shared by every window, so the
        event loop never runs the 100k-row product itself. Cancellation abandons both (a
        running SQL statement or product finishes in its thread, its result unused).
        """
        lexical_on = mode in ("hybrid", "lexical")
        # No vector to compare with, no query to embed: the model is never loaded for nothing.
        vector_on = mode in ("hybrid", "vector") and self.has_vectors
        rows = len(self.matrix)
        kept = await self.informative(queries, rows) if drop_common else list(queries)
        found: dict[str, Any] = {}

        async def lexical_side() -> None:
            found["lexical"] = (
                await self._lexical(kept, limit, rows, windows)
                if lexical_on
                else [[[] for _ in kept] for _ in windows]
            )

        async def vector_side() -> None:
            if query_vector is not None and len(queries) == 1:
                qv = np.asarray(query_vector, dtype=np.float32).reshape(1, -1)
            else:
                # Only the first `vector_queries` queries get a vector pass (the rest: BM25 alone).
                qv = await self.query_vectors(kept[: vector_queries or len(kept)])  # type: ignore[assignment]
            masks = self.vector_masks
            found["vector"] = await anyio.to_thread.run_sync(
                lambda: self.matrix.ranked(qv, masks(windows), limit)
            )

        # The BM25 searches (database thread) and the matrix product (a worker thread) overlap.
        async with anyio.create_task_group() as tg:
            tg.start_soon(lexical_side)
            if vector_on:
                tg.start_soon(vector_side)
        lexical = found["lexical"]
        if vector_on:
            vector = [per + [[] for _ in range(len(kept) - len(per))] for per in found["vector"]]
        else:
            vector = [[[] for _ in kept] for _ in windows]
        return [
            [self.fuse(lexical[wi][qi], vector[wi][qi]) for qi in range(len(kept))]
            for wi in range(len(windows))
        ]

    async def _lexical(
        self, queries: list[str], limit: int, rows: int, windows: Sequence[RowFilter]
    ) -> list[list[list[int]]]:
        """Per window, per query, the BM25 ranking, in one hop to the database thread."""

        def work(conn: Any) -> list[list[list[int]]]:
            return [
                self.lexical.search(
                    conn,
                    queries,
                    limit=limit,
                    rows=rows,
                    where=w,
                    rows_in=self.matrix,
                    generation=self.matrix.generation,
                )
                for w in windows
            ]

        out: list[list[list[int]]] = await self.db.run(work)
        return out

    def fuse(self, lexical: list[int], vector: list[int]) -> Ranking:
        fused: dict[int, float] = {}
        for rank, rowid in enumerate(lexical):
            fused[rowid] = fused.get(rowid, 0.0) + LEXICAL_WEIGHT / (RRF_K + rank + 1)
        for rank, rowid in enumerate(vector):
            fused[rowid] = fused.get(rowid, 0.0) + self.vector_weight / (RRF_K + rank + 1)
        if fused:
            rowids = list(fused)
            created, explicit, importance = self.matrix.attributes(rowids)
            order = np.argsort(-created, kind="stable")
            for rank, i in enumerate(order):
                rid = rowids[int(i)]
                fused[rid] += RECENCY_WEIGHT / (RRF_K + rank + 1)
                fused[rid] *= (
                    1.0
                    + EXPLICIT_BOOST * float(explicit[i])
                    + IMPORTANCE_WEIGHT * (float(importance[i]) - 0.5)
                )
        return fused

    async def texts(self, rowids: Collection[int], known: Known | None = None) -> Known:
        """(title, text) by rowid; `known` holds what this search already read and is filled in."""
        known = {} if known is None else known
        missing = [r for r in rowids if r not in known]
        if missing:
            known.update((m.rowid, (m.title, m.text)) for m in await self.reads.texts(missing))
        return known

    async def items(
        self, scored: list[tuple[int, float]], meta: dict[int, dict[str, object]] | None = None
    ) -> list[MemoryItem]:
        """Load the rows in order with their scores; `meta` adds to chosen items' meta."""
        if not scored:
            return []
        by_id = await self.reads.rows([r for r, _ in scored])
        items = [(r, item_of(by_id[r], s)) for r, s in scored if r in by_id]
        for r, item in items:
            item.meta.update((meta or {}).get(r, {}))
        return [item for _, item in items]
