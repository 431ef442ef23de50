"""`daemon/store/memory_text.py` on SQLite and PostgreSQL: memories' text in written order."""

from __future__ import annotations

import anyio

from daemon.store.memory_text import MemoryText, texts_after
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401


def test_texts_after_reads_in_written_order_from_a_row_on(store: Store) -> None:  # noqa: F811
    async def main() -> None:
        async with store.open("memories") as db:
            for n, retired in enumerate([None, None, "2026-03-02T10:00:00+00:00"]):
                await db.execute(
                    "INSERT INTO memories(uid, kind, text, title, origin, created_at,"
                    " retired_at, content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        f"chunk:s:{n}",
                        "chunk",
                        f"text {n}",
                        "" if n else "title 0",
                        "person",
                        f"2026-03-01T10:0{n}:00+00:00",
                        retired,
                        f"hash-{n}",
                    ),
                )
            every = await texts_after(db, 0, 10)
            assert [r.text for r in every] == ["title 0\ntext 0", "text 1", "text 2"]
            assert all(isinstance(r, MemoryText) for r in every)
            assert every[0].rowid < every[1].rowid < every[2].rowid
            later = await texts_after(db, every[0].rowid, 1)
            assert [r.text for r in later] == ["text 1"]
            assert await texts_after(db, every[2].rowid, 10) == []

    anyio.run(main)
