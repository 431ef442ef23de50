"""Lexical search over FTS5 (or PostgreSQL's tsvector): BM25 on the terms that discriminate, within a row budget.

FTS5 must score every row a MATCH selects before it can order them by bm25 (about 1 µs a
row), so an OR of words found in half the history — a speaker's name on every chunk, a
year, "work" — cost 50-150 ms at 100k memories, and a join to `memories` before the LIMIT
doubled it. Here each term's document frequency is counted once (cached; it drifts slowly)
and the rarest terms are kept until the rows they can select reach a budget: the dropped
terms have the lowest IDF, so they would have moved BM25 least. When every term is that
common, their conjunction is searched instead. Rows are filtered by kind and time inside
SQL only when such a filter is asked for; the retired flag comes from the in-memory matrix
after the LIMIT. All of it runs on the database thread, several queries per hop; the
full-text index's own SQL, FTS5's and PostgreSQL's, is `daemon.store.fulltext`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from daemon.memory.query import match_terms
from daemon.memory.rows import iso
from daemon.store.fulltext import FullText, PgFullText, TextFilter, tsquery

__all__ = ["LexicalSearcher", "PgLexicalSearcher", "RowFilter", "lexical_searcher", "tsquery"]

# Rows BM25 may be asked to score for one query (a few ms on a busy small machine).
LEXICAL_BUDGET = 4000
# A secondary query (an entity, a clause) whose every term is in more than this share of
# memories identifies nothing: "Caroline" in a history of Caroline's conversations.
COMMON_SHARE = 0.05
# Document frequencies below this are re-counted after every write (cheap for rare terms).
RECOUNT_BELOW = 500
# A filter letting at least this share of rows through is checked on the best full-text hits
# in Python (`RowCheck`) rather than joined in SQL.
WIDE_SHARE = 0.5


@dataclass(frozen=True, kw_only=True)
class RowFilter:
    """Which memories a search may return."""

    kinds: tuple[str, ...] | None = None
    include_retired: bool = False
    after: datetime | None = None
    before: datetime | None = None


class RowCheck(Protocol):
    """What the vector matrix knows of every row: whether it passes a filter, kinds' shares."""

    def allowed(self, rowids: list[int], where: RowFilter) -> list[bool]: ...

    def kind_share(self, kinds: Collection[str]) -> float: ...


class LexicalSearcher:
    """Choose terms by document frequency and run bounded BM25 searches (database thread only)."""

    def __init__(self, *, budget: int = LEXICAL_BUDGET, text: FullText | None = None) -> None:
        self.budget = budget
        self.text = text or FullText()
        # phrase -> (document frequency, the index generation it was counted at)
        self._df: dict[str, tuple[int, int]] = {}
        self._df_rows = 0

    def forget(self) -> None:
        """Drop the cached document frequencies (after a clear or reindex)."""
        self._df.clear()
        self._df_rows = 0

    def doc_freqs(
        self, conn: Any, phrases: Collection[str], rows: int, generation: int = 0
    ) -> dict[str, int]:
        """Return the number of memories each FTS phrase matches.

        A common term's count drifts slowly, so it is cached until the index grows 10%.
        A rare term's count is cheap to take and matters exactly (a fact remembered a
        moment ago must be findable by its one new word), so it is re-counted whenever the
        index has changed since it was counted.
        """
        if abs(rows - self._df_rows) > 0.1 * self._df_rows + 50:
            self._df.clear()
            self._df_rows = rows
        out: dict[str, int] = {}
        for p in phrases:
            cached = self._df.get(p)
            if cached is None or (cached[1] != generation and cached[0] < RECOUNT_BELOW):
                count = self.text.count(conn, p)
                cached = (count, generation)
                self._df[p] = cached
            out[p] = cached[0]
        return out

    def match(self, phrases: Sequence[str], df: dict[str, int]) -> str | None:
        """Build the MATCH expression for one query: the rarest terms within the budget."""
        present = [p for p in phrases if df.get(p, 0) > 0]
        if not present:
            return None
        if sum(df[p] for p in present) <= self.budget:
            return " OR ".join(present)
        chosen, spent = [], 0
        for p in sorted(present, key=lambda p: df[p]):
            if spent + df[p] > self.budget:
                break
            chosen.append(p)
            spent += df[p]
        if chosen:
            return " OR ".join(p for p in present if p in chosen)
        plain = [p for p in present if not p.endswith("*")]
        return " AND ".join(plain) if len(plain) > 1 else None

    def informative(self, query: str, df: dict[str, int], rows: int) -> bool:
        """Say whether any term of `query` is rare enough to identify something."""
        return any(0 < df.get(p, 0) <= max(COMMON_SHARE * rows, 5) for p in match_terms(query))

    def search(
        self,
        conn: Any,
        queries: Sequence[str],
        *,
        limit: int,
        rows: int,
        where: RowFilter,
        rows_in: RowCheck,
        generation: int = 0,
    ) -> list[list[int]]:
        """Return, per query, up to `limit` rowids best first (runs on the database thread)."""
        phrases = {p: None for q in queries for p in match_terms(q)}
        df = self.doc_freqs(conn, phrases, rows, generation)
        out: list[list[int]] = []
        for q in queries:
            expr = self.match(match_terms(q), df)
            out.append(self._run(conn, expr, limit, where, rows_in) if expr else [])
        return out

    def _run(
        self, conn: Any, expr: str, limit: int, where: RowFilter, rows_in: RowCheck
    ) -> list[int]:
        """BM25 over the full-text index alone, filtered by `rows_in`, when the filter lets most
        rows through; else (or when too few of the best pass) joined with `memories` in SQL.

        Joining every match with its row costs ~2x a plain full-text ranking; automatic recall,
        whose kinds filter leaves out only month and journal entries, runs it every turn.
        """
        wide = (
            where.after is None
            and where.before is None
            and (not where.kinds or rows_in.kind_share(where.kinds) >= WIDE_SHARE)
        )
        if wide:
            margin = limit + 16
            got = self.text.ranked(conn, expr, margin)
            if where.include_retired and not where.kinds:
                return got[:limit]
            kept = [r for r, ok in zip(got, rows_in.allowed(got, where), strict=True) if ok]
            if len(kept) >= limit or len(got) < margin:
                return kept[:limit]
        return self.text.joined(
            conn,
            expr,
            limit,
            TextFilter(
                kinds=where.kinds,
                include_retired=where.include_retired,
                after=iso(where.after) if where.after is not None else None,
                before=iso(where.before) if where.before is not None else None,
            ),
        )

    def matching(self, conn: Any, expr: str, *, kind: str, limit: int) -> list[tuple[Any, str]]:
        """(session id, text) of the best `limit` memories of `kind` matching `expr`, unbounded."""
        return [
            (r.session_id, r.text) for r in self.text.matching(conn, expr, kind=kind, limit=limit)
        ]


class PgLexicalSearcher(LexicalSearcher):
    """The same bounded search over PostgreSQL's tsvector column and its GIN index.

    A term's document frequency is a GIN count; ranking is `ts_rank` over the best matches.
    """

    def __init__(self, *, budget: int = LEXICAL_BUDGET) -> None:
        super().__init__(budget=budget, text=PgFullText())


def lexical_searcher(db: Any) -> LexicalSearcher:
    """The full-text searcher of `db`'s backend (FTS5 on SQLite, tsvector on PostgreSQL)."""
    return PgLexicalSearcher() if getattr(db, "is_postgres", False) else LexicalSearcher()
