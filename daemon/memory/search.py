"""Hybrid search over the memories: FTS5 BM25 + vectors + recency, fused by reciprocal rank.

A query plan's sub-queries are ranked lexically and by vector (`daemon.memory.ranking`),
fused with what the question asks about a person, its best hits fed back and a second hop
over the names those hits mention (`daemon.memory.expansions`), re-ranked by facet coverage
(`daemon.memory.facets`), and preferred inside the plan's time window; `fit` then shapes the
results to the budget (`excerpt`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from daemon.memory.api import MemoryItem
from daemon.memory.embedders import Embedder
from daemon.memory.excerpt import Line, Question
from daemon.memory.excerpt import fit as fit_items
from daemon.memory.expansions import about, feedback, lexical_feedback, second_hop
from daemon.memory.facets import by_facets, distinct, facet_weights
from daemon.memory.lexical import LexicalSearcher, RowFilter
from daemon.memory.links import LinkHop, with_links
from daemon.memory.matrix import VectorMatrix
from daemon.memory.query import QueryPlan, match_terms, terms
from daemon.memory.ranking import CANDIDATES, Known, Ranker, Ranking, combine, descending, stems_of
from daemon.memory.ranking import SearchMode as SearchMode
from daemon.memory.ranking import undated as undated
from daemon.memory.relevance import Match, match, scale_for
from daemon.memory.rows import embed_text
from daemon.store.db import Database
from daemon.text import STOP_WORDS as EVERYDAY_STOP_WORDS

# The second hop's bridge names are read from the first hop's best few hits.
HOP_SEEDS = 3
HOP_WEIGHT = 1.0
# What a question asks about a person, searched among the memories that name them. It is
# weighted above the full question, whose vector the name pulls towards every line naming the
# person (measured on both recall sets: 1.0 → 3.0 helped, nothing fell; see the README).
ABOUT_WEIGHT = 3.0
# Items re-ranked by facet coverage below the first hop's best hits.
FACET_POOL = 30
# Items ranked for a plan search, per item asked for, before fitting drops repeated messages.
FIT_POOL = 2
# The question's vector moved towards its best hits (`expansions.feedback`), fused like the
# other vector rankings.
FEEDBACK_WEIGHT = 1.0
# The question with the words its best hits share, by BM25 (`expansions.lexical_feedback`).
# Measured on the LoCoMo tuning split (bench/README.md, "Recall that fits"): recall within
# 1,500 tokens 89.4 → 90.4, recall@10 82.4 → 85.3; weighted above the question (1.0: 89.9),
# as the about question is.
LEXICAL_FEEDBACK_WEIGHT = 1.25


@dataclass(kw_only=True)
class _Pool:
    """One plan search's rankings, per window, with their weights; grown stage by stage."""

    ranked: list[list[Ranking]]
    weights: list[list[float]]
    known: Known = field(default_factory=dict)  # memories' text, read once for this search

    def add(self, window: int, rankings: Sequence[Ranking], weight: float) -> None:
        self.ranked[window] = [*self.ranked[window], *rankings]
        self.weights[window] += [weight] * len(rankings)


