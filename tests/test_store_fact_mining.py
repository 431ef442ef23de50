"""`FactMiningRepo` (daemon/store/fact_mining.py): the messages sleep has not mined yet and
the facts' uses — one contract, on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from daemon.store.db import Database
from daemon.store.fact_mining import FactMiningRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


async def session(db: Database, sid: str, kind: str) -> None:
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, ?, ?, ?)",
        (sid, kind, f"{sid}.jsonl", T0.isoformat()),
    )


async def message(db: Database, sid: str, seq: int, minutes: int, turn: str | None) -> None:
    await db.execute(
        "INSERT INTO messages(session_id, seq, msg_id, turn_id, role, content, ts)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            sid,
            seq,
            f"{sid}-m{seq}",
            turn,
            "user" if seq % 2 == 0 else "assistant",
            f"said {seq} in {sid}",
            (T0 + timedelta(minutes=minutes)).isoformat(),
        ),
    )


@pytest.mark.anyio
async def test_unmined_messages_follow_each_sessions_cursor(store: Store) -> None:  # noqa: F811
    async with store.open("messages", "sessions", "fact_mining") as db:
        repo = FactMiningRepo(db)
        assert await repo.unmined(10) == []
        await session(db, "trunk-1", "trunk")
        await session(db, "fork-1", "fork")
        await session(db, "imported-1", "imported")
        for seq, minutes in ((0, 0), (1, 1), (2, 5)):
            await message(db, "trunk-1", seq, minutes, "turn-1" if seq < 2 else None)
        await message(db, "fork-1", 0, 2, "fork-1-t1")
        await message(db, "imported-1", 0, 3, None)  # not a trunk or fork session: never mined

        got = await repo.unmined(10)
        assert [(m.session_id, m.seq) for m in got] == [
            ("trunk-1", 0),
            ("trunk-1", 1),
            ("fork-1", 0),
            ("trunk-1", 2),
        ]
        first = got[0]
        assert (first.kind, first.transcript_path, first.msg_id, first.role) == (
            "trunk",
            "trunk-1.jsonl",
            "trunk-1-m0",
            "user",
        )
        assert (first.content, first.turn_id, first.ts) == (
            "said 0 in trunk-1",
            "turn-1",
            T0.isoformat(),
        )
        assert got[3].turn_id is None and got[2].kind == "fork"
        assert [m.seq for m in await repo.unmined(2)] == [0, 1]

        at = (T0 + timedelta(hours=1)).isoformat()
        await repo.advance({"trunk-1": 1, "fork-1": 0}, at=at)
        assert [(m.session_id, m.seq) for m in await repo.unmined(10)] == [("trunk-1", 2)]
        # A cursor never moves back.
        await repo.advance({"trunk-1": 0}, at=at)
        assert [(m.session_id, m.seq) for m in await repo.unmined(10)] == [("trunk-1", 2)]
        await repo.advance({}, at=at)
        row = await db.fetchone(
            "SELECT upto_seq, mined_at FROM fact_mining WHERE session_id = ?", ("trunk-1",)
        )
        assert (int(row[0]), row[1]) == (1, at)


@pytest.mark.anyio
async def test_the_uses_of_live_facts_and_profile_lines(store: Store) -> None:  # noqa: F811
    async with store.open("memories") as db:
        repo = FactMiningRepo(db)
        assert await repo.fact_uses() == {}
        for uid, kind, uses, retired in (
            ("f-1", "fact", 4, None),
            ("p-1", "profile", 0, None),
            ("f-old", "fact", 9, "2026-03-01T00:00:00+00:00"),
            ("chunk:s:1", "chunk", 7, None),
        ):
            await db.execute(
                "INSERT INTO memories(uid, kind, text, origin, created_at, retired_at, uses,"
                " content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (uid, kind, f"text {uid}", "person", T0.isoformat(), retired, uses, uid),
            )
        assert await repo.fact_uses() == {"f-1": 4, "p-1": 0}
