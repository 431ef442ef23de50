"""The memory index's rows (`MemoriesRepo`): memories, their vectors, the index's marks.

Each test runs on a SQLite file and on the real PostgreSQL server (`tests.test_store_repos`'s
fixture): the same calls, the same answers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from daemon.store.folds import FoldLink, FoldsRepo
from daemon.store.memories import (
    MemoriesRepo,
    MemoryWrite,
    Supersession,
    UseCount,
    in_snapshot,
    in_transaction,
    index_state,
    next_generation,
    rows_since,
    vectors_of,
    vectors_since,
)
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

TABLES = ("mention_links", "memories", "embeddings", "memory_chunked", "memory_folds")


def mem(uid: str, text: str, **kw: Any) -> MemoryWrite:
    fields: dict[str, Any] = {
        "uid": uid,
        "kind": "fact",
        "text": text,
        "title": "",
        "tags": "",
        "importance": 0.5,
        "origin": "person",
        "created_at": "2026-03-02T09:00:00.000000+00:00",
        "valid_from": None,
        "supersedes": None,
        "session_id": None,
        "message_ids": "[]",
        "source": "",
        "content_hash": f"h-{text}",
        "explicit": False,
        "meta": "{}",
    }
    fields.update(kw)
    return MemoryWrite(**fields)


def vec(*xs: float) -> bytes:
    return np.asarray(xs, dtype=np.float32).tobytes()


# ----- memories ---------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_an_upsert_stamps_a_generation_and_an_unchanged_row_keeps_its_own(
    store: Store,  # noqa: F811
) -> None:
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        before = (await repo.state()).generation
        gen = await repo.upsert([mem("fact:a", "Ana moved to Lisbon"), mem("fact:b", "Ben sails")])
        assert gen == before + 1 == (await repo.state()).generation
        got = await repo.get("fact:a")
        assert got is not None and got.text == "Ana moved to Lisbon" and got.kind == "fact"
        assert got.retired_at is None and got.explicit is False and got.uses == 0
        assert await repo.get("fact:nobody") is None

        # The same rows again: a new generation is drawn, but no row is stamped with it.
        again = await repo.upsert([mem("fact:a", "Ana moved to Lisbon")])
        assert again == gen + 1
        stamped = await db.run(rows_since, gen)
        assert len(stamped) == 0
        # A changed row is replaced in place (same rowid) and stamped.
        changed = await repo.upsert([mem("fact:a", "Ana moved to Porto", explicit=True)])
        rows = await db.run(rows_since, again)
        assert rows.rowids == (got.rowid,) and rows.hashes == ("h-Ana moved to Porto",)
        assert rows.explicit == (True,) and rows.kinds == ("fact",)
        now = await repo.get("fact:a")
        assert now is not None and now.text == "Ana moved to Porto" and now.explicit
        assert (await repo.state()).generation == changed


@pytest.mark.anyio
async def test_a_supersession_retires_the_old_memory_and_restore_refuses_it(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await repo.upsert([mem("fact:old", "Ana lives in Lisbon")])
        new = mem("fact:new", "Ana lives in Porto", supersedes="fact:old")
        await repo.upsert([new], [Supersession("fact:old", "fact:new", "2026-03-05T00:00:00Z")])
        old = await repo.get("fact:old")
        assert old is not None
        assert (old.retired_at, old.superseded_by) == ("2026-03-05T00:00:00Z", "fact:new")
        assert not await repo.restore("fact:old")  # superseded: only a reinstatement brings it
        assert await repo.make_current("fact:old")
        back = await repo.get("fact:old")
        assert back is not None and back.retired_at is None and back.superseded_by is None


@pytest.mark.anyio
async def test_retire_keeps_the_first_time_and_restore_undoes_it(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await repo.upsert([mem("fact:a", "Ana paints")])
        assert await repo.retire("fact:a", at="2026-03-03T00:00:00Z")
        assert await repo.retire("fact:a", at="2026-03-09T00:00:00Z", superseded_by="fact:z")
        row = await repo.get("fact:a")
        assert row is not None
        assert (row.retired_at, row.superseded_by) == ("2026-03-03T00:00:00Z", "fact:z")
        assert not await repo.retire("fact:nobody", at="2026-03-03T00:00:00Z")
        await repo.upsert([mem("fact:b", "Ben paints")])
        assert await repo.retire("fact:b", at="2026-03-03T00:00:00Z")
        assert await repo.restore("fact:b")
        again = await repo.get("fact:b")
        assert again is not None and again.retired_at is None
        assert [(k.kind, k.count, k.retired) for k in await repo.kind_counts()] == [("fact", 2, 1)]


@pytest.mark.anyio
async def test_recent_walks_each_kind_newest_first_by_valid_time(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await repo.upsert(
            [
                mem("fact:1", "one", created_at="2026-03-01T00:00:00Z"),
                # Told on the 2nd but true from the 4th: ordered by the 4th.
                mem(
                    "fact:2",
                    "two",
                    created_at="2026-03-02T00:00:00Z",
                    valid_from="2026-03-04T00:00:00Z",
                ),
                mem("summary:3", "three", kind="summary", created_at="2026-03-03T00:00:00Z"),
                mem("chunk:4", "four", kind="chunk", created_at="2026-03-05T00:00:00Z"),
                mem("fact:5", "five", created_at="2026-03-06T00:00:00Z"),
            ]
        )
        await repo.retire("fact:5", at="2026-03-07T00:00:00Z")
        found = await repo.recent(["fact", "summary"], 10)
        assert [r.uid for r in found] == ["fact:2", "summary:3", "fact:1"]
        assert [r.uid for r in await repo.recent(["fact", "summary"], 2)] == ["fact:2", "summary:3"]
        withdrawn = await repo.recent(["fact"], 10, include_retired=True)
        assert [r.uid for r in withdrawn] == ["fact:5", "fact:2", "fact:1"]
        assert await repo.recent([], 10) == [] and await repo.recent(["fact"], 0) == []


@pytest.mark.anyio
async def test_clear_starts_an_epoch_and_runs_its_hook_inside(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await repo.upsert([mem("fact:a", "Ana")])
        await repo.store_vectors("m", {"h-Ana": vec(1, 0)})
        before = await repo.state()
        seen: list[int] = []
        await repo.clear(within=lambda: seen.append(1))
        after = await repo.state()
        assert seen == [1]
        assert int(after.epoch) == int(before.epoch) + 1
        assert after.generation > before.generation
        assert await repo.kind_counts() == [] and await repo.get("fact:a") is None
        assert await repo.stored_vectors() == 1  # kept for a reindex to reuse


@pytest.mark.anyio
async def test_a_failed_transaction_leaves_nothing_and_draws_no_generation(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        before = (await repo.state()).generation

        def half(conn: Any) -> None:
            next_generation(conn)
            conn.execute(
                "INSERT INTO memories(uid, kind, text, origin, created_at, content_hash) "
                "VALUES ('fact:x', 'fact', 'x', 'person', '2026', 'hx')"
            )
            raise RuntimeError("cut short")

        with pytest.raises(RuntimeError, match="cut short"):
            await db.run(in_transaction, half)
        assert await repo.get("fact:x") is None
        assert (await repo.state()).generation == before


@pytest.mark.anyio
async def test_vectors_pending_stored_and_read_by_generation(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await repo.upsert(
            [mem("fact:a", "Ana"), mem("fact:b", "Ben"), mem("fact:c", "Ana", kind="profile")]
        )
        assert await repo.pending_count("m") == 2  # two contents, one of them twice
        pending = await repo.pending("m", after=0, limit=10)
        assert [p.content_hash for p in pending] == ["h-Ana", "h-Ben", "h-Ana"]
        assert pending == sorted(pending, key=lambda p: p.rowid)
        assert [
            p.content_hash for p in await repo.pending("m", after=pending[0].rowid, limit=1)
        ] == ["h-Ben"]
        gen = (await repo.state()).generation
        assert await repo.store_vectors("m", {"h-Ana": vec(1, 0, 0)}) == 1
        assert await repo.store_vectors("m", {}) == 0
        assert await repo.pending_count("m") == 1 and await repo.pending_count("other") == 2
        assert await repo.with_vector("m") == 2 and await repo.stored_vectors() == 1

        since = await db.run(vectors_since, "m", 3, gen)
        assert [(h, np.frombuffer(v, dtype=np.float32).tolist()) for h, v in since] == [
            ("h-Ana", [1.0, 0.0, 0.0])
        ]
        assert await db.run(vectors_since, "m", 3, gen + 1) == []
        assert await db.run(vectors_since, "m", 2, gen) == []  # another dimension
        # Replaced, not doubled.
        await repo.store_vectors("m", {"h-Ana": vec(0, 1, 0), "h-Ben": vec(0, 0, 1)})
        of = dict(await db.run(vectors_of, "m", 3, ["h-Ana", "h-Ben", "h-none"]))
        assert np.frombuffer(of["h-Ana"], dtype=np.float32).tolist() == [0.0, 1.0, 0.0]
        assert set(of) == {"h-Ana", "h-Ben"}

        assert await repo.hashes(["fact:a", "fact:c", "fact:zz"]) == {
            "fact:a": "h-Ana",
            "fact:c": "h-Ana",
        }
        stored = await repo.vectors("m", ["h-Ben", "h-none"])
        assert list(stored) == ["h-Ben"]
        assert await repo.store_bytes() > 0


@pytest.mark.anyio
async def test_the_matrix_reads_rows_columns_and_a_snapshot(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await repo.upsert(
            [
                mem("fact:a", "Ana", importance=0.9, valid_from="2026-03-04T00:00:00Z"),
                mem("chunk:b", "Ben", kind="chunk"),
            ]
        )
        await repo.retire("chunk:b", at="2026-03-05T00:00:00Z")
        state = await db.run(index_state)
        assert state.index_id and state.generation == (await repo.state()).generation
        rows = await db.run(rows_since, 0)
        assert rows.kinds == ("fact", "chunk") and rows.retired == (False, True)
        assert rows.times == ("2026-03-04T00:00:00Z", "2026-03-02T09:00:00.000000+00:00")
        assert [round(x, 3) for x in rows.importance] == [0.9, 0.5]
        assert list(rows.rowids) == sorted(rows.rowids)

        got, count = await db.run(in_snapshot, lambda conn: len(rows_since(conn, 0)))
        assert (got, count) == (2, 2)


@pytest.mark.anyio
async def test_uses_add_up_and_the_last_use_only_moves_forward(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await repo.upsert([mem("fact:a", "Ana"), mem("fact:b", "Ben")])
        gen = (await repo.state()).generation
        await repo.count_uses(
            [
                UseCount(uid="fact:a", uses=2, last_used="2026-03-05T00:00:00Z"),
                UseCount(uid="fact:nobody", uses=1, last_used="2026-03-05T00:00:00Z"),
            ]
        )
        await repo.count_uses([UseCount(uid="fact:a", uses=1, last_used="2026-03-04T00:00:00Z")])
        await repo.count_uses([])
        a, b = await repo.get("fact:a"), await repo.get("fact:b")
        assert a is not None and (a.uses, a.last_used) == (3, "2026-03-05T00:00:00Z")
        assert b is not None and (b.uses, b.last_used) == (0, None)
        assert (await repo.state()).generation == gen  # nothing a search holds changed


@pytest.mark.anyio
async def test_month_folds_are_read_with_their_memories(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await repo.upsert(
            [
                mem("summary:s1", "first week", kind="summary", created_at="2026-03-01T00:00:00Z"),
                mem("summary:s2", "second week", kind="summary", created_at="2026-03-08T00:00:00Z"),
                mem("summary:s3", "third week", kind="summary", created_at="2026-03-15T00:00:00Z"),
                mem(
                    "summary:s4",
                    "told late",
                    kind="summary",
                    created_at="2026-03-02T00:00:00Z",
                    valid_from="2026-03-20T00:00:00Z",
                ),
                mem("chunk:c1", "a chunk", kind="chunk"),
                mem("month:2026-03", "March", kind="month"),
            ]
        )
        await FoldsRepo(db).link(
            [
                FoldLink("summary:s1", "month:2026-03", "2026-04-01T00:00:00Z"),
                FoldLink("summary:s2", "month:2026-03", "2026-04-01T00:00:00Z"),
                FoldLink("chunk:c1", "month:2026-03", "2026-04-01T00:00:00Z"),
            ]
        )
        await repo.retire("chunk:c1", at="2026-04-02T00:00:00Z")
        assert await repo.months_of(["summary:s1", "summary:s3", "chunk:c1"]) == {
            "summary:s1": "month:2026-03",
            "chunk:c1": "month:2026-03",
        }
        sources = await repo.month_sources("month:2026-03")
        assert [r.uid for r in sources] == ["summary:s2", "summary:s1"]  # the retired one left out
        assert await repo.month_sources("month:2026-02") == []
        unfolded = await repo.unfolded_summaries(10)
        assert [r.uid for r in unfolded] == ["summary:s4", "summary:s3"]
        assert [r.uid for r in await repo.unfolded_summaries(1)] == ["summary:s4"]


@pytest.mark.anyio
async def test_texts_after_reads_in_written_order_from_a_row_on(store: Store) -> None:  # noqa: F811
    """The store's vocabulary reads every memory's words once, in written order."""
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
        repo = MemoriesRepo(db)
        every = await repo.texts_after(0, 10)
        assert [r.text for r in every] == ["title 0\ntext 0", "text 1", "text 2"]
        assert every[0].rowid < every[1].rowid < every[2].rowid
        assert [r.text for r in await repo.texts_after(every[0].rowid, 1)] == ["text 1"]
        assert await repo.texts_after(every[2].rowid, 10) == []
