"""StoreUpkeep (daemon/store/maintenance.py): the probe, the file's pages and VACUUM, on SQLite
and on PostgreSQL."""

# ruff: noqa: F811  (the two-backend fixture is imported, then named by each test)

from __future__ import annotations

import pytest

from daemon.store.maintenance import StoreUpkeep
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401


@pytest.mark.anyio
async def test_pages_free_up_on_delete_and_vacuum_gives_them_back(store: Store) -> None:
    async with store.open("kv") as db:
        upkeep = StoreUpkeep(db)
        await upkeep.ping()
        if db.is_postgres:
            # The server compacts its own tables: no pages to count, no VACUUM of ours.
            assert await upkeep.pages() is None
            with pytest.raises(RuntimeError, match="autovacuum"):
                await upkeep.vacuum()
            return
        for i in range(400):
            await db.execute(
                "INSERT INTO kv(key, value, updated_at) VALUES (?, ?, ?)",
                (f"k{i}", "x" * 2000, "2026-03-01T10:00:00+00:00"),
            )
        await db.execute("DELETE FROM kv")
        before = await upkeep.pages()
        assert before is not None and before.free > 100
        assert before.free_fraction == before.free / before.total
        await upkeep.vacuum()
        after = await upkeep.pages()
        assert after is not None and after.free == 0 and after.total < before.total
