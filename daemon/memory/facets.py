"""Facet coverage and repeats: how much of a question an item speaks of, and each line once.

A question joins facets ("what did X do after moving to Y?"); among near-equal items, one that
speaks of several of them beats one that repeats a single word. Each facet counts by how rare
its word is in memory. A line said often is shown once, at its best place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from daemon.memory.query import QueryPlan, terms
from daemon.memory.ranking import Known, Ranker, stems_of, undated
from daemon.memory.text import stem

# Facet coverage: the share of the question's words an item has boosts its fused score.
FACET_WEIGHT = 0.6


async def facet_weights(ranker: Ranker, asked: Sequence[str]) -> dict[str, float]:
    """Each question word's stem weighted by its IDF in memory.

    A name on half the memories (a speaker's) covers little; a word few memories use
    ("brother", "hobby") says the item speaks of what was asked.
    """
    rows = len(ranker.matrix)
    phrases = {w: '"' + w.replace('"', "") + '"' for w in asked}
    df: dict[str, int] = await ranker.db.run(
        lambda conn: ranker.lexical.doc_freqs(
            conn, phrases.values(), rows, ranker.matrix.generation
        )
    )
    weight: dict[str, float] = {}
    for w, phrase in phrases.items():
        idf = math.log(1.0 + (rows + 1.0) / (1.0 + df.get(phrase, 0)))
        weight[stem(w)] = max(weight.get(stem(w), 0.0), idf)
    return weight


async def by_facets(
    ranker: Ranker,
    plan: QueryPlan,
    scored: list[tuple[int, float]],
    chains: dict[str, str] | None = None,
    known: Known | None = None,
) -> list[tuple[int, float]]:
    """Re-rank so that items covering more of the question's words rise among near-equals.

    `chains` maps a second-hop bridge name to the first-hop text it came from: an item naming
    the bridge covers what that text covers ("Tomas" stands for "my brother … medical school").
    """
    asked = terms(plan.text)
    facets = {stem(w) for w in asked}
    if FACET_WEIGHT <= 0 or len(facets) < 2 or not scored:
        return scored
    found = await ranker.texts([r for r, _ in scored], known)
    texts = {r: f"{title} {text}" for r, (title, text) in found.items()}
    weight = await facet_weights(ranker, asked)
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


async def distinct(
    ranker: Ranker, scored: list[tuple[int, float]], k: int, known: Known | None = None
) -> list[tuple[int, float]]:
    """The first `k` results, each text once: a line someone says often ("we had friends
    over for dinner") is shown at its best place, not at every date it was said."""
    if len(scored) <= 1:
        return scored[:k]
    found = await ranker.texts([r for r, _ in scored], known)
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
