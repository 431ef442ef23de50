"""The fork lineage's repository (`daemon/store/forks.py`), on SQLite and on PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from daemon.store.db import Database
from daemon.store.forks import ForkRow, ForksRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


async def start(
    forks: ForksRepo, fid: str, minutes: int, *, turn: str = "turn-1", **kw: str
) -> None:
    await forks.add(
        fork_id=fid,
        parent_session_id=kw.get("parent", "trunk-1"),
        parent_turn_id=turn,
        parent_call_id=kw.get("call"),
        root_session_id=kw.get("root", "trunk-1"),
        depth=int(kw.get("depth", "1")),
        task=f"task of {fid}",
        status="running",
        transcript_path=f"forks/{fid}.jsonl",
        started_at=at(minutes),
    )


@pytest.mark.anyio
async def test_forks_start_finish_and_read_back(store: Store) -> None:  # noqa: F811
    async with store.open("forks") as db:
        forks = ForksRepo(db)
        assert await forks.get("fork-a") is None and await forks.all() == []
        await start(forks, "fork-b", 5, call="call-2")
        await start(forks, "fork-a", 0, call="call-1")
        await start(forks, "fork-c", 1, parent="fork-a", depth="2")
        assert [r.id for r in await forks.all()] == ["fork-a", "fork-c", "fork-b"]
        assert await forks.count_with_status("running") == 3

        await forks.finish(
            "fork-a",
            status="complete",
            ended_at=at(9),
            outcome="success",
            summary="found it",
            stop_reason=None,
            tokens=1234,
        )
        got = await forks.get("fork-a")
        assert got is not None
        assert (got.status, got.outcome, got.summary, got.tokens, got.ended_at) == (
            "complete",
            "success",
            "found it",
            1234,
            at(9),
        )
        assert (got.parent_call_id, got.depth, got.task, got.reported, got.retained) == (
            "call-1",
            1,
            "task of fork-a",
            True,
            None,
        )
        assert [r.id for r in await forks.with_status("running")] == ["fork-c", "fork-b"]
        assert await forks.counts_by_status() == {"complete": 1, "running": 2}


@pytest.mark.anyio
async def test_forks_failed_by_a_restart_stay_unreported_until_marked(store: Store) -> None:  # noqa: F811
    async with store.open("forks") as db:
        forks = ForksRepo(db)
        await start(forks, "fork-a", 0)
        await start(forks, "fork-b", 1)
        await start(forks, "fork-other-turn", 2, turn="turn-2")
        assert await forks.unreported("trunk-1", "turn-1") == []

        await forks.fail_unreported("fork-b", reason="the daemon stopped", at=at(3))
        await forks.fail_unreported("fork-a", reason="the daemon stopped", at=at(3))
        await forks.fail_unreported("fork-other-turn", reason="the daemon stopped", at=at(3))
        waiting = await forks.unreported("trunk-1", "turn-1")
        assert [r.id for r in waiting] == ["fork-a", "fork-b"]
        assert all(
            (r.status, r.stop_reason, r.ended_at, r.reported)
            == ("failed", "the daemon stopped", at(3), False)
            for r in waiting
        )
        await forks.mark_reported(["fork-a", "fork-b"])
        assert await forks.unreported("trunk-1", "turn-1") == []
        assert [r.id for r in await forks.unreported("trunk-1", "turn-2")] == ["fork-other-turn"]


@pytest.mark.anyio
async def test_forks_of_a_turn_and_of_a_tree(store: Store) -> None:  # noqa: F811
    async with store.open("forks") as db:
        forks = ForksRepo(db)
        assert await forks.latest_of_turn("trunk-1", "turn-1") is None
        await start(forks, "fork-a", 0)
        await start(forks, "fork-c", 7)
        await start(forks, "fork-b", 7)
        await start(forks, "fork-x", 9, turn="turn-2", root="trunk-0", parent="trunk-0")
        latest = await forks.latest_of_turn("trunk-1", "turn-1")
        # The newest start wins; on a tie, the greater id.
        assert latest is not None and latest.id == "fork-c"
        assert await forks.latest_of_turn("trunk-1", "turn-9") is None

        assert await forks.in_tree("trunk-1", besides="fork-b") == ["fork-a", "fork-c"]
        assert await forks.in_tree("trunk-1") == ["fork-a", "fork-b", "fork-c"]
        assert await forks.in_tree("trunk-0") == ["fork-x"]


async def add_session(db: Database, sid: str, path: str) -> None:
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, ?, ?, ?)",
        (sid, "fork", path, T0.isoformat()),
    )


async def session_row(db: Database, sid: str) -> tuple[str, str | None]:
    row = await db.fetchone("SELECT transcript_path, ended_at FROM sessions WHERE id = ?", (sid,))
    return str(row[0]), row[1]


@pytest.mark.anyio
async def test_forks_move_their_own_session_row(store: Store) -> None:  # noqa: F811
    async with store.open("forks", "sessions") as db:
        forks = ForksRepo(db)
        await start(forks, "fork-a", 0)
        await add_session(db, "fork-a", "forks/fork-a.jsonl")
        assert await forks.session_transcript("fork-a") == "forks/fork-a.jsonl"
        assert await forks.session_transcript("nobody") == ""

        await forks.end_session("fork-a", at(5), keep_earlier=True)
        assert await session_row(db, "fork-a") == ("forks/fork-a.jsonl", at(5))
        # An end already recorded is kept when asked to; otherwise it is replaced.
        await forks.end_session("fork-a", at(8), keep_earlier=True)
        assert (await session_row(db, "fork-a"))[1] == at(5)
        await forks.end_session("fork-a", at(8))
        assert (await session_row(db, "fork-a"))[1] == at(8)

        await forks.mark_retained("fork-a", "archived", "forks/archive/fork-a.jsonl.gz")
        got = await forks.get("fork-a")
        assert got is not None
        assert (got.retained, got.transcript_path) == ("archived", "forks/archive/fork-a.jsonl.gz")
        assert (await session_row(db, "fork-a"))[0] == "forks/archive/fork-a.jsonl.gz"


@pytest.mark.anyio
async def test_forks_rebuilt_rows_keep_the_ones_present(store: Store) -> None:  # noqa: F811
    async with store.open("forks") as db:
        forks = ForksRepo(db)
        assert await forks.add_missing([]) == 0
        await start(forks, "fork-a", 0)
        present = await forks.get("fork-a")
        assert present is not None
        rebuilt = replace(
            present,
            status="complete",
            summary="from the transcript",
            ended_at=at(4),
            tokens=77,
            reported=True,
            retained="archived",
        )
        other = replace(rebuilt, id="fork-b", started_at=at(1), reported=False, retained=None)
        assert await forks.add_missing([rebuilt, other]) == 1
        kept = await forks.get("fork-a")
        assert kept == present  # the row already there is not overwritten
        back = await forks.get("fork-b")
        assert back == other
        assert isinstance(back, ForkRow) and back.reported is False
