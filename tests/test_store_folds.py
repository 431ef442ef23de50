"""FoldsRepo (daemon/store/folds.py): what a month fold reads and the links it keeps, on SQLite
and on PostgreSQL."""

# ruff: noqa: F811  (the two-backend fixture is imported, then named by each test)

from __future__ import annotations

from typing import Any

import pytest

from daemon.store.db import Database
from daemon.store.folds import FoldLink, FoldsRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

TABLES = ("memory_folds", "memories")


async def memory(db: Database, uid: str, kind: str, day: str, **kw: Any) -> None:
    fields: dict[str, Any] = {
        "uid": uid,
        "kind": kind,
        "text": f"text of {uid}",
        "title": f"title {uid}",
        "origin": "person",
        "created_at": f"{day}T10:00:00.000000+00:00",
        "content_hash": f"hash-{uid}",
        "source": f"{uid}.md",
        **kw,
    }
    await db.execute(
        f"INSERT INTO memories({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})",
        tuple(fields.values()),
    )


@pytest.mark.anyio
async def test_foldable_is_old_current_unfolded_summaries_and_unsummarised_chunks(
    store: Store,
) -> None:
    async with store.open(*TABLES) as db:
        folds = FoldsRepo(db)
        await memory(db, "summary:a", "summary", "2026-01-05", session_id="a")
        await memory(db, "chunk:a:1", "chunk", "2026-01-04", session_id="a")  # a has a summary
        await memory(db, "chunk:b:1", "chunk", "2026-01-03", session_id="b")
        await memory(db, "chunk:b:2", "chunk", "2026-01-03", session_id="b")
        await memory(db, "summary:c", "summary", "2026-01-06", retired_at="2026-02-01")
        await memory(db, "summary:d", "summary", "2026-03-01", session_id="d")  # too new
        await memory(db, "fact:1", "fact", "2026-01-01")
        await memory(db, "summary:e", "summary", "2026-01-02", session_id="e")
        await folds.link([FoldLink("summary:e", "month:2026-01", "2026-02-10T00:00:00+00:00")])

        found = await folds.foldable("2026-02-01T00:00:00+00:00")
        assert [r.uid for r in found] == ["chunk:b:1", "chunk:b:2", "summary:a"]
        b1 = found[0]
        assert (b1.kind, b1.title, b1.text, b1.origin, b1.session_id, b1.source) == (
            "chunk",
            "title chunk:b:1",
            "text of chunk:b:1",
            "person",
            "b",
            "chunk:b:1.md",
        )
        assert b1.created_at == "2026-01-03T10:00:00.000000+00:00"


@pytest.mark.anyio
async def test_links_are_kept_once_and_read_back_by_month(store: Store) -> None:
    async with store.open(*TABLES) as db:
        folds = FoldsRepo(db)
        await memory(db, "summary:a", "summary", "2026-01-05")
        await memory(db, "summary:b", "summary", "2026-01-06", retired_at="2026-02-01")
        await folds.link(
            [
                FoldLink("summary:a", "month:2026-01", "2026-02-10T00:00:00+00:00"),
                FoldLink("summary:b", "month:2026-01", "2026-02-10T00:00:00+00:00"),
            ]
        )
        # A source folded already stays with its month (a re-run after a crash adds nothing).
        await folds.link([FoldLink("summary:a", "month:2026-02", "2026-03-10T00:00:00+00:00")])
        await folds.link([])
        assert sorted(await folds.folded_into("month:2026-01")) == ["summary:a", "summary:b"]
        assert await folds.folded_into("month:2026-02") == []
        read = await folds.memories(["summary:a", "summary:b", "summary:gone"])
        assert sorted(r.uid for r in read) == ["summary:a", "summary:b"]
        assert await folds.memories([]) == []


@pytest.mark.anyio
async def test_is_retired_only_for_a_retired_memory(store: Store) -> None:
    async with store.open(*TABLES) as db:
        folds = FoldsRepo(db)
        await memory(db, "month:2026-01", "month", "2026-01-31", retired_at="2026-02-03")
        await memory(db, "month:2026-02", "month", "2026-02-28")
        assert await folds.is_retired("month:2026-01")
        assert not await folds.is_retired("month:2026-02")
        assert not await folds.is_retired("month:1999-01")
