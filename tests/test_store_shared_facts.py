"""Shared facts (`SharedFactsRepo`): PostgreSQL's `shared.facts`, read by every agent on a store.

The two-backend fixture runs each test on SQLite too, where there is no shared namespace: there
the test says so and skips (daemon.memory.shared refuses sharing on SQLite before any call).
"""

from __future__ import annotations

import pytest

from daemon.store.db import Database
from daemon.store.shared_facts import SharedFactRetired, SharedFactsRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

AT = "2026-03-02T09:00:00.000000+00:00"
LATER = "2026-03-05T09:00:00.000000+00:00"


def _postgres_only(db: Database) -> None:
    if not db.is_postgres:
        pytest.skip("shared facts are PostgreSQL's (a SQLite store is one agent's alone)")


@pytest.mark.anyio
async def test_a_shared_fact_is_stored_and_followed_by_version(store: Store) -> None:  # noqa: F811
    async with store.open() as db:
        _postgres_only(db)
        await db.execute("DELETE FROM shared.facts")
        repo = SharedFactsRepo(db)
        start = max([0, *(r.version for r in await repo.changed_since(0))])
        a = await repo.add(
            "the wifi password is on the fridge", tags="home", origin="person", author="ada", at=AT
        )
        b = await repo.add(
            "the boiler is serviced in March", tags="", origin="agent", author="ben", at=AT
        )
        got = await repo.get(a)
        assert got is not None and (got.text, got.tags, got.author, got.valid_from) == (
            "the wifi password is on the fridge",
            "home",
            "ada",
            AT,
        )
        assert got.retired_at is None and await repo.get(b + 1000) is None
        changed = await repo.changed_since(start)
        assert [r.id for r in changed] == [a, b] and changed[0].version < changed[1].version
        assert await repo.changed_since(changed[1].version) == []


@pytest.mark.anyio
async def test_a_retraction_retires_once_and_moves_the_version(store: Store) -> None:  # noqa: F811
    async with store.open() as db:
        _postgres_only(db)
        await db.execute("DELETE FROM shared.facts")
        repo = SharedFactsRepo(db)
        a = await repo.add("Ana lives in Lisbon", tags="", origin="person", author="ada", at=AT)
        before = await repo.get(a)
        assert before is not None
        assert await repo.retract(a, at=LATER, reason="moved", by="ada")
        assert not await repo.retract(a, at=LATER, reason="again", by="ben")  # the first wins
        assert not await repo.retract(a + 1000, at=LATER, reason="x", by="ada")
        after = await repo.get(a)
        assert after is not None and (after.retired_at, after.retired_as) == (LATER, "retracted")
        assert after.version > before.version
        assert [r.id for r in await repo.changed_since(before.version)] == [a]
        row = await db.fetchone(
            "SELECT retired_by, invalid_from FROM shared.facts WHERE id = ?", (a,)
        )
        assert tuple(row) == ("ada", LATER)


@pytest.mark.anyio
async def test_a_correction_is_one_transaction(store: Store) -> None:  # noqa: F811
    async with store.open() as db:
        _postgres_only(db)
        await db.execute("DELETE FROM shared.facts")
        repo = SharedFactsRepo(db)
        a = await repo.add(
            "Ana lives in Lisbon", tags="people", origin="person", author="ada", at=AT
        )
        new = await repo.correct(
            a,
            "Ana lives in Porto",
            tags="people",
            origin="person",
            author="ada",
            at=LATER,
            reason="moved",
        )
        old, now = await repo.get(a), await repo.get(new)
        assert old is not None and now is not None
        assert (old.retired_as, old.superseded_by, old.retired_at) == ("corrected", new, LATER)
        assert (now.text, now.tags, now.retired_at) == ("Ana lives in Porto", "people", None)
        # The old one is retired now: a second correction writes nothing at all.
        count = len(await repo.changed_since(0))
        with pytest.raises(SharedFactRetired):
            await repo.correct(
                a, "Ana lives in Faro", tags="", origin="person", author="ada", at=LATER, reason="x"
            )
        assert len(await repo.changed_since(0)) == count
        texts = [r.text for r in await repo.changed_since(0)]
        assert "Ana lives in Faro" not in texts
