"""SQLite's SQL as PostgreSQL reads it: the one place the two dialects meet.

The daemon's queries are written once, in the SQLite dialect the embedded store speaks.
On PostgreSQL each statement passes through `to_postgres` (cached per text) before it is
sent: `?` and `:name` become psycopg placeholders, `INSERT OR IGNORE` and `INSERT OR
REPLACE` become `ON CONFLICT` clauses, `IS x` becomes `IS NOT DISTINCT FROM x`, `LIKE` keeps
SQLite's case-insensitive meaning, and `BEGIN IMMEDIATE` is a plain `BEGIN` (PostgreSQL's
row locks do what SQLite's write lock did). Scalar `max(a, b)`/`min(a, b)`, `sum` of a
condition and `sqlite_master` are given to PostgreSQL as functions and a view by its first
migration, so those statements pass unchanged. Full-text search and vectors differ too much
to translate: they have their own code (daemon.store.fulltext, daemon.store.vector_index).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from daemon.errors import ReverieError

# Text outside literals and identifiers is rewritten; quoted text is left alone.
_SEGMENTS = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/)", re.S)
_PLACEHOLDER = re.compile(r"\?|(?<![:\w]):([A-Za-z_]\w*)")
_BEGIN = re.compile(r"^\s*BEGIN\s+(IMMEDIATE|DEFERRED|EXCLUSIVE)\b", re.I)
# SQLite's `a IS b` / `a IS NOT b` compare any values, NULL included.
_IS_NOT = re.compile(r"\bIS\s+NOT\s+(?!NULL\b|TRUE\b|FALSE\b|DISTINCT\b)", re.I)
_IS = re.compile(r"\bIS\s+(?!NOT\b|NULL\b|TRUE\b|FALSE\b|DISTINCT\b)", re.I)
# A parameter's type comes from what it is compared with; `? IS NULL` compares it with nothing.
_PARAM_IS_NULL = re.compile(r"(\?|(?<![:\w]):[A-Za-z_]\w*)(\s+IS\s+(?:NOT\s+)?NULL\b)", re.I)
_LIKE = re.compile(r"(?<![\w.])LIKE\b", re.I)
_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.I)
_OR_REPLACE = re.compile(r"^\s*INSERT\s+OR\s+REPLACE\s+INTO\s+([\w.]+)\s*\(([^)]*)\)", re.I)
_INSERT_INTO = re.compile(r"^\s*INSERT\s+INTO\s+([\w.]+)", re.I)

_CACHE_MAX = 2048


class Untranslatable(ReverieError):
    """A statement with no PostgreSQL meaning (a PRAGMA, an FTS5 MATCH): a bug to fix in its caller."""


class Translator:
    """Turn SQLite statements into PostgreSQL ones, given the schema's primary keys.

    `primary_keys(table)` names a table's key columns (for `INSERT OR REPLACE`);
    `identity(table)` names its generated integer key, if any (so an insert can report
    `lastrowid` through `RETURNING`).
    """

    def __init__(
        self,
        primary_keys: Callable[[str], tuple[str, ...]],
        identity: Callable[[str], str | None],
        columns: Callable[[str], frozenset[str]],
    ) -> None:
        self._primary_keys = primary_keys
        self._identity = identity
        self._columns = columns
        self._cache: dict[tuple[str, bool], tuple[str, str | None]] = {}

    def __call__(self, sql: str, *, named: bool = False) -> tuple[str, str | None]:
        """Return (PostgreSQL statement, the identity column it returns or None)."""
        key = (sql, named)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._translate(sql, named)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def _translate(self, sql: str, named: bool) -> tuple[str, str | None]:
        head = sql.lstrip()[:16].upper()
        if head.startswith("PRAGMA"):
            raise Untranslatable(f"PRAGMA is SQLite's own: {sql.strip()[:80]}")
        if "MATCH" in sql.upper() and re.search(r"\b\w*fts\w*\s+MATCH\b", sql, re.I):
            raise Untranslatable(f"an FTS5 MATCH has no PostgreSQL form: {sql.strip()[:80]}")
        suffix = ""
        returning: str | None = None
        body = sql.rstrip().rstrip(";")
        if _OR_IGNORE.match(body):
            body = _OR_IGNORE.sub("INSERT INTO", body, count=1)
            suffix = " ON CONFLICT DO NOTHING"
        elif m := _OR_REPLACE.match(body):
            table, cols = m.group(1), [c.strip() for c in m.group(2).split(",")]
            keys = self._primary_keys(table)
            if not keys:
                raise Untranslatable(f"INSERT OR REPLACE into {table}, which has no primary key")
            update = [c for c in cols if c not in keys]
            body = re.sub(r"\s+OR\s+REPLACE", "", body, count=1, flags=re.I)
            sets = ", ".join(f"{c} = excluded.{c}" for c in update)
            suffix = f" ON CONFLICT ({', '.join(keys)}) " + (
                f"DO UPDATE SET {sets}" if sets else "DO NOTHING"
            )
        if (m := _INSERT_INTO.match(body)) and not re.search(r"\bRETURNING\b", body, re.I):
            returning = self._identity(m.group(1))
            if returning:
                suffix += f" RETURNING {returning}"
        if (m := _INSERT_INTO.match(body)) and (at := _DO_UPDATE.search(body)):
            head, tail = body[: at.end()], body[at.end() :]
            body = head + _qualify(tail, m.group(1), self._columns(m.group(1)))
        body = _BEGIN.sub("BEGIN", body)
        return _rewrite_code(body, named) + suffix, returning


_DO_UPDATE = re.compile(r"\bDO\s+UPDATE\s+SET\b", re.I)
_TOKEN = re.compile(r"[A-Za-z_][\w]*|\.|,|\(|\)|=")


def _qualify(tail: str, table: str, columns: frozenset[str]) -> str:
    """Name the table on a column read in `ON CONFLICT DO UPDATE SET …` (and its WHERE).

    SQLite reads a bare column there as the existing row's; PostgreSQL calls it ambiguous
    (it could be `excluded`'s). Assignment targets stay bare, as PostgreSQL requires.
    """
    out: list[str] = []
    expecting_target = True
    depth = 0
    for i, part in enumerate(_SEGMENTS.split(tail)):
        if i % 2:
            out.append(part)
            expecting_target = False
            continue
        pieces: list[str] = []
        last = 0
        prev = ""
        for m in _TOKEN.finditer(part):
            tok = m.group(0)
            pieces.append(part[last : m.start()])
            last = m.end()
            word = tok.lower()
            if tok == "(":
                depth += 1
            elif tok == ")":
                depth -= 1
            elif tok == "," and depth == 0:
                expecting_target = True
            elif word == "where" and depth == 0:
                expecting_target = False
            elif tok[0].isalpha() or tok[0] == "_":
                follows = part[m.end() :].lstrip()[:1]
                if expecting_target:
                    expecting_target = False
                elif word in columns and prev != "." and follows not in (".", "("):
                    tok = f"{table}.{tok}"
            pieces.append(tok)
            prev = tok
        pieces.append(part[last:])
        out.append("".join(pieces))
    return "".join(out)


def _rewrite_code(sql: str, named: bool) -> str:
    """Rewrite placeholders and SQLite-only operators outside quoted text; escape every `%`."""
    out: list[str] = []
    for i, part in enumerate(_SEGMENTS.split(sql)):
        # psycopg reads `%` in the whole statement, literals included.
        part = part.replace("%", "%%")
        if i % 2 == 0:
            part = _PARAM_IS_NULL.sub(r"CAST(\1 AS text)\2", part)
            part = _IS_NOT.sub("IS DISTINCT FROM ", part)
            part = _IS.sub("IS NOT DISTINCT FROM ", part)
            part = _LIKE.sub("ILIKE", part)
            part = _PLACEHOLDER.sub(
                lambda m: (
                    f"%({m.group(1)})s"
                    if m.group(1) and named
                    else ("%s" if m.group(0) == "?" else m.group(0))
                ),
                part,
            )
        out.append(part)
    return "".join(out)


def is_named(params: object) -> bool:
    """Whether parameters are given by name (`:name` placeholders)."""
    return isinstance(params, Mapping)
