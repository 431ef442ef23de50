"""MemoryReads (daemon/store/memory_reads.py): what search reads of `memories`, on SQLite and
on PostgreSQL."""

# ruff: noqa: F811  (the two-backend fixture is imported, then named by each test)

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.memory.ranking import item_of
from daemon.memory.rows import row_to_item
from daemon.store.db import Database
from daemon.store.memory_reads import MemoryReads
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401


async def add(db: Database, uid: str, **kw: Any) -> int:
    fields: dict[str, Any] = {
        "uid": uid,
        "kind": "chunk",
        "text": f"text of {uid}",
        "title": "",
        "origin": "person",
        "created_at": "2026-03-01T10:00:00.000000+00:00",
        "content_hash": f"hash-{uid}",
        **kw,
    }
    names = ", ".join(fields)
    await db.execute(
        f"INSERT INTO memories({names}) VALUES ({', '.join('?' * len(fields))})",
        tuple(fields.values()),
    )
    row = await db.fetchone("SELECT rowid FROM memories WHERE uid = ?", (uid,))
    return int(row[0])


@pytest.mark.anyio
async def test_texts_and_row_ids_by_rowid_and_by_uid(store: Store) -> None:
    async with store.open("memories") as db:
        reads = MemoryReads(db)
        a = await add(db, "chunk:s:1", title="Talk", text="Maya: the kiln is fixed")
        b = await add(db, "chunk:s:2", text="Tomas: anatomy exams", retired_at="2026-03-02")
        assert await reads.rowid("chunk:s:1") == a
        assert await reads.rowid("chunk:s:9") is None

        texts = {t.rowid: (t.uid, t.title, t.text) for t in await reads.texts([a, b, 10_000])}
        assert texts == {
            a: ("chunk:s:1", "Talk", "Maya: the kiln is fixed"),
            b: ("chunk:s:2", "", "Tomas: anatomy exams"),  # retired rows are read too
        }
        assert await reads.texts([]) == []

        by_uid = await reads.texts_of({"chunk:s:2", "chunk:s:9"})
        assert list(by_uid) == ["chunk:s:2"] and by_uid["chunk:s:2"].rowid == b


@pytest.mark.anyio
async def test_parts_give_each_memory_its_messages(store: Store) -> None:
    async with store.open("memories") as db:
        reads = MemoryReads(db)
        w = await add(db, "chunk:s:1-w", message_ids=json.dumps(["m1", "m2"]))
        one = await add(db, "chunk:s:1", message_ids=json.dumps(["m1"]))
        parts = await reads.parts(["chunk:s:1-w", "chunk:s:1", "fact:gone"])
        assert {u: (p.rowid, p.message_ids) for u, p in parts.items()} == {
            "chunk:s:1-w": (w, ("m1", "m2")),
            "chunk:s:1": (one, ("m1",)),
        }


@pytest.mark.anyio
async def test_rows_hold_every_column_the_item_is_made_of(store: Store) -> None:
    """A whole row reads back as the index wrote it, and search shows it as the item
    `row_to_item` makes of the raw row."""
    async with store.open("memories") as db:
        reads = MemoryReads(db)
        rid = await add(
            db,
            "fact:7",
            kind="fact",
            text="Maya's brother is Tomas",
            title="family",
            tags="family pin",
            importance=0.9,
            origin="agent",
            valid_from="2026-02-01T00:00:00.000000+00:00",
            supersedes="fact:3",
            session_id="s",
            message_ids=json.dumps(["m4"]),
            source="memory/facts.jsonl",
            explicit=1,
            meta=json.dumps({"seq": 4}),
            uses=3,
            last_used="2026-03-02T08:00:00.000000+00:00",
            confirmed_at="2026-03-02T09:00:00.000000+00:00",
        )
        other = await add(db, "fact:8", retired_at="2026-03-03T00:00:00+00:00")
        rows = await reads.rows([rid, other, 99_999])
        assert set(rows) == {rid, other}
        got = rows[rid]
        assert (got.uid, got.kind, got.title, got.tags, got.importance) == (
            "fact:7",
            "fact",
            "family",
            "family pin",
            0.9,
        )
        assert (got.origin, got.supersedes, got.session_id, json.loads(got.message_ids)) == (
            "agent",
            "fact:3",
            "s",
            ["m4"],
        )
        assert got.explicit is True and got.uses == 3
        assert (got.last_used, got.confirmed_at) == (
            "2026-03-02T08:00:00.000000+00:00",
            "2026-03-02T09:00:00.000000+00:00",
        )
        assert rows[other].uses == 0 and rows[other].last_used is None
        assert json.loads(got.meta) == {"seq": 4}
        assert rows[other].retired_at == "2026-03-03T00:00:00+00:00"

        raw = await db.fetchone("SELECT * FROM memories WHERE uid = ?", ("fact:7",))
        assert item_of(got, 0.5) == row_to_item(raw, 0.5)
