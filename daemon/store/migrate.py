"""Moving a home's store from its SQLite file to PostgreSQL, and checking that nothing was lost.

Every table of the SQLite index is copied as it is (rows by primary key, so a second run
after an interruption finishes the copy instead of doubling it), identity counters are moved
past the copied keys, and the copy is then checked: every table holds as many rows on both
sides, and a sample of memories is searched for by their own words on both, each expected
among the best hits on PostgreSQL when it was on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.store.db import Database

# Rows sent to the server per statement batch.
BATCH = 500
# What the copy leaves out: the migrations record (each side keeps its own) and FTS5's tables.
_SKIP = ("_migrations", "sqlite_")
# Memories searched for by their own words in the check, and how far down a hit may be.
SAMPLE = 20
TOP = 5


async def source_tables(src: Database) -> list[str]:
    rows = await src.fetchall("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    names = [r[0] for r in rows]
    return [n for n in names if not n.startswith(_SKIP) and not n.startswith("memories_fts")]


async def copy_store(
    src: Database, dst: Database, *, progress: Callable[[str, int], None] | None = None
) -> dict[str, int]:
    """Copy every table of `src` (SQLite) into `dst` (PostgreSQL); return rows copied per table."""
    copied: dict[str, int] = {}
    for table in await source_tables(src):
        have = await dst.fetchall(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
        dst_cols = {r[0] for r in have}
        if not dst_cols:
            continue  # a table the PostgreSQL schema does not have (none today)
        async with src.conn.execute(f"SELECT * FROM {table} LIMIT 0") as cur:
            src_cols = [d[0] for d in cur.description]
        cols = [c for c in src_cols if c in dst_cols]
        sql = _copy_statement(table, cols, await _primary_key(dst, table))
        n = 0
        async with src.conn.execute(f"SELECT {', '.join(cols)} FROM {table}") as cur:
            while batch := list(await cur.fetchmany(BATCH)):
                await dst.conn.executemany(sql, [tuple(r) for r in batch])
                n += len(batch)
                if progress:
                    progress(table, n)
        copied[table] = n
    await dst.run(_advance_identities)
    return copied


async def _primary_key(dst: Database, table: str) -> list[str]:
    """The columns of `table`'s primary key on the server, in key order."""
    rows = await dst.fetchall(
        "SELECT a.attname FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = to_regclass(?) AND i.indisprimary "
        "ORDER BY a.attnum",
        (table,),
    )
    return [str(r[0]) for r in rows]


def _copy_statement(table: str, cols: list[str], key: list[str]) -> str:
    """An upsert of `cols` into `table` on its primary key: a row copied again (a copy run
    twice, or finished after an interruption) replaces the one there instead of doubling."""
    if not key:
        raise RuntimeError(f"table {table} has no primary key on the server: cannot copy it twice")
    updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c not in key)
    on_conflict = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    return (
        f"INSERT INTO {table}({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT({', '.join(key)}) {on_conflict}"
    )


def _advance_identities(conn: Any) -> None:
    """Move each identity counter past the largest key copied in, so new rows never collide."""
    rows = conn.raw.execute(
        "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND a.attidentity <> '' AND c.relkind = 'r'"
    ).fetchall()
    for table, column in rows:
        conn.raw.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
            f"coalesce((SELECT max({column}) FROM {table}), 0) + 1, false)"
        )


async def compare_counts(src: Database, dst: Database) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for table in await source_tables(src):
        a = await src.fetchone(f"SELECT count(*) FROM {table}")
        b = await dst.fetchone(f"SELECT count(*) FROM {table}")
        out[table] = (int(a[0]), int(b[0]))
    return out


async def sample_queries(src: Database, n: int = SAMPLE) -> list[tuple[str, str]]:
    """(uid, its own words) for up to `n` current facts and summaries, spread over the store."""
    rows = await src.fetchall(
        "SELECT uid, title, text FROM memories WHERE retired_at IS NULL "
        "AND kind IN ('fact', 'profile', 'summary', 'month') ORDER BY rowid"
    )
    step = max(1, len(rows) // n)
    out = []
    for r in rows[::step][:n]:
        words = " ".join((f"{r[1]} {r[2]}").split()[:12])
        if words:
            out.append((r[0], words))
    return out


async def found_by_own_words(
    search: Callable[[str], Any], queries: list[tuple[str, str]], top: int = TOP
) -> set[str]:
    """The uids among `queries` that a search for their own words ranks in the first `top`."""
    found = set()
    for uid, words in queries:
        hits = await search(words)
        if uid in [h.id for h in hits[:top]]:
            found.add(uid)
    return found
