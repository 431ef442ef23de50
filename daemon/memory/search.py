"""Hybrid search over the memories: FTS5 BM25 + vectors + recency, fused by reciprocal rank.

A query plan's sub-queries are ranked lexically (`LexicalSearcher`) and by vector (the
in-memory `VectorMatrix`), fused, re-ranked by facet coverage, and extended by a second hop
over the names the first hop's best hits mention; `fit` then shapes the results to the budget
(`excerpt`).

Size: one search pipeline (rank, fuse, facets, hops, time windows, fit) whose stages share
the candidate pool and the texts read once per search; split, they would pass it around.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import anyio
import numpy as np

from daemon.memory.api import MemoryItem
from daemon.memory.embedders import Embedder
from daemon.memory.excerpt import Line, Question
from daemon.memory.excerpt import fit as fit_items
from daemon.memory.lexical import LexicalSearcher, RowFilter
from daemon.memory.links import LinkHop, with_links
from daemon.memory.matrix import VectorMatrix
from daemon.memory.query import (
    QueryPlan,
    bridge_entities,
    match_terms,
    terms,
    words,
)
from daemon.memory.relevance import Match, match, scale_for
from daemon.memory.rows import embed_text, row_to_item
from daemon.memory.text import stem
from daemon.resources import forgettable
from daemon.store.db import Database
from daemon.text import STOP_WORDS as EVERYDAY_STOP_WORDS

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
# The second hop: names in the first hop's best few hits become BM25 queries of their own.
HOP_SEEDS = 3
HOP_QUERIES = 3
HOP_WEIGHT = 1.0
# What a question asks about a person, searched among the memories that name them. It is
# weighted above the full question, whose vector the name pulls towards every line naming the
# person (measured on both recall sets: 1.0 → 3.0 helped, nothing fell; see the README).
ABOUT_POOL = 200
ABOUT_WEIGHT = 3.0
# Facet coverage: the share of the question's words an item has boosts its fused score.
FACET_WEIGHT = 0.6
FACET_POOL = 30
# Items ranked for a plan search, per item asked for, before fitting drops repeated messages.
FIT_POOL = 2
# Pseudo-relevance feedback: the question's vector moved towards its best few hits finds what
# they have in common with it ("what activities does Mel do?" → the pottery class found,
# swimming with the kids follows). One more vector ranking, fused like the others.
FEEDBACK_SEEDS = 3
FEEDBACK_WEIGHT = 1.0
# The same by words: the question with the rarest words its best few hits share among them
# ("what pets does Nate have?" + turtles, tank, dog), searched by BM25. Measured on the LoCoMo
# tuning split (bench/README.md, "Recall that fits"): recall within 1,500 tokens 89.4 → 90.4,
# recall@10 82.4 → 85.3; weighted above the question (1.0: 89.9), as the about question is.
LEXICAL_FEEDBACK_WEIGHT = 1.25
FEEDBACK_TERMS = 5
# A word only one hit uses would pull that hit up by its own words: two of them must share it.
FEEDBACK_MIN_SHARED = 2


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


class MemorySearch:
    """Rank memories for a query or a plan (`refresh` updates the matrix before a search)."""

    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        matrix: VectorMatrix,
        lexical: LexicalSearcher,
        *,
        hops: int,
        refresh: Callable[[], Awaitable[None]],
        query_vectors: Callable[[Sequence[str]], Awaitable[np.ndarray | None]],
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.matrix = matrix
        self.lexical = lexical
        self.hops = hops
        self.refresh = refresh
        self.query_vectors = query_vectors
        self._vector_weight = VECTOR_WEIGHT * float(getattr(embedder, "fusion_weight", 1.0))
        self.link_hop = LinkHop(db)

    def _where(
        self,
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

    def _vector_masks(self, windows: Sequence[RowFilter]) -> list[np.ndarray]:
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

    async def _rank_queries(
        self,
        queries: Sequence[str],
        *,
        limit: int,
        mode: SearchMode,
        windows: Sequence[RowFilter],
        query_vector: np.ndarray | None = None,
        drop_common: bool = True,
        vector_queries: int | None = None,
    ) -> list[list[dict[int, float]]]:
        """Return, per window, per informative query, fused scores by rowid (no hydration).

        Secondary queries whose every term is common are dropped (the first query never is).
        Lexical searches run on the database thread in one hop; meanwhile a worker thread
        computes all query similarities in one matrix product shared by every window, so the
        event loop never runs the 100k-row product itself. Cancellation abandons both (a
        running SQL statement or product finishes in its thread, its result unused).
        """
        lexical_on = mode in ("hybrid", "lexical")
        # No vector to compare with, no query to embed: the model is never loaded for nothing.
        vector_on = (
            mode in ("hybrid", "vector") and self.embedder.dim > 0 and self.matrix.vector_count > 0
        )
        rows = len(self.matrix)

        def choose(conn: Any) -> list[str]:
            if not drop_common or len(queries) == 1:
                return list(queries)
            phrases = {p: None for q in queries for p in match_terms(q)}
            df = self.lexical.doc_freqs(conn, phrases, rows, self.matrix.generation)
            return [queries[0], *(q for q in queries[1:] if self.lexical.informative(q, df, rows))]

        kept = await self.db.run(choose) if drop_common and len(queries) > 1 else list(queries)

        def lexical_work(conn: Any) -> list[list[list[int]]]:
            if not lexical_on:
                return [[[] for _ in kept] for _ in windows]
            return [
                self.lexical.search(
                    conn,
                    kept,
                    limit=limit,
                    rows=rows,
                    where=w,
                    rows_in=self.matrix,
                    generation=self.matrix.generation,
                )
                for w in windows
            ]

        def vector_work(qv: np.ndarray) -> list[list[list[int]]]:
            return self.matrix.ranked(qv, self._vector_masks(windows), limit)

        found: dict[str, Any] = {}

        async def lexical_side() -> None:
            found["lexical"] = await self.db.run(lexical_work)

        async def vector_side() -> None:
            if query_vector is not None and len(queries) == 1:
                qv = np.asarray(query_vector, dtype=np.float32).reshape(1, -1)
            else:
                # Only the first `vector_queries` queries get a vector pass (the rest: BM25 alone).
                qv = await self.query_vectors(kept[: vector_queries or len(kept)])  # type: ignore[assignment]
            found["vector"] = await anyio.to_thread.run_sync(vector_work, qv)

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
            [self._fuse(lexical[wi][qi], vector[wi][qi]) for qi in range(len(kept))]
            for wi in range(len(windows))
        ]

    def _fuse(self, lexical: list[int], vector: list[int]) -> dict[int, float]:
        fused: dict[int, float] = {}
        for rank, rowid in enumerate(lexical):
            fused[rowid] = fused.get(rowid, 0.0) + LEXICAL_WEIGHT / (RRF_K + rank + 1)
        for rank, rowid in enumerate(vector):
            fused[rowid] = fused.get(rowid, 0.0) + self._vector_weight / (RRF_K + rank + 1)
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

    async def _texts(
        self, rowids: Collection[int], known: dict[int, tuple[str, str]] | None = None
    ) -> dict[int, tuple[str, str]]:
        """(title, text) by rowid; `known` holds what this search already read and is filled in."""
        known = {} if known is None else known
        missing = [r for r in rowids if r not in known]
        if missing:
            rows = await self.db.fetchall(
                f"SELECT rowid, title, text FROM memories WHERE rowid IN ({','.join('?' * len(missing))})",
                missing,
            )
            known.update((r[0], (r[1] or "", r[2] or "")) for r in rows)
        return known

    async def _by_facets(
        self,
        plan: QueryPlan,
        scored: list[tuple[int, float]],
        chains: dict[str, str] | None = None,
        known: dict[int, tuple[str, str]] | None = None,
    ) -> list[tuple[int, float]]:
        """Re-rank so that items covering more of the question's words rise among near-equals.

        A question joins facets ("what did X do after moving to Y?"); an item that speaks of
        several of them beats one that repeats a single word. `chains` maps a second-hop
        bridge name to the first-hop text it came from: an item naming the bridge covers
        what that text covers ("Tomas" stands for "my brother … medical school").
        """
        asked = terms(plan.text)
        facets = {stem(w) for w in asked}
        if FACET_WEIGHT <= 0 or len(facets) < 2 or not scored:
            return scored
        found = await self._texts([r for r, _ in scored], known)
        texts = {r: f"{title} {text}" for r, (title, text) in found.items()}
        weight = await self._facet_weights(asked)
        total = sum(weight.values())

        def share(text: str) -> float:
            return sum(weight[f] for f in facets & stems_of(text)) / total

        links = [(name.lower(), share(seed)) for name, seed in (chains or {}).items()]

        def covered(rowid: int) -> float:
            text = texts.get(rowid, "")
            low = text.lower()
            return max([share(text), *(cov for name, cov in links if name in low)])

        return sorted(
            ((r, s * (1.0 + FACET_WEIGHT * covered(r))) for r, s in scored),
            key=lambda rs: (-rs[1], -rs[0]),
        )

    async def _distinct(
        self,
        scored: list[tuple[int, float]],
        k: int,
        known: dict[int, tuple[str, str]] | None = None,
    ) -> list[tuple[int, float]]:
        """The first `k` results, each text once: a line someone says often ("we had friends
        over for dinner") is shown at its best place, not at every date it was said."""
        if len(scored) <= 1:
            return scored[:k]
        found = await self._texts([r for r, _ in scored], known)
        said = {r: undated(text) for r, (_, text) in found.items()}
        seen: set[str] = set()
        out: list[tuple[int, float]] = []
        for rowid, score in scored:
            text = said.get(rowid)
            if text is not None and text in seen:
                continue
            if text is not None:
                seen.add(text)
            out.append((rowid, score))
            if len(out) == k:
                break
        return out

    async def _facet_weights(self, asked: Sequence[str]) -> dict[str, float]:
        """Each question word's stem weighted by its IDF in memory.

        A name on half the memories (a speaker's) covers little; a word few memories use
        ("brother", "hobby") says the item speaks of what was asked.
        """
        rows = len(self.matrix)
        phrases = {w: '"' + w.replace('"', "") + '"' for w in asked}

        def count(conn: Any) -> dict[str, int]:
            return self.lexical.doc_freqs(conn, phrases.values(), rows, self.matrix.generation)

        df = await self.db.run(count)
        weight: dict[str, float] = {}
        for w, phrase in phrases.items():
            idf = math.log(1.0 + (rows + 1.0) / (1.0 + df.get(phrase, 0)))
            weight[stem(w)] = max(weight.get(stem(w), 0.0), idf)
        return weight

    async def _about(
        self,
        plan: QueryPlan,
        windows: Sequence[RowFilter],
        known: dict[int, tuple[str, str]] | None = None,
    ) -> list[list[dict[int, float]]]:
        """Per window, rankings for what the question asks about someone, among the memories
        naming them.

        "What might Priya do for a living?": the question said of "they", by vector, over the
        `ABOUT_POOL` nearest memories, keeping those whose text names the person. Her own
        words about her work ("I teach maths to fourteen-year-olds") share nothing with the
        question, and the name in its vector pulls towards every line that mentions her.
        """
        if not plan.about or self.embedder.dim == 0 or not self.matrix.vector_count:
            return [[] for _ in windows]
        vectors = await self.query_vectors([q for _, q in plan.about])
        if vectors is None:
            return [[] for _ in windows]
        # Masks and ranking in the worker thread: at 100k rows neither belongs on the event loop.
        near = await anyio.to_thread.run_sync(
            lambda: self.matrix.ranked(vectors, self._vector_masks(windows), ABOUT_POOL)
        )
        # Checked on the candidates' text (bounded), not by an FTS match of a name that may
        # be on half the index.
        names = [
            re.compile(
                r"(?<!\w)" + r"\W+".join(map(re.escape, words(e))) + r"(?!\w)", re.IGNORECASE
            )
            for e, _ in plan.about
        ]
        candidates = sorted({r for per_query in near for rowids in per_query for r in rowids})
        texts = {r: text for r, (_, text) in (await self._texts(candidates, known)).items()}
        kept = [
            [
                [r for r in rowids if name.search(texts.get(r, ""))]
                for name, rowids in zip(names, per_query, strict=True)
            ]
            for per_query in near
        ]
        return [
            [
                {r: self._vector_weight / (RRF_K + rank + 1) for rank, r in enumerate(rows)}
                for rows in per_query
            ]
            for per_query in kept
        ]

    async def _feedback(
        self,
        question: str,
        ranked: list[dict[int, float]],
        *,
        weights: Sequence[float],
        where: RowFilter,
        limit: int,
    ) -> dict[int, float] | None:
        """A vector ranking for the question moved towards its best hits so far (the centroid
        of `FEEDBACK_SEEDS` hits' vectors, weighted as the question); None without vectors."""
        if self.embedder.dim == 0 or not self.matrix.vector_count or not ranked:
            return None
        seeds = self._combine(ranked, FEEDBACK_SEEDS, weights)
        found = self.matrix.vectors([r for r, _ in seeds])
        if not found:
            return None
        asked = await self.query_vectors([question])
        if asked is None:
            return None
        centroid = np.mean(np.stack(list(found.values())), axis=0)
        moved = asked[0] / max(float(np.linalg.norm(asked[0])), 1e-9)
        moved = moved + centroid / max(float(np.linalg.norm(centroid)), 1e-9)
        moved = (moved / max(float(np.linalg.norm(moved)), 1e-9)).astype(np.float32)
        [[near]] = await anyio.to_thread.run_sync(
            lambda: self.matrix.ranked(moved, self._vector_masks([where]), limit)
        )
        return {r: self._vector_weight / (RRF_K + rank + 1) for rank, r in enumerate(near)}

    async def _lexical_feedback(
        self,
        question: str,
        ranked: list[dict[int, float]],
        *,
        weights: Sequence[float],
        where: RowFilter,
        limit: int,
        known: dict[int, tuple[str, str]] | None = None,
    ) -> dict[int, float] | None:
        """A BM25 ranking for the question and the words its best hits have in common.

        Of the words at least `FEEDBACK_MIN_SHARED` of the best `FEEDBACK_SEEDS` hits use and
        the question does not, the `FEEDBACK_TERMS` that most of them share and the fewest
        memories use: what the question is about, said the way the conversation says it. None
        when they share none.
        """
        seeds = self._combine(ranked, FEEDBACK_SEEDS, weights)
        if not seeds:
            return None
        texts = await self._texts([r for r, _ in seeds], known)
        asked = {stem(w) for w in terms(question)}
        shared: dict[str, int] = {}
        for rowid, _ in seeds:
            said = undated(texts.get(rowid, ("", ""))[1])
            for w in {w for w in terms(said) if w.isalpha() and len(w) > 2}:
                if stem(w) not in asked:
                    shared[w] = shared.get(w, 0) + 1
        shared = {w: n for w, n in shared.items() if n >= FEEDBACK_MIN_SHARED}
        if not shared:
            return None
        rows = len(self.matrix)
        df = await self.db.run(
            lambda conn: self.lexical.doc_freqs(
                conn, {f'"{w}"': None for w in shared}, rows, self.matrix.generation
            )
        )

        def weight(w: str) -> float:
            return shared[w] * math.log((rows + 1) / (1 + df.get(f'"{w}"', 0)))

        chosen = sorted(shared, key=lambda w: (-weight(w), w))[:FEEDBACK_TERMS]
        [[fused]] = await self._rank_queries(
            [f"{question} {' '.join(chosen)}"],
            limit=limit,
            mode="lexical",
            windows=[where],
            drop_common=False,
        )
        return fused

    async def _second_hop(
        self, plan: QueryPlan, first: list[tuple[int, float]], where: RowFilter
    ) -> tuple[list[dict[int, float]], dict[str, str]]:
        """Rankings for the names the first hop's best hits mention and the question does not.

        "How is Maya's brother getting on at medical school?" finds "my brother Tomas got
        into medical school"; the answer ("Tomas complains about the anatomy exams") shares
        only "Tomas" with it. Bridges are searched by BM25 alone (no query vectors to embed).
        Returns the rankings and each bridge with the text it was found in.
        """
        seeds = await self._hydrate(first)
        asked = {w.lower() for w in terms(plan.text)}
        bridges: dict[str, str] = {}
        for item in seeds:
            for name in bridge_entities(item.text):
                if not asked & {w.lower() for w in terms(name)}:
                    bridges.setdefault(name, item.title + " " + item.text)
        if not bridges:
            return [], {}
        queries = list(bridges)[:HOP_QUERIES]
        [ranked] = await self._rank_queries(
            queries, limit=CANDIDATES, mode="lexical", windows=[where], drop_common=False
        )
        return ranked, {q: bridges[q] for q in queries}

    @staticmethod
    def _combine(
        ranked: list[dict[int, float]], k: int, weights: Sequence[float] | None = None
    ) -> list[tuple[int, float]]:
        """Fuse per-query rankings by reciprocal rank, the first query weighted most."""
        if len(ranked) == 1:
            return sorted(ranked[0].items(), key=lambda kv: (-kv[1], -kv[0]))[:k]
        total: dict[int, float] = {}
        for i, scores in enumerate(ranked):
            weight = weights[i] if weights is not None else (1.0 if i == 0 else 0.5)
            for rank, (rid, _s) in enumerate(
                sorted(scores.items(), key=lambda kv: (-kv[1], -kv[0]))
            ):
                total[rid] = total.get(rid, 0.0) + weight / (RRF_K + rank + 1)
        return sorted(total.items(), key=lambda kv: (-kv[1], -kv[0]))[:k]

    async def _hydrate(
        self, scored: list[tuple[int, float]], meta: dict[int, dict[str, object]] | None = None
    ) -> list[MemoryItem]:
        """Load the rows in order with their scores; `meta` adds to chosen items' meta."""
        if not scored:
            return []
        rows = await self.db.fetchall(
            f"SELECT rowid AS rid, * FROM memories WHERE rowid IN ({','.join('?' * len(scored))})",
            [r for r, _ in scored],
        )
        by_id = {r["rid"]: r for r in rows}
        items = [(r, row_to_item(by_id[r], s)) for r, s in scored if r in by_id]
        for r, item in items:
            item.meta.update((meta or {}).get(r, {}))
        return [item for _, item in items]

    async def search(
        self,
        query: str,
        *,
        k: int = 10,
        kinds: Collection[str] | None = None,
        mode: SearchMode = "hybrid",
        include_retired: bool = False,
        after: datetime | None = None,
        before: datetime | None = None,
        query_vector: np.ndarray | None = None,
    ) -> list[MemoryItem]:
        """Return the `k` best memories for `query`, best first, with fused scores.

        Lexical (BM25) and vector (cosine) rankings are fused by reciprocal rank, then
        recency, explicitness and importance nudge the order. Without an embedder, or before
        vectors exist, vector mode returns what it can and hybrid degrades to lexical.
        """
        if mode not in ("hybrid", "lexical", "vector"):
            raise ValueError(f"unknown search mode {mode!r}; use hybrid, lexical or vector")
        if k <= 0 or (not query.strip() and query_vector is None):
            return []
        await self.refresh()
        [[fused]] = await self._rank_queries(
            [query],
            limit=max(CANDIDATES, 3 * k),
            mode=mode,
            windows=[self._where(kinds, include_retired, after, before)],
            query_vector=query_vector,
        )
        return await self._hydrate(self._combine([fused], k))

    async def search_plan(
        self,
        plan: QueryPlan,
        *,
        k: int = 10,
        mode: SearchMode = "hybrid",
        kinds: Collection[str] | None = None,
        include_retired: bool = False,
        vector_queries: int | None = None,
        fit: bool = True,
        feedback: bool = True,
    ) -> list[MemoryItem]:
        """Search a decomposed query: its time window is a preference, not a wall.

        Results inside the window (or before/after the remembered anchor, e.g. "my trip",
        whose own memory comes second) come first; the rest of the ranking fills up to `k`,
        so a mis-resolved time word never empties the answer. Each query is fused with the
        plan's about questions (a named person's memories, see `_about`) and, with two hops,
        the names the first hop's best hits mention (`_second_hop`); below those best hits,
        facet coverage re-ranks; each line appears once; scores never rise down the list.
        `vector_queries=n`: only the plan's first n queries get a vector pass (and an encode);
        the rest are searched by BM25 alone (automatic recall, which runs every turn).
        With `fit` (the default) the results are fitted to the question (`fit`); without it
        the caller fits them itself (automatic recall, after its relevance floor).
        `feedback=False` leaves out the ranking by the question's vector moved towards its
        best hits (`_feedback`; automatic recall, which runs on whatever was said).
        """
        queries = [q for q in dict.fromkeys(q.strip() for q in plan.all_queries()) if q]
        if not queries or k <= 0:
            return []
        after, before = plan.after, plan.before
        event: int | None = None
        if plan.anchor is not None:
            hits = await self.search(plan.anchor.text, k=1, kinds=kinds, mode=mode)
            if hits and hits[0].ts is not None:
                pivot = hits[0].ts
                row = await self.db.fetchone(
                    "SELECT rowid FROM memories WHERE uid = ?", (hits[0].id,)
                )
                event = int(row[0]) if row else None
                # Strictly after: the anchoring event itself is not what happened after it.
                after, before = (
                    (pivot + timedelta(seconds=1), None)
                    if plan.anchor.relation == "after"
                    else (None, pivot)
                )
        await self.refresh()
        windows = [self._where(kinds, include_retired, None, None)]
        if after is not None or before is not None:
            windows.append(self._where(kinds, include_retired, after, before))
        ranked = await self._rank_queries(
            queries,
            limit=max(CANDIDATES, 3 * k),
            mode=mode,
            windows=windows,
            vector_queries=vector_queries,
        )
        window_weights = [[1.0] + [0.5] * (len(r) - 1) for r in ranked]
        known: dict[int, tuple[str, str]] = {}  # memories' text, read once for this search
        if mode != "lexical":
            for wi, focus in enumerate(await self._about(plan, windows, known)):
                ranked[wi] = [*ranked[wi], *focus]
                window_weights[wi] += [ABOUT_WEIGHT] * len(focus)
        # Over the whole history, and not in automatic recall (`feedback=False`): recall runs
        # every turn on whatever was said, and a message of several clauses has best hits
        # about one of them, which the moved vector would pile on at the others' expense.
        # Inside a time window it drowned what the question asks about a person (`_about`).
        if feedback and mode != "lexical":
            fed = await self._feedback(
                plan.text,
                ranked[0],
                weights=window_weights[0],
                where=windows[0],
                limit=max(CANDIDATES, 3 * k),
            )
            if fed is not None:
                ranked[0] = [*ranked[0], fed]
                window_weights[0] += [FEEDBACK_WEIGHT]
        if feedback and mode == "hybrid" and LEXICAL_FEEDBACK_WEIGHT > 0:
            worded = await self._lexical_feedback(
                plan.text,
                ranked[0],
                weights=window_weights[0],
                where=windows[0],
                limit=max(CANDIDATES, 3 * k),
                known=known,
            )
            if worded is not None:
                ranked[0] = [*ranked[0], worded]
                window_weights[0] += [LEXICAL_FEEDBACK_WEIGHT]
        weights = window_weights[0]
        first = self._combine(ranked[0], HOP_SEEDS, weights)
        chains: dict[str, str] = {}
        # Items a bridge name found say so (meta "via"): recall keeps them although they may
        # share no word with the question.
        via: dict[int, dict[str, object]] = {}
        if self.hops > 1 and mode != "vector":
            hop, chains = await self._second_hop(plan, first, windows[0])
            ranked[0] = [*ranked[0], *hop]
            weights += [HOP_WEIGHT] * len(hop)
            for name, scores in zip(chains, hop, strict=True):
                for rowid in scores:
                    via.setdefault(rowid, {"via": name})
        # The first hop's best hits keep their places; what the second hop found ranks after.
        kept = {r for r, _ in first}
        # Room for the repeated lines `_distinct` drops.
        pool = self._combine(ranked[0], 2 * max(k, FACET_POOL) + len(first), weights)
        rest = await self._by_facets(
            plan, [(r, s) for r, s in pool if r not in kept], chains, known
        )
        # Fitting drops what a better item already shows: room for the items that follow.
        want = FIT_POOL * k if fit else k
        base = await self._distinct(first + rest, want, known)
        if len(windows) == 1:
            merged = base
        else:
            inside = [
                (r, s) for r, s in self._combine(ranked[1], 2 * k, window_weights[1]) if r != event
            ]
            if event is not None:
                # "What did X do after Y?" joins Y to what followed: the event itself comes second.
                inside = [*inside[:1], (event, inside[0][1] if inside else 0.0), *inside[1:]]
            seen = {r for r, _ in inside}
            merged = await self._distinct(
                inside + [(r, s) for r, s in base if r not in seen], want, known
            )
        if self.hops > 1 and mode != "vector":
            # Who "my brother-in-law" is, from the links written with the messages: the message
            # that tied name and relation, and the name's best passages (`daemon.memory.links`).
            merged, linked = await with_links(
                self, plan.text, merged, kinds=kinds, include_retired=include_retired
            )
            for rowid, meta in linked.items():
                via[rowid] = {**via.get(rowid, {}), **meta}
        items = await self._hydrate(descending(merged), via)
        return await self.fit(plan.text, items, k) if fit else items

    async def similarities(self, question: str, items: Sequence[MemoryItem]) -> dict[str, float]:
        """Each item's vector similarity to `question`, by item id ({} without vectors)."""
        if not items or self.embedder.dim == 0 or self.matrix.vector_count == 0:
            return {}
        uids = [i.id for i in items]
        rows = await self.db.fetchall(
            f"SELECT rowid, uid FROM memories WHERE uid IN ({','.join('?' * len(uids))})", uids
        )
        vectors = self.matrix.vectors([int(r[0]) for r in rows])
        found = await self.query_vectors([question])
        if found is None:
            return {}
        return {r[1]: float(vectors[int(r[0])] @ found[0]) for r in rows if int(r[0]) in vectors}

    async def matches(
        self, question: str, items: Sequence[MemoryItem], *, by_meaning: bool = True
    ) -> list[Match]:
        """How well each item matches `question` (`daemon.memory.relevance`), in order.

        By words: the IDF-weighted share of the question's words the item uses; by meaning:
        the cosine of the item's stored vector, rescaled for the embedder. An item the second
        hop found through a name (meta "via") matches at least as well as the best other item
        naming it: the chain that led to it ("my brother" → "Tomas …" → "Tomas complains …").
        `by_meaning=False` rates by words alone and never loads the embedding model.
        """
        if not items:
            return []
        asked = [w for w in terms(question) if w not in EVERYDAY_STOP_WORDS and not w.isdigit()]
        weight = await self._facet_weights(asked) if asked else {}
        total = sum(weight.values())
        near = await self._shown_similarities(question, items) if by_meaning else {}
        scale = scale_for(self.embedder)

        def share(item: MemoryItem) -> float:
            if total <= 0:
                return 0.0
            # The question's words are content words: the item's (cached per text) suffice.
            said = stems_of(item.text) | stems_of(item.title) | stems_of(" ".join(item.tags))
            return sum(w for s, w in weight.items() if s in said) / total

        own = [match(share(i), near.get(i.id), scale) for i in items]
        # The best match among the items a bridge name could have come from, by name.
        seeds = [
            (i.text.lower(), o) for i, o in zip(items, own, strict=True) if not i.meta.get("via")
        ]
        out: list[Match] = []
        for item, m in zip(items, own, strict=True):
            name = str(item.meta.get("via") or "").lower()
            if name:
                best = max((o.relevance for low, o in seeds if name in low), default=0)
                if best > m.relevance:
                    m = Match(relevance=best, words=m.words, meaning=m.meaning)
            out.append(m)
        return out

    async def _shown_similarities(
        self, question: str, items: Sequence[MemoryItem]
    ) -> dict[str, float]:
        """Each item's cosine with `question`, by item id, for what the item shows: a window
        cut to some of its messages by the best of those messages' vectors (its own vector
        is the mean of all of them, which a line shown elsewhere would lend it)."""
        if self.embedder.dim == 0 or self.matrix.vector_count == 0:
            return {}
        parts: dict[str, list[str]] = {}
        for item in items:
            listed = item.meta.get("parts")
            if item.kind == "chunk" and isinstance(listed, list):
                parts[item.id] = [str(p) for p in listed]
        uids = {i.id for i in items} | {u for us in parts.values() for u in us}
        rows = await self.db.fetch_in(
            "SELECT rowid, uid, message_ids FROM memories WHERE uid IN ({})", sorted(uids)
        )
        rowid = {r[1]: int(r[0]) for r in rows}
        said = {r[1]: set(json.loads(r[2] or "[]")) for r in rows}
        found = await self.query_vectors([question])
        if found is None:
            return {}
        measured: dict[str, list[int]] = {}  # the rows whose vectors stand for what it shows
        for item in items:
            shown = set(item.message_ids)
            units = [u for u in parts.get(item.id, []) if said.get(u, set()) & shown]
            measured[item.id] = [rowid[u] for u in units or [item.id] if u in rowid]
        vectors = self.matrix.vectors(sorted({r for rs in measured.values() for r in rs}))
        out: dict[str, float] = {}
        for uid, rowids in measured.items():
            sims = [float(vectors[r] @ found[0]) for r in rowids if r in vectors]
            if sims:
                out[uid] = max(sims)
        return out

    async def fit(
        self, question: str, items: Sequence[MemoryItem], k: int, shown: set[str] | None = None
    ) -> list[MemoryItem]:
        """The first `k` of `items` fitted to `question` (`excerpt.fit`): a window cut to the
        lines that bear on it, a long message excerpted around what matched, each message
        shown once (`shown`: message ids already shown this turn, filled in)."""
        windows: dict[str, list[str]] = {}
        for item in items:
            parts = item.meta.get("parts")
            if (
                item.kind == "chunk"
                and isinstance(parts, list)
                and len(parts) == len(item.message_ids) > 1
            ):
                windows[item.id] = [str(p) for p in parts]
        wanted = sorted({uid for parts in windows.values() for uid in parts})
        rows: dict[str, tuple[int, str]] = {
            r[1]: (int(r[0]), r[2] or "")
            for r in await self.db.fetch_in(
                "SELECT rowid, uid, text FROM memories WHERE uid IN ({})", wanted
            )
        }
        lines_of: dict[str, list[Line]] = {}
        for item in items:
            if item.id in windows:
                if all(uid in rows for uid in windows[item.id]):
                    lines_of[item.id] = [
                        Line(message_id=mid, text=rows[uid][1], rowid=rows[uid][0])
                        for uid, mid in zip(windows[item.id], item.message_ids, strict=True)
                    ]
            elif item.kind == "chunk" and len(item.message_ids) == 1:
                lines_of[item.id] = [Line(message_id=item.message_ids[0], text=item.text)]
        vector: np.ndarray | None = None
        vectors: dict[int, np.ndarray] = {}
        if windows and self.embedder.dim > 0 and self.matrix.vector_count > 0:
            found = await self.query_vectors([question])
            vector = None if found is None else found[0]
            vectors = self.matrix.vectors([rowid for rowid, _ in rows.values()])
        return fit_items(
            items,
            Question.of(question, vector),
            lines_of=lines_of,
            vectors=vectors,
            k=k,
            shown=shown,
        )

    async def similar(
        self, text: str, kinds: Collection[str], threshold: float
    ) -> list[MemoryItem]:
        """Return active memories of `kinds` near-identical to `text` (similarity >= threshold).

        Similarity is cosine of vectors when the embedder makes them, else word-set overlap
        (Jaccard); candidates come from lexical search so the cost stays small.
        """
        if not match_terms(text):
            return []
        await self.refresh()
        where = self._where(kinds, False, None, None)
        rows = len(self.matrix)
        [rowids] = await self.db.run(
            lambda conn: self.lexical.search(
                conn, [text], limit=20, rows=rows, where=where, rows_in=self.matrix
            )
        )
        if self.embedder.dim > 0:
            vec_hits = self.matrix.nearest((await self.query_vectors([text]))[0], 10, kinds=kinds)  # type: ignore[index]
            rowids = list(dict.fromkeys([*rowids, *(r for r, _ in vec_hits)]))
        items = await self._hydrate([(r, 0.0) for r in rowids])
        if not items:
            return []
        mine = set(terms(text))
        out: list[MemoryItem] = []
        sims: list[float]
        if self.embedder.dim > 0:
            vecs = await self.embedder.embed([text, *(embed_text(i.title, i.text) for i in items)])
            sims = [float(v) for v in vecs[1:] @ vecs[0]]
        else:
            sims = [
                len(mine & set(terms(i.text))) / max(1, len(mine | set(terms(i.text))))
                for i in items
            ]
        for item, sim in zip(items, sims, strict=True):
            if sim >= threshold:
                out.append(MemoryItem(**{**item.__dict__, "score": sim}))
        return sorted(out, key=lambda m: -m.score)
