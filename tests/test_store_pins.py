"""PinsRepo (daemon/store/pins.py): the pinned facts and the importance they are scored from,
on SQLite and on PostgreSQL."""

# ruff: noqa: F811  (the two-backend fixture is imported, then named by each test)

from __future__ import annotations

import pytest

from daemon.store.pins import Pin, PinsRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

TABLES = ("pinned_facts", "memories")


@pytest.mark.anyio
async def test_pins_are_added_and_removed_together_in_pinning_order(store: Store) -> None:
    async with store.open(*TABLES) as db:
        pins = PinsRepo(db)
        assert await pins.pinned_ids() == set() and await pins.pins() == []
        await pins.save(
            added=[Pin("f2", "importance 0.90"), Pin("f1", "confirmed by the person")],
            removed=[],
            at="2026-03-01T10:00:00+00:00",
        )
        await pins.save(added=[Pin("f0", "later")], removed=[], at="2026-03-02T10:00:00+00:00")
        assert await pins.pins() == [
            Pin("f1", "confirmed by the person"),
            Pin("f2", "importance 0.90"),
            Pin("f0", "later"),
        ]
        # A fact pinned already keeps its first pin and reason; the removal lands with it.
        await pins.save(
            added=[Pin("f2", "again")],
            removed=["f1", "never-pinned"],
            at="2026-03-03T10:00:00+00:00",
        )
        assert await pins.pins() == [Pin("f2", "importance 0.90"), Pin("f0", "later")]
        assert await pins.pinned_ids() == {"f2", "f0"}


@pytest.mark.anyio
async def test_importance_is_the_stored_one_or_none(store: Store) -> None:
    async with store.open(*TABLES) as db:
        pins = PinsRepo(db)
        await db.execute(
            "INSERT INTO memories(uid, kind, text, origin, created_at, content_hash, importance)"
            " VALUES ('fact:1', 'fact', 'x', 'person', '2026-03-01T10:00:00+00:00', 'h', 0.85)"
        )
        assert await pins.importance("fact:1") == pytest.approx(0.85)
        assert await pins.importance("fact:2") is None
