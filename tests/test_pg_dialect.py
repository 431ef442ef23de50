"""SQLite's SQL as PostgreSQL reads it (daemon.store.dialect) and FTS5 phrases as tsquery text."""

from __future__ import annotations

import pytest

from daemon.memory.lexical import tsquery
from daemon.store.dialect import Translator, Untranslatable

KEYS = {"kv": ("key",), "embeddings": ("content_hash", "model")}
COLUMNS = {
    "kv": frozenset({"key", "value", "updated_at"}),
    "sleep_phases": frozenset({"cycle_id", "phase", "status", "attempts"}),
}


def translate(sql: str, *, named: bool = False) -> str:
    t = Translator(
        lambda table: KEYS.get(table, ()),
        lambda table: "rowid" if table == "memories" else None,
        lambda table: COLUMNS.get(table, frozenset()),
    )
    return t(sql, named=named)[0]


def test_placeholders_and_percent_signs() -> None:
    assert translate("SELECT a FROM t WHERE b = ? AND c LIKE '50%?'") == (
        "SELECT a FROM t WHERE b = %s AND c ILIKE '50%%?'"
    )
    assert translate("SELECT 1 WHERE x = :since OR :since IS NULL", named=True) == (
        "SELECT 1 WHERE x = %(since)s OR CAST(%(since)s AS text) IS NULL"
    )


def test_inserts_that_ignore_or_replace() -> None:
    assert translate("INSERT OR IGNORE INTO kv(key, value) VALUES (?, ?)") == (
        "INSERT INTO kv(key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING"
    )
    assert translate(
        "INSERT OR REPLACE INTO embeddings(content_hash, model, dim, vector) VALUES (?,?,?,?)"
    ).endswith(
        "ON CONFLICT (content_hash, model) DO UPDATE SET dim = excluded.dim, vector = excluded.vector"
    )
    with pytest.raises(Untranslatable, match="no primary key"):
        translate("INSERT OR REPLACE INTO nokey(a) VALUES (?)")


def test_an_insert_reports_its_new_key() -> None:
    t = Translator(
        lambda _t: (),
        lambda table: "rowid" if table == "memories" else None,
        lambda _t: frozenset(),
    )
    sql, returning = t("INSERT INTO memories(uid) VALUES (?)")
    assert returning == "rowid" and sql.endswith("RETURNING rowid")
    assert t("INSERT INTO kv(key) VALUES (?)")[1] is None


def test_bare_columns_in_an_upsert_read_the_existing_row() -> None:
    got = translate(
        "INSERT INTO sleep_phases(cycle_id, phase) VALUES (?, ?) ON CONFLICT(cycle_id, phase) "
        "DO UPDATE SET attempts = attempts + 1, status = 'running' WHERE status <> 'done'"
    )
    assert got.endswith(
        "DO UPDATE SET attempts = sleep_phases.attempts + 1, status = 'running' "
        "WHERE sleep_phases.status <> 'done'"
    )


def test_is_compares_values_null_included() -> None:
    assert translate("SELECT 1 WHERE a IS NOT ? AND b IS ? AND c IS NULL AND d IS NOT NULL") == (
        "SELECT 1 WHERE a IS DISTINCT FROM %s AND b IS NOT DISTINCT FROM %s "
        "AND c IS NULL AND d IS NOT NULL"
    )


def test_what_has_no_postgresql_form_fails_loudly() -> None:
    with pytest.raises(Untranslatable, match="PRAGMA"):
        translate("PRAGMA page_count")
    with pytest.raises(Untranslatable, match="MATCH"):
        translate("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?")


def test_begin_immediate_is_a_plain_begin() -> None:
    assert translate("BEGIN IMMEDIATE") == "BEGIN"


def test_fts5_phrases_become_tsquery_text() -> None:
    assert tsquery('"allergy" OR "aller"* OR "porto"') == "allergy | aller:* | porto"
    assert tsquery('"ana lisbon" AND "march"') == "(ana <-> lisbon) & march"
    # Only word characters reach the query: nothing in the text can change its shape.
    assert tsquery('"a|b" OR "c)(!:*"') == "(a <-> b) | c"
    assert tsquery('""') == ""
