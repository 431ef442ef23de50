"""The memories' full-text index: FTS5 on SQLite, a tsvector column under GIN on PostgreSQL.

The two differ too much to write once, so each has its own SQL here,
behind one set of calls: a phrase's document count, the best matches by rank alone, the best
matches joined with `memories` to filter them, and a kind's best matches with their text.
Expressions are FTS5's, as `daemon.memory.query.match_terms` builds them (`"w"`, `"a b"`,
`"pre"*` joined by OR / AND); on PostgreSQL `tsquery` turns them into `to_tsquery` text.
Which terms to search and within what budget is `daemon.memory.lexical`'s choice.

Every call runs on the database thread, with its connection (`Database.run`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# PostgreSQL's text search configuration: English stemming, as FTS5's porter tokenizer.
TS_CONFIG = "english"
# bm25's column weights (title, text, tags): the title counts twice.
_BM25 = "bm25(memories_fts, 2.0, 1.0, 1.0)"
# ts_rank's weights for D, C, B, A: the title (A) counts 2.5 times the text and tags (B), as
# bm25's 2.0 does on SQLite.
_TS_RANK = "ts_rank('{0.1, 0.2, 0.4, 1.0}', m.fts, to_tsquery('english', ?))"
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, kw_only=True)
class TextFilter:
    """Which memories a joined search keeps (times ISO, UTC, as the rows store them)."""

    kinds: tuple[str, ...] | None = None
    include_retired: bool = False
    after: str | None = None  # valid time at or after
    before: str | None = None  # valid time before


@dataclass(frozen=True)
class SessionText:
    """A memory's session and text (`FullText.matching`)."""

    session_id: str | None
    text: str


def tsquery(expr: str) -> str:
    """Turn an FTS5 expression of `match_terms` phrases into `to_tsquery` text.

    `"w"` is a word, `"a b"` a phrase (`a <-> b`), `"pre"*` a prefix (`pre:*`); `OR` and
    `AND` join them. Only word characters reach the query, so no input can change its shape.
    """
    out: list[str] = []
    for token in re.findall(r'"[^"]*"\*?|\bOR\b|\bAND\b', expr):
        if token in ("OR", "AND"):
            out.append("|" if token == "OR" else "&")
            continue
        words = _WORD.findall(token.rstrip("*").strip('"').lower())
        if not words:
            continue
        if token.endswith("*"):
            words[-1] += ":*"
        if out and out[-1] not in ("|", "&"):
            out.append("|")
        out.append(words[0] if len(words) == 1 else "(" + " <-> ".join(words) + ")")
    while out and out[-1] in ("|", "&"):
        out.pop()
    return " ".join(out)


class FullText:
    """FTS5's `memories_fts` (external content, kept in step with `memories` by triggers)."""

    _joined_from = (
        "SELECT m.rowid FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid"
    )
    _order = _BM25
    _plain_order = "bm25(memories_fts)"

    def count(self, conn: Any, phrase: str) -> int:
        """How many memories `phrase` matches."""
        sql = "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?"
        return int(conn.execute(sql, (phrase,)).fetchone()[0])

    def ranked(self, conn: Any, expr: str, limit: int) -> list[int]:
        """The rowids of the best `limit` matches of `expr`, best first, unfiltered."""
        sql = f"SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY {_BM25} LIMIT ?"
        return [int(r[0]) for r in conn.execute(sql, (expr, limit)).fetchall()]

    def joined(self, conn: Any, expr: str, limit: int, where: TextFilter) -> list[int]:
        """The rowids of the best `limit` matches of `expr` among the memories `where` keeps."""
        clauses, params = self._match_clause(expr)
        if where.kinds:
            clauses.append(f"m.kind IN ({','.join('?' * len(where.kinds))})")
            params.extend(where.kinds)
        if not where.include_retired:
            clauses.append("m.retired_at IS NULL")
        if where.after is not None:
            clauses.append("coalesce(m.valid_from, m.created_at) >= ?")
            params.append(where.after)
        if where.before is not None:
            clauses.append("coalesce(m.valid_from, m.created_at) < ?")
            params.append(where.before)
        sql = f"{self._joined_from} WHERE {' AND '.join(clauses)} ORDER BY {self._order} LIMIT ?"
        args = (*params, *self._order_params(expr), limit)
        return [int(r[0]) for r in conn.execute(sql, args).fetchall()]

    def matching(self, conn: Any, expr: str, *, kind: str, limit: int) -> list[SessionText]:
        """Session and text of the best `limit` memories of `kind` matching `expr`, retired too."""
        clauses, params = self._match_clause(expr)
        sql = (
            self._joined_from.replace("SELECT m.rowid", "SELECT m.session_id, m.text")
            + f" WHERE {' AND '.join(clauses)} AND m.kind = ? ORDER BY {self._plain_order} LIMIT ?"
        )
        args = (*params, kind, *self._order_params(expr), limit)
        return [SessionText(r[0], str(r[1])) for r in conn.execute(sql, args).fetchall()]

    def _match_clause(self, expr: str) -> tuple[list[str], list[Any]]:
        return ["memories_fts MATCH ?"], [expr]

    def _order_params(self, expr: str) -> Sequence[Any]:
        return ()


class PgFullText(FullText):
    """PostgreSQL's generated `memories.fts` tsvector under its GIN index; `ts_rank` ranks."""

    _joined_from = "SELECT m.rowid FROM memories m"
    _order = f"{_TS_RANK} DESC, m.rowid DESC"
    _plain_order = _order

    def count(self, conn: Any, phrase: str) -> int:
        q = tsquery(phrase)
        if not q:
            return 0
        sql = f"SELECT count(*) FROM memories WHERE fts @@ to_tsquery('{TS_CONFIG}', ?)"
        return int(conn.execute(sql, (q,)).fetchone()[0])

    def ranked(self, conn: Any, expr: str, limit: int) -> list[int]:
        q = tsquery(expr)
        if not q:
            return []
        sql = (
            f"SELECT m.rowid FROM memories m WHERE m.fts @@ to_tsquery('{TS_CONFIG}', ?) "
            f"ORDER BY {self._order} LIMIT ?"
        )
        return [int(r[0]) for r in conn.execute(sql, (q, q, limit)).fetchall()]

    def _match_clause(self, expr: str) -> tuple[list[str], list[Any]]:
        return [f"m.fts @@ to_tsquery('{TS_CONFIG}', ?)"], [tsquery(expr)]

    def _order_params(self, expr: str) -> Sequence[Any]:
        return (tsquery(expr),)


def full_text(is_postgres: bool) -> FullText:
    """The full-text index of a backend."""
    return PgFullText() if is_postgres else FullText()
