"""`SleepChangesRepo` (daemon/store/sleep_changes.py): a cycle's change set and what a revert
holds back — one contract, on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.store.db import Database
from daemon.store.sleep_changes import SleepChangesRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

AT = "2026-03-02T03:00:00+00:00"
TABLES = (
    "sleep_changes",
    "sleep_fold_holds",
    "sleep_pin_holds",
    "pinned_facts",
    "memory_folds",
    "memories",
)


async def record(repo: SleepChangesRepo, cycle: str, kind: str, target: str, **kw: Any) -> int:
    return await repo.record(
        cycle,
        at=kw.get("at", AT),
        kind=kind,
        target=target,
        before=kw.get("before"),
        after=kw.get("after", {"id": target}),
        note=kw.get("note", ""),
    )


@pytest.mark.anyio
async def test_changes_are_numbered_per_cycle_once_per_kind_and_target(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = SleepChangesRepo(db)
        assert await repo.of_cycle("c1") == []
        assert await record(repo, "c1", "fact_mined", "f-1", note="  told\n twice  ") == 1
        assert await record(repo, "c1", "fact_retired", "f-2", before={"id": "f-2"}) == 2
        assert await record(repo, "c2", "fact_mined", "f-9") == 1
        # The same (kind, target) in the cycle again: the first number, nothing new.
        assert await record(repo, "c1", "fact_mined", "f-1", note="again") == 1
        assert await record(repo, "c1", "fact_promoted", "f-1") == 3

        changes = await repo.of_cycle("c1")
        assert [(c.seq, c.kind, c.target) for c in changes] == [
            (1, "fact_mined", "f-1"),
            (2, "fact_retired", "f-2"),
            (3, "fact_promoted", "f-1"),
        ]
        first = changes[0]
        assert (first.ref, first.at, first.before, first.after, first.note) == (
            "c1#1",
            AT,
            None,
            {"id": "f-1"},
            "told twice",
        )
        assert first.reverted_at is None and first.reverted_by is None
        assert changes[1].before == {"id": "f-2"}
        long = "word " * 200
        n = await record(repo, "c3", "fact_mined", "f-long", note=long)
        assert len((await repo.of_cycle("c3"))[n - 1].note) == 500

        assert await repo.counts([]) == {}
        assert await repo.counts(["c1", "c2", "c9"]) == {
            "c1": {"fact_mined": 1, "fact_retired": 1, "fact_promoted": 1},
            "c2": {"fact_mined": 1},
        }


@pytest.mark.anyio
async def test_a_revert_is_a_change_that_marks_the_one_it_undoes(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = SleepChangesRepo(db)
        await record(repo, "c1", "fact_mined", "f-1", after={"id": "f-1", "text": "x"})
        await record(repo, "c1", "fact_retired", "f-2", before={"id": "f-2"}, after=None)
        mined = (await repo.of_cycle("c1"))[0]
        later = "2026-03-02T09:00:00+00:00"
        seq = await repo.record_revert(mined, at=later, kind="reverted", note="undone")
        assert seq == 3
        changes = await repo.of_cycle("c1")
        assert (changes[0].reverted_at, changes[0].reverted_by) == (later, 3)
        assert changes[1].reverted_at is None
        revert = changes[2]
        assert (revert.kind, revert.target, revert.before, revert.after, revert.note) == (
            "reverted",
            "#1",
            {"id": "f-1", "text": "x"},
            None,
            "undone",
        )
        assert await repo.counts(["c1"]) == {
            "c1": {"fact_mined": 1, "fact_retired": 1, "reverted": 1}
        }


@pytest.mark.anyio
async def test_changes_of_some_kinds_are_found_by_cycle_and_target(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = SleepChangesRepo(db)
        assert await repo.targets_of(["shared_fact_folded"]) == []
        await record(repo, "c1", "shared_fact_folded", "shared:4")
        await record(repo, "c1", "fact_mined", "f-1")
        await record(repo, "c2", "shared_fact_retired", "shared:5")
        assert await repo.targets_of([]) == []
        found = await repo.targets_of(["shared_fact_folded", "shared_fact_retired"])
        assert sorted(found) == [("c1", "shared:4"), ("c2", "shared:5")]


async def memory(db: Database, uid: str, kind: str, created: str) -> None:
    await db.execute(
        "INSERT INTO memories(uid, kind, text, title, origin, created_at, session_id, source,"
        " content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (uid, kind, f"text of {uid}", f"title {uid}", "person", created, "s-1", "s.md", uid),
    )


@pytest.mark.anyio
async def test_an_unfold_unlinks_the_sources_and_holds_them(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = SleepChangesRepo(db)
        for uid, day in (("summary:a", "01"), ("summary:b", "02"), ("summary:c", "03")):
            await memory(db, uid, "summary", f"2026-02-{day}T10:00:00+00:00")
            await db.execute(
                "INSERT INTO memory_folds(source_uid, month_uid, folded_at) VALUES (?, ?, ?)",
                (uid, "month:2026-02", AT),
            )
        assert await repo.fold_holds() == set()
        # summary:z was never linked: it is held, and not reported as unlinked.
        unlinked = await repo.unfold_and_hold(
            "month:2026-02", ["summary:a", "summary:z"], at=AT, change_ref="c1#4"
        )
        assert unlinked == ["summary:a"]
        assert await repo.fold_holds() == {"summary:a", "summary:z"}
        left = await db.fetchall(
            "SELECT source_uid FROM memory_folds WHERE month_uid = ?", ("month:2026-02",)
        )
        assert sorted(r[0] for r in left) == ["summary:b", "summary:c"]
        # A hold already there is kept; unfolding nothing changes nothing.
        assert await repo.unfold_and_hold("month:2026-02", [], at=AT, change_ref="c1#5") == []
        again = await repo.unfold_and_hold("month:2026-02", ["summary:a"], at=AT, change_ref="c9#1")
        assert again == []
        row = await db.fetchone(
            "SELECT change FROM sleep_fold_holds WHERE source_uid = ?", ("summary:a",)
        )
        assert row[0] == "c1#4"


@pytest.mark.anyio
async def test_an_unpin_takes_the_pin_away_and_holds_the_fact(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = SleepChangesRepo(db)
        for fid in ("f-1", "f-2"):
            await db.execute(
                "INSERT INTO pinned_facts(fact_id, pinned_at, reason) VALUES (?, ?, ?)",
                (fid, AT, "promoted by use"),
            )
        assert await repo.pin_holds() == {}
        await repo.unpin_and_hold("f-1", at=AT, change_ref="c1#2")
        later = "2026-03-03T03:00:00+00:00"
        await repo.unpin_and_hold("f-1", at=later, change_ref="c2#1")  # held again: moved on
        assert await repo.pin_holds() == {"f-1": later}
        pinned = {r[0] for r in await db.fetchall("SELECT fact_id FROM pinned_facts")}
        assert pinned == {"f-2"}
        row = await db.fetchone("SELECT change FROM sleep_pin_holds WHERE fact_id = ?", ("f-1",))
        assert row[0] == "c2#1"