@dataclass(kw_only=True)
class _Hops:
    """The first hop's best hits, the bridge names the second hop searched (with the text each
    came from), and what the items found through one say of it (meta "via")."""

    first: list[tuple[int, float]]
    chains: dict[str, str] = field(default_factory=dict)
    via: dict[int, dict[str, object]] = field(default_factory=dict)


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
        self.ranker = Ranker(db, embedder, matrix, lexical, query_vectors)
        self.reads = self.ranker.reads
        self.link_hop = LinkHop(db)

    async def _by_facets(
        self,
        plan: QueryPlan,
        scored: list[tuple[int, float]],
        chains: dict[str, str] | None = None,
        known: Known | None = None,
    ) -> list[tuple[int, float]]:
        """`facets.by_facets` over this index."""
        return await by_facets(self.ranker, plan, scored, chains, known)

    async def _facet_weights(self, asked: Sequence[str]) -> dict[str, float]:
        """`facets.facet_weights` over this index."""
        return await facet_weights(self.ranker, asked)

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
        [[fused]] = await self.ranker.rank_queries(
            [query],
            limit=max(CANDIDATES, 3 * k),
            mode=mode,
            windows=[self.ranker.where(kinds, include_retired, after, before)],
            query_vector=query_vector,
        )
        return await self.ranker.items(combine([fused], k))

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
        plan's about questions (a named person's memories, see `expansions.about`) and, with
        two hops, the names the first hop's best hits mention (`expansions.second_hop`);
        below those best hits, facet coverage re-ranks; each line appears once; scores never
        rise down the list.
        `vector_queries=n`: only the plan's first n queries get a vector pass (and an encode);
        the rest are searched by BM25 alone (automatic recall, which runs every turn).
        With `fit` (the default) the results are fitted to the question (`fit`); without it
        the caller fits them itself (automatic recall, after its relevance floor).
        `feedback=False` leaves out the ranking by the question's vector moved towards its
        best hits (`expansions.feedback`; automatic recall, which runs on whatever was said).
        """
        queries = [q for q in dict.fromkeys(q.strip() for q in plan.all_queries()) if q]
        if not queries or k <= 0:
            return []
        after, before, event = await self._anchored(plan, kinds=kinds, mode=mode)
        await self.refresh()
        windows = [self.ranker.where(kinds, include_retired, None, None)]
        if after is not None or before is not None:
            windows.append(self.ranker.where(kinds, include_retired, after, before))
        limit = max(CANDIDATES, 3 * k)
        pool = await self._rankings(
            plan, queries, windows, limit=limit, mode=mode, vector_queries=vector_queries
        )
        # Over the whole history, and not in automatic recall (`feedback=False`): recall runs
        # every turn on whatever was said, and a message of several clauses has best hits
        # about one of them, which the moved vector would pile on at the others' expense.
        # Inside a time window it drowned what the question asks about a person (`about`).
        if feedback:
            await self._fed_back(plan, pool, windows[0], limit=limit, mode=mode)
        hops = await self._hops(plan, pool, windows[0], mode=mode)
        # Fitting drops what a better item already shows: room for the items that follow.
        want = FIT_POOL * k if fit else k
        merged = await self._whole_history(plan, pool, hops, k=k, want=want)
        if len(windows) > 1:
            merged = await self._window_first(pool, merged, event, k=k, want=want)
        if self.hops > 1 and mode != "vector":
            # Who "my brother-in-law" is, from the links written with the messages: the message
            # that tied name and relation, and the name's best passages (`daemon.memory.links`).
            merged, linked = await with_links(
                self, plan.text, merged, kinds=kinds, include_retired=include_retired
            )
            for rowid, meta in linked.items():
                hops.via[rowid] = {**hops.via.get(rowid, {}), **meta}
        items = await self.ranker.items(descending(merged), hops.via)
        return await self.fit(plan.text, items, k) if fit else items

    async def _anchored(
        self, plan: QueryPlan, *, kinds: Collection[str] | None, mode: SearchMode
    ) -> tuple[datetime | None, datetime | None, int | None]:
        """The plan's time window, (after, before), and the anchoring event's row when the
        window is "before/after <something remembered>" (found by a search of its own)."""
        if plan.anchor is None:
            return plan.after, plan.before, None
        hits = await self.search(plan.anchor.text, k=1, kinds=kinds, mode=mode)
        if not hits or hits[0].ts is None:
            return plan.after, plan.before, None
        pivot = hits[0].ts
        event = await self.reads.rowid(hits[0].id)
        # Strictly after: the anchoring event itself is not what happened after it.
        if plan.anchor.relation == "after":
            return pivot + timedelta(seconds=1), None, event
        return None, pivot, event

    async def _rankings(
        self,
        plan: QueryPlan,
        queries: list[str],
        windows: list[RowFilter],
        *,
        limit: int,
        mode: SearchMode,
        vector_queries: int | None,
    ) -> _Pool:
        """Per window, the plan's queries' rankings (the first weighted most) and, unless the
        search is lexical, what the question asks about a person (`ABOUT_WEIGHT`)."""
        ranked = await self.ranker.rank_queries(
            queries, limit=limit, mode=mode, windows=windows, vector_queries=vector_queries
        )
        pool = _Pool(ranked=ranked, weights=[[1.0] + [0.5] * (len(r) - 1) for r in ranked])
        if mode != "lexical":
            for wi, focus in enumerate(await about(self.ranker, plan, windows, pool.known)):
                pool.add(wi, focus, ABOUT_WEIGHT)
        return pool

    async def _fed_back(
        self, plan: QueryPlan, pool: _Pool, where: RowFilter, *, limit: int, mode: SearchMode
    ) -> None:
        """Add to the whole history's rankings the question moved towards its best hits so far:
        by vector (`FEEDBACK_WEIGHT`) and, in a hybrid search, by words
        (`LEXICAL_FEEDBACK_WEIGHT`)."""
        if mode != "lexical":
            fed = await feedback(
                self.ranker,
                plan.text,
                pool.ranked[0],
                weights=pool.weights[0],
                where=where,
                limit=limit,
            )
            if fed is not None:
                pool.add(0, [fed], FEEDBACK_WEIGHT)
        if mode == "hybrid" and LEXICAL_FEEDBACK_WEIGHT > 0:
            worded = await lexical_feedback(
                self.ranker,
                plan.text,
                pool.ranked[0],
                weights=pool.weights[0],
                where=where,
                limit=limit,
                known=pool.known,
            )
            if worded is not None:
                pool.add(0, [worded], LEXICAL_FEEDBACK_WEIGHT)

    async def _hops(
        self, plan: QueryPlan, pool: _Pool, where: RowFilter, *, mode: SearchMode
    ) -> _Hops:
        """The first hop's best hits; with two hops (not in a vector search), the rankings of
        the bridge names they mention join the whole history's (`HOP_WEIGHT`)."""
        hops = _Hops(first=combine(pool.ranked[0], HOP_SEEDS, pool.weights[0]))
        if self.hops > 1 and mode != "vector":
            found, hops.chains = await second_hop(self.ranker, plan, hops.first, where)
            pool.add(0, found, HOP_WEIGHT)
            # Items a bridge name found say so (meta "via"): recall keeps them although they
            # may share no word with the question.
            for name, scores in zip(hops.chains, found, strict=True):
                for rowid in scores:
                    hops.via.setdefault(rowid, {"via": name})
        return hops

    async def _whole_history(
        self, plan: QueryPlan, pool: _Pool, hops: _Hops, *, k: int, want: int
    ) -> list[tuple[int, float]]:
        """The whole history's `want` best, each line once: the first hop's best hits keep
        their places; what follows (the second hop's finds among it) is re-ranked by facets."""
        kept = {r for r, _ in hops.first}
        # Room for the repeated lines `distinct` drops.
        ranked = combine(pool.ranked[0], 2 * max(k, FACET_POOL) + len(hops.first), pool.weights[0])
        rest = await by_facets(
            self.ranker, plan, [(r, s) for r, s in ranked if r not in kept], hops.chains, pool.known
        )
        return await distinct(self.ranker, hops.first + rest, want, pool.known)

    async def _window_first(
        self, pool: _Pool, base: list[tuple[int, float]], event: int | None, *, k: int, want: int
    ) -> list[tuple[int, float]]:
        """What the time window holds first, then the rest of `base`, each line once."""
        inside = [(r, s) for r, s in combine(pool.ranked[1], 2 * k, pool.weights[1]) if r != event]
        if event is not None:
            # "What did X do after Y?" joins Y to what followed: the event itself comes second.
            inside = [*inside[:1], (event, inside[0][1] if inside else 0.0), *inside[1:]]
        seen = {r for r, _ in inside}
        return await distinct(
            self.ranker, inside + [(r, s) for r, s in base if r not in seen], want, pool.known
        )

    async def similarities(self, question: str, items: Sequence[MemoryItem]) -> dict[str, float]:
        """Each item's vector similarity to `question`, by item id ({} without vectors)."""
        if not items or self.embedder.dim == 0 or self.matrix.vector_count == 0:
            return {}
        rowids = {
            uid: p.rowid for uid, p in (await self.reads.parts([i.id for i in items])).items()
        }
        vectors = self.matrix.vectors(list(rowids.values()))
        found = await self.query_vectors([question])
        if found is None:
            return {}
        return {uid: float(vectors[r] @ found[0]) for uid, r in rowids.items() if r in vectors}

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
        weight = await facet_weights(self.ranker, asked) if asked else {}
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
        stored = await self.reads.parts(uids)
        rowid = {uid: p.rowid for uid, p in stored.items()}
        said = {uid: set(p.message_ids) for uid, p in stored.items()}
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
        rows = {uid: (m.rowid, m.text) for uid, m in (await self.reads.texts_of(wanted)).items()}
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
        where = self.ranker.where(kinds, False, None, None)
        rows = len(self.matrix)
        [rowids] = await self.db.run(
            lambda conn: self.lexical.search(
                conn, [text], limit=20, rows=rows, where=where, rows_in=self.matrix
            )
        )
        if self.embedder.dim > 0:
            vec_hits = self.matrix.nearest((await self.query_vectors([text]))[0], 10, kinds=kinds)  # type: ignore[index]
            rowids = list(dict.fromkeys([*rowids, *(r for r, _ in vec_hits)]))
        items = await self.ranker.items([(r, 0.0) for r in rowids])
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
