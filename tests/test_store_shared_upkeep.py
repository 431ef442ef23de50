"""`SharedUpkeepStore` (daemon/store/shared_upkeep.py): the shared facts as the nightly upkeep
reads and retires them, under its advisory lock — PostgreSQL only (a SQLite home has no shared
namespace), on the real server the suite starts."""

from __future__ import annotations

import psycopg
import pytest

from daemon.store.shared_upkeep import SharedUpkeepStore
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

LOCK = "reverie.shared.maintenance.test"
APP = "reverie shared upkeep test"


def share(url: str, text: str, *, valid_from: str | None, author: str = "agent_a") -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO shared.facts(text, origin, author, created_at, valid_from, version)"
            " VALUES (%s, 'person', %s, '2026-03-01T10:00:00+00:00', %s,"
            " nextval('shared.facts_version')) RETURNING id",
            (text, author, valid_from),
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.anyio
async def test_the_upkeep_retires_current_facts_once_under_its_lock(store: Store) -> None:  # noqa: F811
    if store.url is None:
        pytest.skip("the shared namespace lives on PostgreSQL only")
    async with store.open() as db:
        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute("DELETE FROM shared.facts")
        old = share(store.url, "the car is blue", valid_from="2026-03-01T10:00:00+00:00")
        new = share(store.url, "the car is red", valid_from=None, author="agent_b")
        gone = share(store.url, "the trip is on 1 March", valid_from=None)

        async with SharedUpkeepStore.locked(db, lock_key=LOCK, application=APP) as shared:
            assert shared is not None
            # A second session does not get the lock while the first holds it.
            async with SharedUpkeepStore.locked(db, lock_key=LOCK, application=APP) as other:
                assert other is None
            current = await shared.current()
            assert [f.id for f in current] == [old, new, gone]
            assert (current[0].text, current[0].origin, current[0].author) == (
                "the car is blue",
                "person",
                "agent_a",
            )
            assert current[0].valid_from == "2026-03-01T10:00:00+00:00"
            assert current[1].valid_from is None
            assert current[1].created_at == "2026-03-01T10:00:00+00:00"

            at = "2026-03-05T03:00:00+00:00"
            kw = {"at": at, "agent": "agent_x", "cycle_id": "cycle-1"}
            # Retiring a fact in favour of one no longer current does nothing.
            assert await shared.retire(
                gone, invalid_from=at, by=None, kind="stale", reason="past", **kw
            )
            assert not await shared.retire(
                old, invalid_from=at, by=gone, kind="superseded", reason="newer", **kw
            )
            assert await shared.retire(
                old, invalid_from=at, by=new, kind="superseded", reason="newer value", **kw
            )
            # Once only: a retired fact is not retired (nor re-stamped) again.
            assert not await shared.retire(
                old, invalid_from=at, by=new, kind="duplicate", reason="again", **kw
            )
            assert [f.id for f in await shared.current()] == [new]

            stamped = sorted(
                await shared.stamped("agent_x", ["superseded", "stale"]), key=lambda s: s.id
            )
            assert [(s.id, s.retired_as, s.superseded_by, s.retired_cycle) for s in stamped] == [
                (old, "superseded", new, "cycle-1"),
                (gone, "stale", None, "cycle-1"),
            ]
            assert (stamped[0].text, stamped[0].author, stamped[0].retired_reason) == (
                "the car is blue",
                "agent_a",
                "newer value",
            )
            assert stamped[0].invalid_from == at
            assert [s.id for s in await shared.stamped("agent_x", ["stale"])] == [gone]
            assert await shared.stamped("agent_y", ["superseded", "stale"]) == []

        # Closing the session freed the lock.
        async with SharedUpkeepStore.locked(db, lock_key=LOCK, application=APP) as again:
            assert again is not None
