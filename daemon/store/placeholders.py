"""A statement's placeholders as psycopg reads them: the one change PostgreSQL's text gets.

The store's statements are written once where SQLite and PostgreSQL read them alike and per
dialect where they differ (daemon/store/*.py), with SQLite's placeholders: `?` and `:name`.
psycopg wants `%s` and `%(name)s`, and reads every `%` in the text as the start of one. So
before a statement goes to PostgreSQL, `to_psycopg` walks it once, character by character,
and changes exactly that: a `?` (or, with named parameters, a `:name`) outside quoted text
and comments becomes psycopg's placeholder, and every `%` is doubled (in literals and
comments too: psycopg reads the whole text). Nothing else of the statement changes.

A statement in SQLite's own syntax (`INSERT OR …`, `REPLACE INTO`, `PRAGMA`, `BEGIN
IMMEDIATE`, an FTS5 `MATCH`) has no PostgreSQL meaning: it is refused (`SqliteOnly`) with the
statement named, never rewritten — a bug to fix where the statement is written.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from daemon.errors import ReverieError

_CACHE_MAX = 2048
# Statement openings only SQLite reads (checked on the first words, upper-cased).
_SQLITE_ONLY_HEADS = (
    ("INSERT", "OR"),
    ("REPLACE", "INTO"),
    ("PRAGMA",),
    ("BEGIN", "IMMEDIATE"),
    ("BEGIN", "DEFERRED"),
    ("BEGIN", "EXCLUSIVE"),
)
# `MATCH` after these is a foreign key's clause, which PostgreSQL reads.
_KEY_MATCH = frozenset({"FULL", "PARTIAL", "SIMPLE"})


class SqliteOnly(ReverieError):
    """A statement in SQLite's own syntax was sent to PostgreSQL: a bug to fix where it is
    written (write it in SQL both read, or per dialect)."""


def is_named(params: object) -> bool:
    """Whether parameters are given by name (`:name` placeholders)."""
    return isinstance(params, Mapping)


def to_psycopg(sql: str, *, named: bool = False) -> str:
    """`sql` with its placeholders in psycopg's form and every `%` escaped; nothing else changed.

    `?` becomes `%s`; with `named`, `:name` becomes `%(name)s` (a `::` cast and a `:` after a
    word or digit stay). Raises `SqliteOnly` naming the statement when it is SQLite's own.
    """
    return _cached(sql, named)


@functools.lru_cache(maxsize=_CACHE_MAX)
def _cached(sql: str, named: bool) -> str:
    out, words = _scan(sql, named)
    _refuse_sqlite_only(sql, words)
    return out


def _scan(sql: str, named: bool) -> tuple[str, list[str]]:
    """Walk `sql` once: (the psycopg text, the words outside quotes and comments, upper-cased)."""
    out: list[str] = []
    words: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            end = _quoted_end(sql, i, c)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "$" and (end := _dollar_end(sql, i)) > i:
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "?":
            out.append("%s")
            i += 1
        elif c == ":":
            i = _colon(sql, i, named, out)
        elif c == "%":
            out.append("%%")
            i += 1
        elif c.isalpha() or c == "_":
            end = i + 1
            while end < n and (sql[end].isalnum() or sql[end] in "_$"):
                end += 1
            word = sql[i:end]
            words.append(word.upper())
            out.append(word)
            i = end
            if word in ("E", "e") and i < n and sql[i] == "'":
                # An escape string: a backslash keeps the next character inside.
                end = _escaped_end(sql, i)
                out.append(sql[i:end].replace("%", "%%"))
                i = end
        else:
            out.append(c)
            i += 1
    return "".join(out), words


def _quoted_end(sql: str, start: int, quote: str) -> int:
    """The index after the quoted text opening at `start` (a doubled quote stays inside)."""
    i = start + 1
    n = len(sql)
    while i < n:
        if sql[i] == quote:
            if i + 1 < n and sql[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    return n


def _escaped_end(sql: str, start: int) -> int:
    """The index after the escape string (`E'…'`) whose quote opens at `start`."""
    i = start + 1
    n = len(sql)
    while i < n:
        if sql[i] == "\\":
            i += 2
        elif sql[i] == "'":
            if i + 1 < n and sql[i + 1] == "'":
                i += 2
                continue
            return i + 1
        else:
            i += 1
    return n


def _dollar_end(sql: str, start: int) -> int:
    """The index after a dollar-quoted string (`$tag$…$tag$`) opening at `start`; `start`
    itself when none opens there."""
    close = sql.find("$", start + 1)
    if close < 0:
        return start
    tag = sql[start : close + 1]
    if not all(ch.isalnum() or ch == "_" for ch in tag[1:-1]) or tag[1:2].isdigit():
        return start
    end = sql.find(tag, close + 1)
    return len(sql) if end < 0 else end + len(tag)


def _colon(sql: str, i: int, named: bool, out: list[str]) -> int:
    """Copy the `:` at `i` (a cast's `::` whole) or its `:name` as psycopg's; return the next index."""
    n = len(sql)
    if i + 1 < n and sql[i + 1] == ":":
        out.append("::")
        return i + 2
    after_word = i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_")
    if named and not after_word and i + 1 < n and (sql[i + 1].isalpha() or sql[i + 1] == "_"):
        end = i + 2
        while end < n and (sql[end].isalnum() or sql[end] == "_"):
            end += 1
        out.append(f"%({sql[i + 1 : end]})s")
        return end
    out.append(":")
    return i + 1


def _refuse_sqlite_only(sql: str, words: list[str]) -> None:
    for head in _SQLITE_ONLY_HEADS:
        if tuple(words[: len(head)]) == head:
            raise SqliteOnly(
                f"{' '.join(head)} is SQLite's own syntax, sent to PostgreSQL: {_brief(sql)}"
            )
    for at, word in enumerate(words):
        if word == "MATCH" and (at + 1 == len(words) or words[at + 1] not in _KEY_MATCH):
            raise SqliteOnly(f"an FTS5 MATCH has no PostgreSQL form: {_brief(sql)}")


def _brief(sql: str) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= 160 else text[:157] + "..."
