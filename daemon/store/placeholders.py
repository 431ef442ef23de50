"""A statement's placeholders as psycopg reads them: the one change PostgreSQL's text gets.

The store's statements are written once where SQLite and PostgreSQL read them alike and per
dialect where they differ (daemon/store/*.py), with SQLite's placeholders: `?` and `:name`.
psycopg wants `%s` and `%(name)s`, and reads every `%` in the text as the start of one. So
before a statement goes to PostgreSQL, `to_psycopg` walks it once (a plain scan, no regular
expression: it stops at each character that may open a quote, a comment or a placeholder
and copies the runs between them whole) and changes exactly that: a `?` (or, with named parameters, a `:name`) outside quoted text
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
_HEAD_WORDS = frozenset(h[0] for h in _SQLITE_ONLY_HEADS)
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
    out, code = _scan(sql, named)
    _refuse_sqlite_only(sql, code)
    return out


# Where a scan stops to look: quotes, comments' openings, dollar quotes, placeholders, `%`.
_SPECIAL = frozenset("'\"-/$?:%")


def _scan(sql: str, named: bool) -> tuple[str, str]:
    """Walk `sql` once: (the psycopg text, the text outside quotes and comments).

    Only the characters that may start something are looked at; the runs between them are
    copied whole.
    """
    out: list[str] = []
    code: list[str] = []
    n = len(sql)
    done = 0  # sql[:done] is in `out`
    for i in [k for k, c in enumerate(sql) if c in _SPECIAL]:
        if i < done:
            continue  # inside a quote or comment already copied
        c = sql[i]
        end = i
        if c in "'\"":
            if c == "'" and _escape_string(sql, i):
                end = _escaped_end(sql, i)
            else:
                end = _quoted_end(sql, i, c)
        elif c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
        elif c == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif c == "$" and not _after_word(sql, i):
            end = _dollar_end(sql, i)
        if end > i:  # quoted text or a comment: copied as it is, its `%` doubled
            _plain(sql, done, i, out, code)
            out.append(sql[i:end].replace("%", "%%"))
            code.append(" ")
            done = end
        elif c == "?":
            _plain(sql, done, i, out, code)
            out.append("%s")
            code.append("?")
            done = i + 1
        elif c == "%":
            _plain(sql, done, i, out, code)
            out.append("%%")
            code.append("%")
            done = i + 1
        elif c == ":":
            _plain(sql, done, i, out, code)
            done = _colon(sql, i, named, out)
            code.append(sql[i:done])
    _plain(sql, done, n, out, code)
    return "".join(out), "".join(code)


def _plain(sql: str, start: int, end: int, out: list[str], code: list[str]) -> None:
    if end > start:
        out.append(sql[start:end])
        code.append(sql[start:end])


def _after_word(sql: str, i: int) -> bool:
    """Whether sql[i] follows an identifier's character (so it continues that identifier)."""
    return i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$")


def _escape_string(sql: str, i: int) -> bool:
    """Whether the quote at `i` opens an escape string (`E'…'`, the `E` a word of its own)."""
    return i > 0 and sql[i - 1] in "eE" and not _after_word(sql, i - 1)


def _quoted_end(sql: str, start: int, quote: str) -> int:
    """The index after the quoted text opening at `start` (a doubled quote stays inside)."""
    i = start + 1
    while (close := sql.find(quote, i)) >= 0:
        if not sql.startswith(quote, close + 1):
            return close + 1
        i = close + 2
    return len(sql)


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
    if sql.startswith("::", i):
        out.append("::")
        return i + 2
    if (
        named
        and not _after_word(sql, i)
        and i + 1 < n
        and (sql[i + 1].isalpha() or sql[i + 1] == "_")
    ):
        end = i + 2
        while end < n and (sql[end].isalnum() or sql[end] == "_"):
            end += 1
        out.append(f"%({sql[i + 1 : end]})s")
        return end
    out.append(":")
    return i + 1


def _words(code: str) -> list[str]:
    """The words of `code` (text outside quotes and comments), upper-cased, in order."""
    words: list[str] = []
    word: list[str] = []
    for c in code:
        if c.isalnum() or c in "_$":
            word.append(c)
        elif word:
            words.append("".join(word).upper())
            word = []
    if word:
        words.append("".join(word).upper())
    return words


def _refuse_sqlite_only(sql: str, code: str) -> None:
    head = code.split(None, 2)[:2]
    if head and head[0].upper() in _HEAD_WORDS:
        words = _words(" ".join(head))
        for known in _SQLITE_ONLY_HEADS:
            if tuple(words[: len(known)]) == known:
                raise SqliteOnly(
                    f"{' '.join(known)} is SQLite's own syntax, sent to PostgreSQL: {_brief(sql)}"
                )
    if "MATCH" not in code.upper():
        return
    words = _words(code)
    for at, word in enumerate(words):
        if word == "MATCH" and (at + 1 == len(words) or words[at + 1] not in _KEY_MATCH):
            raise SqliteOnly(f"an FTS5 MATCH has no PostgreSQL form: {_brief(sql)}")


def _brief(sql: str) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= 160 else text[:157] + "..."
