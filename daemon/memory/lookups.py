"""Lexical lookups made after a search, against the index as that search left it.

Automatic recall's later-word lookups (`daemon.memory.newest`) and the mention links' passages
(`daemon.memory.links`) follow a search of the same turn, which has just brought the vector
matrix (and with it the index's generation) up to date. Each lookup used to be a search of
its own — a refresh, one trip to the database thread, one read of the rows it kept — up to
ten a turn. Here the lookups of one step go to the database thread together, every BM25
ranking of them in that one trip, and the rows they keep are read in one statement; nothing
is refreshed (the caller's search did). Each lookup still finds, in the same order and with
the same scores, what `MemorySearch.search(query, k=k, kinds=kinds, mode="lexical",
after=after)` finds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from daemon.memory.api import MemoryItem
from daemon.memory.lexical import LexicalSearcher, RowFilter
from daemon.memory.ranking import CANDIDATES, Ranker, combine, item_of
from daemon.store.db import Database
from daemon.store.memory_reads import MemoryReads


class Searched(Protocol):
    """What the lookups read of a search (`MemorySearch`): its store, full-text searcher,
    matrix (row count, generation, row filters) and ranker (the fusion a search applies)."""

    db: Database
    lexical: LexicalSearcher
    matrix: Any
    ranker: Ranker


@dataclass(frozen=True, kw_only=True)
class Lookup:
    """One BM25 lookup: the `k` best memories of `kinds` for `query`, written `after` a time."""

    query: str
    k: int
    kinds: tuple[str, ...] = ("chunk",)
    after: datetime | None = None
    include_retired: bool = False


async def lexical_lookups(search: Searched, lookups: Sequence[Lookup]) -> list[list[MemoryItem]]:
    """Per lookup, its best memories first with their scores, in one trip."""
    wanted = [n for n, lk in enumerate(lookups) if lk.query.strip() and lk.k > 0]
    if not wanted:
        return [[] for _ in lookups]
    matrix, lexical = search.matrix, search.lexical

    def rank(conn: Any) -> list[list[int]]:
        rows, generation = len(matrix), matrix.generation
        out: list[list[int]] = []
        for n in wanted:
            lk = lookups[n]
            where = RowFilter(
                kinds=lk.kinds or None, include_retired=lk.include_retired, after=lk.after
            )
            [found] = lexical.search(
                conn,
                [lk.query],
                limit=max(CANDIDATES, 3 * lk.k),
                rows=rows,
                where=where,
                rows_in=matrix,
                generation=generation,
            )
            out.append(found)
        return out

    # Fused as a search fuses a lexical ranking alone (recency, explicitness, importance).
    scored = [
        combine([search.ranker.fuse(found, [])], lookups[n].k)
        for n, found in zip(wanted, await search.db.run(rank), strict=True)
    ]
    rows = await MemoryReads(search.db).rows(list(dict.fromkeys(r for s in scored for r, _ in s)))
    out: list[list[MemoryItem]] = [[] for _ in lookups]
    for n, best in zip(wanted, scored, strict=True):
        out[n] = [item_of(rows[r], score) for r, score in best if r in rows]
    return out
