"""`daemon/store/schema.py`: whether a store has a table yet (SQLite and PostgreSQL) and whether
the stdlib SQLite has FTS5."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from daemon.store.db import Database
from daemon.store.schema import has_table, sqlite_fts5_version
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401


@pytest.mark.anyio
async def test_a_store_has_its_migrated_tables_only(store: Store) -> None:  # noqa: F811
    async with store.open() as db:
        assert await has_table(db, "sleep_changes")
        assert await has_table(db, "dream_revisions")
        assert not await has_table(db, "no_such_table")


@pytest.mark.anyio
async def test_an_older_sqlite_home_lacks_a_later_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE sessions (id TEXT)")
    conn.close()
    async with await Database.open(path, readonly=True, migrate=False) as db:
        assert await has_table(db, "sessions")
        assert not await has_table(db, "sleep_changes")


def test_the_stdlib_sqlite_has_fts5() -> None:
    version = sqlite_fts5_version()
    assert version == sqlite3.sqlite_version
