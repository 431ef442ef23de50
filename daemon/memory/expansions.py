"""The rankings a plan search adds to its queries': about a person, fed back, second hop.

Each finds what the question's own words and vector miss, and is fused with the question's
rankings by `daemon.memory.search` (which weighs them):

- **about**: what the question asks of a named person, by vector, among the memories naming
  them;
- **feedback**: the question's vector moved towards its best hits, and the question with the
  words those hits share (pseudo-relevance feedback, by meaning and by words);
- **second hop**: the names the first hop's best hits mention and the question does not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import anyio
import numpy as np

from daemon.memory.lexical import RowFilter
from daemon.memory.query import QueryPlan, bridge_entities, terms, words
from daemon.memory.ranking import CANDIDATES, Known, Ranker, Ranking, combine, undated
from daemon.memory.text import stem

# What a question asks about a person is looked for among this many nearest memories.
ABOUT_POOL = 200
# The second hop: names in the first hop's best few hits become BM25 queries of their own.
HOP_QUERIES = 3
# Pseudo-relevance feedback: the question's vector moved towards its best few hits finds what
# they have in common with it ("what activities does Mel do?" → the pottery class found,
# swimming with the kids follows).
FEEDBACK_SEEDS = 3
# The same by words: the question with the rarest words its best few hits share among them
# ("what pets does Nate have?" + turtles, tank, dog), searched by BM25.
FEEDBACK_TERMS = 5
# A word only one hit uses would pull that hit up by its own words: two of them must share it.
FEEDBACK_MIN_SHARED = 2


async def about(
    ranker: Ranker, plan: QueryPlan, windows: Sequence[RowFilter], known: Known | None = None
) -> list[list[Ranking]]:
    """Per window, rankings for what the question asks about someone, among the memories
    naming them.

    "What might Priya do for a living?": the question said of "they", by vector, over the
    `ABOUT_POOL` nearest memories, keeping those whose text names the person. Her own
    words about her work ("I teach maths to fourteen-year-olds") share nothing with the
    question, and the name in its vector pulls towards every line that mentions her.
    """
    if not plan.about or ranker.embedder.dim == 0 or not ranker.matrix.vector_count:
        return [[] for _ in windows]
    vectors = await ranker.query_vectors([q for _, q in plan.about])
    if vectors is None:
        return [[] for _ in windows]
    # Masks and ranking in the worker thread: at 100k rows neither belongs on the event loop.
    near = await anyio.to_thread.run_sync(
        lambda: ranker.matrix.ranked(vectors, ranker.vector_masks(windows), ABOUT_POOL)
    )
    # Checked on the candidates' text (bounded), not by an FTS match of a name that may
    # be on half the index.
    names = [
        re.compile(r"(?<!\w)" + r"\W+".join(map(re.escape, words(e))) + r"(?!\w)", re.IGNORECASE)
        for e, _ in plan.about
    ]
    candidates = sorted({r for per_query in near for rowids in per_query for r in rowids})
    texts = {r: text for r, (_, text) in (await ranker.texts(candidates, known)).items()}
    kept = [
        [
            [r for r in rowids if name.search(texts.get(r, ""))]
            for name, rowids in zip(names, per_query, strict=True)
        ]
        for per_query in near
    ]
    return [[ranker.by_vector(rows) for rows in per_query] for per_query in kept]


async def feedback(
    ranker: Ranker,
    question: str,
    ranked: list[Ranking],
    *,
    weights: Sequence[float],
    where: RowFilter,
    limit: int,
) -> Ranking | None:
    """A vector ranking for the question moved towards its best hits so far (the centroid
    of `FEEDBACK_SEEDS` hits' vectors, weighted as the question); None without vectors."""
    if ranker.embedder.dim == 0 or not ranker.matrix.vector_count or not ranked:
        return None
    seeds = combine(ranked, FEEDBACK_SEEDS, weights)
    found = ranker.matrix.vectors([r for r, _ in seeds])
    if not found:
        return None
    asked = await ranker.query_vectors([question])
    if asked is None:
        return None
    centroid = np.mean(np.stack(list(found.values())), axis=0)
    moved = asked[0] / max(float(np.linalg.norm(asked[0])), 1e-9)
    moved = moved + centroid / max(float(np.linalg.norm(centroid)), 1e-9)
    moved = (moved / max(float(np.linalg.norm(moved)), 1e-9)).astype(np.float32)
    [[near]] = await anyio.to_thread.run_sync(
        lambda: ranker.matrix.ranked(moved, ranker.vector_masks([where]), limit)
    )
    return ranker.by_vector(near)


async def lexical_feedback(
    ranker: Ranker,
    question: str,
    ranked: list[Ranking],
    *,
    weights: Sequence[float],
    where: RowFilter,
    limit: int,
    known: Known | None = None,
) -> Ranking | None:
    """A BM25 ranking for the question and the words its best hits have in common.

    Of the words at least `FEEDBACK_MIN_SHARED` of the best `FEEDBACK_SEEDS` hits use and
    the question does not, the `FEEDBACK_TERMS` that most of them share and the fewest
    memories use: what the question is about, said the way the conversation says it. None
    when they share none.
    """
    seeds = combine(ranked, FEEDBACK_SEEDS, weights)
    if not seeds:
        return None
    texts = await ranker.texts([r for r, _ in seeds], known)
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
    rows = len(ranker.matrix)
    df: dict[str, int] = await ranker.db.run(
        lambda conn: ranker.lexical.doc_freqs(
            conn, {f'"{w}"': None for w in shared}, rows, ranker.matrix.generation
        )
    )

    def weight(w: str) -> float:
        return shared[w] * math.log((rows + 1) / (1 + df.get(f'"{w}"', 0)))

    chosen = sorted(shared, key=lambda w: (-weight(w), w))[:FEEDBACK_TERMS]
    [[fused]] = await ranker.rank_queries(
        [f"{question} {' '.join(chosen)}"],
        limit=limit,
        mode="lexical",
        windows=[where],
        drop_common=False,
    )
    return fused


async def second_hop(
    ranker: Ranker, plan: QueryPlan, first: list[tuple[int, float]], where: RowFilter
) -> tuple[list[Ranking], dict[str, str]]:
    """Rankings for the names the first hop's best hits mention and the question does not.

    "How is Maya's brother getting on at medical school?" finds "my brother Tomas got
    into medical school"; the answer ("Tomas complains about the anatomy exams") shares
    only "Tomas" with it. Bridges are searched by BM25 alone (no query vectors to embed).
    Returns the rankings and each bridge with the text it was found in.
    """
    seeds = await ranker.items(first)
    asked = {w.lower() for w in terms(plan.text)}
    bridges: dict[str, str] = {}
    for item in seeds:
        for name in bridge_entities(item.text):
            if not asked & {w.lower() for w in terms(name)}:
                bridges.setdefault(name, item.title + " " + item.text)
    if not bridges:
        return [], {}
    queries = list(bridges)[:HOP_QUERIES]
    [ranked] = await ranker.rank_queries(
        queries, limit=CANDIDATES, mode="lexical", windows=[where], drop_common=False
    )
    return ranked, {q: bridges[q] for q in queries}
