"""The SQLite index: migrations from blank and from an older schema, WAL, FTS5."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from daemon.store.db import Database, connect_sync
from daemon.store.migrations import apply_migrations, discover

pytestmark = pytest.mark.anyio


async def test_blank_database_gets_every_migration_once(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    async with await Database.open(path) as db:
        names = [r[0] for r in await db.fetchall("SELECT name FROM _migrations ORDER BY name")]
        assert names == sorted(m.name for m in discover())
        mode = (await db.fetchone("PRAGMA journal_mode"))[0]
        assert mode == "wal"
        tables = {
            r[0] for r in await db.fetchall("SELECT name FROM sqlite_master WHERE type='table'")
        }
        assert {"sessions", "messages", "usage_ledger", "turn_reports", "kv"} <= tables
    # Re-opening applies nothing new and keeps data.
    async with await Database.open(path) as db:
        again = await db.fetchall("SELECT name FROM _migrations")
        assert len(again) == len(names)


def test_upgrade_from_an_older_schema(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "old.sqlite")
    migs = discover()
    # Apply only the first migration by hand, as an older release would have.
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    from daemon.store.migrations import _split

    for stmt in _split(migs[0].sql):
        conn.execute(stmt)
    conn.execute("INSERT INTO _migrations VALUES (?, 'then')", (migs[0].name,))
    conn.execute("INSERT INTO kv(key, value, updated_at) VALUES ('k', '\"v\"', 'then')")
    applied = apply_migrations(conn)
    assert applied == [m.name for m in migs[1:]]
    assert conn.execute("SELECT value FROM kv WHERE key='k'").fetchone()[0] == '"v"'
    conn.close()


def test_fts5_is_available() -> None:
    conn = connect_sync(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(body)")
    conn.execute("INSERT INTO f VALUES ('the quick brown fox')")
    assert conn.execute("SELECT COUNT(*) FROM f WHERE f MATCH 'quick'").fetchone()[0] == 1
    conn.close()


async def test_checkpoint_truncates_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    async with await Database.open(path) as db:
        for i in range(500):
            await db.execute(
                "INSERT INTO kv(key, value, updated_at) VALUES (?, ?, 'x')", (f"k{i}", "v" * 200)
            )
        wal = Path(str(path) + "-wal")
        assert wal.exists() and wal.stat().st_size > 0
        busy, _, _ = await db.checkpoint()
        assert busy == 0
        assert wal.stat().st_size == 0


async def test_a_checkpoint_beside_a_transaction_never_fails_its_commit(tmp_path: Path) -> None:
    """The scheduled checkpoint runs beside other jobs' batch transactions on one connection."""

    def batch(conn: sqlite3.Connection, n: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO kv(key, value, updated_at) VALUES (?, 'v', 'x')", (f"k{n}",))
        conn.execute("COMMIT")

    async with await Database.open(tmp_path / "db.sqlite") as db:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for n in range(100):
                    tg.start_soon(db.checkpoint)
                    tg.start_soon(db.run, batch, n)
        assert (await db.fetchone("SELECT count(*) FROM kv WHERE key LIKE 'k%'"))[0] == 100


async def test_readonly_connection_reads_while_a_writer_is_open(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    async with await Database.open(path) as db:
        await db.execute("INSERT INTO kv(key, value, updated_at) VALUES ('a', '1', 'x')")
        async with await Database.open(path, readonly=True) as ro:
            assert (await ro.fetchone("SELECT value FROM kv WHERE key='a'"))[0] == "1"
            with pytest.raises(Exception):
                await ro.execute("INSERT INTO kv(key, value, updated_at) VALUES ('b', '2', 'x')")
