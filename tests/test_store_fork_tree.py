"""`ForksRepo.tree` (daemon/store/forks.py): a session's whole delegate tree, read from the
trunk session at its top or from any fork in it — what the work-done list follows from a
`delegate` call to the forks it started. On SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from daemon.store.db import Database
from daemon.store.forks import ForksRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


async def _fork(
    db: Database, fork_id: str, parent: str, call: str | None, root: str, minutes: int
) -> None:
    await db.execute(
        "INSERT INTO forks(id, parent_session_id, parent_turn_id, parent_call_id,"
        " root_session_id, depth, task, status, transcript_path, started_at)"
        " VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            fork_id,
            parent,
            "turn-1",
            call,
            root,
            1 if parent == root else 2,
            f"task of {fork_id}",
            "complete",
            f"/h/forks/{fork_id}.jsonl",
            (T0 + timedelta(minutes=minutes)).isoformat(),
        ),
    )


@pytest.mark.anyio
async def test_a_delegate_tree_is_read_whole_from_any_session_in_it(store: Store) -> None:  # noqa: F811
    async with store.open("forks") as db:
        forks = ForksRepo(db)
        assert await forks.tree("trunk-1") == []
        await _fork(db, "fork-b", "trunk-1", "call-2", "trunk-1", minutes=5)
        await _fork(db, "fork-a", "trunk-1", "call-1", "trunk-1", minutes=1)
        await _fork(db, "fork-a1", "fork-a", "call-9", "trunk-1", minutes=2)
        await _fork(db, "fork-c", "trunk-1", None, "trunk-1", minutes=5)
        await _fork(db, "fork-x", "trunk-2", "call-1", "trunk-2", minutes=0)

        whole = [
            (f.id, f.parent_session_id, f.parent_call_id, f.transcript_path)
            for f in await forks.tree("trunk-1")
        ]
        # Oldest first, a tie on the start broken by id; another trunk's forks are not in it.
        assert whole == [
            ("fork-a", "trunk-1", "call-1", "/h/forks/fork-a.jsonl"),
            ("fork-a1", "fork-a", "call-9", "/h/forks/fork-a1.jsonl"),
            ("fork-b", "trunk-1", "call-2", "/h/forks/fork-b.jsonl"),
            ("fork-c", "trunk-1", None, "/h/forks/fork-c.jsonl"),
        ]
        # From a fork deep in the tree: the same whole tree, through its root.
        assert [f.id for f in await forks.tree("fork-a1")] == [w[0] for w in whole]
        assert [f.id for f in await forks.tree("trunk-2")] == ["fork-x"]
        assert [f.status for f in await forks.tree("fork-x")] == ["complete"]
