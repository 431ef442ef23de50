"""SQLite's SQL as PostgreSQL reads it: the one place the two dialects meet.

The daemon's queries are written once, in the SQLite dialect the embedded store speaks.
On PostgreSQL each statement passes through `to_postgres` (cached per text) before it is
sent: `?` and `:name` become psycopg placeholders, `INSERT OR IGNORE` and `INSERT OR
REPLACE` become `ON CONFLICT` clauses, `IS ?` becomes `IS NOT DISTINCT FROM`, `LIKE` keeps
SQLite's case-insensitive meaning, and `BEGIN IMMEDIATE` is a plain `BEGIN` (PostgreSQL's
row locks do what SQLite's write lock did). Scalar `max(a, b)`/`min(a, b)`, `sum` of a
condition and `sqlite_master` are given to PostgreSQL as functions and a view by its first
migration, so those statements pass unchanged. Full-text search and vectors differ too much
to translate: they have their own code (daemon.memory.lexical, daemon.memory.matrix).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

# Text outside literals and identifiers is rewritten; quoted text is left alone.
_SEGMENTS = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/)", re.S)
_PLACEHOLDER = re.compile(r"\?|(?<![:\w]):([A-Za-z_]\w*)")
_BEGIN = re.compile(r"^\s*BEGIN\s+(IMMEDIATE|DEFERRED|EXCLUSIVE)\b", re.I)
_IS_PARAM = re.compile(r"\bIS\s+(NOT\s+)?\?", re.I)
_LIKE = re.compile(r"(?<![\w.])LIKE\b", re.I)
_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.I)
_OR_REPLACE = re.compile(r"^\s*INSERT\s+OR\s+REPLACE\s+INTO\s+(\w+)\s*\(([^)]*)\)", re.I)
_INSERT_INTO = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)", re.I)

_CACHE_MAX = 2048


class Untranslatable(Exception):
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
    ) -> None:
        self._primary_keys = primary_keys
        self._identity = identity
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
        body = _BEGIN.sub("BEGIN", body)
        return _rewrite_code(body, named) + suffix, returning


def _rewrite_code(sql: str, named: bool) -> str:
    """Rewrite placeholders and SQLite-only operators outside quoted text; escape every `%`."""
    out: list[str] = []
    for i, part in enumerate(_SEGMENTS.split(sql)):
        # psycopg reads `%` in the whole statement, literals included.
        part = part.replace("%", "%%")
        if i % 2 == 0:
            part = _IS_PARAM.sub(
                lambda m: "IS DISTINCT FROM ?" if m.group(1) else "IS NOT DISTINCT FROM ?", part
            )
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
