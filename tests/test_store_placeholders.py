"""The one change a statement gets on its way to PostgreSQL: its placeholders in psycopg's form
(daemon.store.placeholders); and FTS5 phrases as tsquery text."""

from __future__ import annotations

import pytest

from daemon.memory.lexical import tsquery
from daemon.store.placeholders import SqliteOnly, to_psycopg


def test_positional_and_named_placeholders() -> None:
    assert to_psycopg("SELECT a FROM t WHERE b = ? AND c IN (?, ?)") == (
        "SELECT a FROM t WHERE b = %s AND c IN (%s, %s)"
    )
    assert to_psycopg("SELECT 1 WHERE x = :since OR y < :until_2", named=True) == (
        "SELECT 1 WHERE x = %(since)s OR y < %(until_2)s"
    )
    # Given by position, a `:name` is not a placeholder: it is left as written.
    assert to_psycopg("SELECT 1 WHERE x = :since") == "SELECT 1 WHERE x = :since"


def test_quoted_text_and_comments_keep_their_marks() -> None:
    assert to_psycopg("SELECT '?', 'it''s :x ?', \"odd?col\" FROM t WHERE a = ?", named=True) == (
        "SELECT '?', 'it''s :x ?', \"odd?col\" FROM t WHERE a = %s"
    )
    assert to_psycopg("SELECT a -- why? :x\nFROM t /* ? :y */ WHERE b = :b", named=True) == (
        "SELECT a -- why? :x\nFROM t /* ? :y */ WHERE b = %(b)s"
    )
    assert to_psycopg("SELECT E'\\'?', $$ ? $$, $fn$ :x $fn$ WHERE a = ?") == (
        "SELECT E'\\'?', $$ ? $$, $fn$ :x $fn$ WHERE a = %s"
    )


def test_casts_and_slices_are_not_placeholders() -> None:
    assert to_psycopg("SELECT :v::bigint, a::text, b[1:n] FROM t", named=True) == (
        "SELECT %(v)s::bigint, a::text, b[1:n] FROM t"
    )


def test_every_percent_sign_is_escaped_once() -> None:
    # psycopg reads `%` anywhere in the text, literals and comments included.
    assert to_psycopg("SELECT a % 2 FROM t WHERE b LIKE '50%?' -- 100%\n") == (
        "SELECT a %% 2 FROM t WHERE b LIKE '50%%?' -- 100%%\n"
    )


STATEMENTS = [
    # What the retired translator rewrote: now sent as written, placeholders aside.
    "SELECT key FROM kv WHERE key LIKE 'k%' AND value NOT LIKE ?",
    "SELECT 1 WHERE a IS NOT ? AND b IS ? AND c IS NULL AND :x IS NULL",
    "INSERT INTO memories(uid) VALUES (?)",
    "INSERT INTO sleep_phases(cycle_id, phase) VALUES (?, ?) ON CONFLICT(cycle_id, phase) "
    "DO UPDATE SET attempts = attempts + 1 WHERE status <> 'done'",
    "INSERT INTO kv(key, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
    "BEGIN",
    "select max(a, b), sum(c > 1) from sqlite_master\n  where name = ?;  ",
    "CREATE TABLE t (a INT REFERENCES u(id) MATCH FULL, match_count INT)",
]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_nothing_but_placeholders_changes(sql: str) -> None:
    named = ":x" in sql
    out = to_psycopg(sql, named=named)
    # Undo exactly the placeholder and `%` changes: the statement comes back whole, spacing,
    # case, trailing semicolon and all.
    back = out.replace("%(x)s", ":x").replace("%s", "?").replace("%%", "%")
    assert back == sql


@pytest.mark.parametrize(
    ("sql", "head"),
    [
        ("INSERT OR IGNORE INTO kv(key) VALUES (?)", "INSERT OR"),
        ("  insert or replace into kv(key) values (?)", "INSERT OR"),
        ("/* why */ REPLACE INTO kv(key) VALUES (?)", "REPLACE INTO"),
        ("PRAGMA page_count", "PRAGMA"),
        ("BEGIN IMMEDIATE", "BEGIN IMMEDIATE"),
        ("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", "MATCH"),
    ],
)
def test_sqlite_only_syntax_is_refused_with_the_statement_named(sql: str, head: str) -> None:
    with pytest.raises(SqliteOnly, match=head) as refused:
        to_psycopg(sql)
    assert " ".join(sql.split()) in str(refused.value)


def test_sqlite_words_inside_quotes_or_later_are_not_refused() -> None:
    assert to_psycopg("SELECT 'INSERT OR IGNORE', 'PRAGMA' WHERE a = ?") == (
        "SELECT 'INSERT OR IGNORE', 'PRAGMA' WHERE a = %s"
    )
    assert to_psycopg("INSERT INTO t(note) VALUES ('MATCH me')") == (
        "INSERT INTO t(note) VALUES ('MATCH me')"
    )


def test_fts5_phrases_become_tsquery_text() -> None:
    assert tsquery('"allergy" OR "aller"* OR "porto"') == "allergy | aller:* | porto"
    assert tsquery('"ana lisbon" AND "march"') == "(ana <-> lisbon) & march"
    # Only word characters reach the query: nothing in the text can change its shape.
    assert tsquery('"a|b" OR "c)(!:*"') == "(a <-> b) | c"
    assert tsquery('""') == ""
