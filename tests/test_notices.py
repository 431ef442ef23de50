"""Notices: the durable outbox, their delivery to the person's clients, quiet hours, the
notification command, the morning greeting and the standing checklist (issue 23)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.events import NoticePosted
from daemon.schedule.outbox import NoticeError, Outbox
from daemon.store.db import Database

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


async def test_posting_a_key_twice_returns_the_first_notice_and_announces_once(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)
    heard: list[NoticePosted] = []
    async with await Database.open(tmp_path / "db.sqlite") as db, EventBus() as bus:
        bus.on(NoticePosted, heard.append, name="test.heard")
        outbox = Outbox(db, bus=bus, clock=clock)
        due = T0 - timedelta(minutes=5)
        first = await outbox.post(
            kind="reminder",
            text="call the plumber",
            key="fire:s-1:2026-03-02T08:55:00+00:00",
            due_at=due,
            late_s=300.0,
            schedule_id="s-1",
        )
        clock.advance(60)
        again = await outbox.post(
            kind="reminder", text="something else", key="fire:s-1:2026-03-02T08:55:00+00:00"
        )
        await bus.drain()
        assert again == first
        assert (first.kind, first.text, first.due_at, first.late_s, first.schedule_id) == (
            "reminder",
            "call the plumber",
            due,
            300.0,
            "s-1",
        )
        assert (await db.fetchone("SELECT COUNT(*) FROM notices"))[0] == 1
        assert [e.notice_id for e in heard] == [first.id]


async def test_a_notice_is_pending_until_delivered_and_kept_until_acknowledged(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)
    async with await Database.open(tmp_path / "db.sqlite") as db, EventBus() as bus:
        outbox = Outbox(db, bus=bus, clock=clock)
        a = await outbox.post(kind="reminder", text="a", key="k-a")
        clock.advance(1)
        b = await outbox.post(kind="task", text="b", key="k-b")
        clock.advance(1)
        c = await outbox.post(kind="system", text="c", key="k-c")
        assert [n.id for n in await outbox.pending()] == [a.id, b.id, c.id]

        assert await outbox.delivered([a.id, a.id]) == 1
        assert await outbox.delivered([a.id]) == 0  # the first delivery's time stands
        assert [n.id for n in await outbox.pending()] == [b.id, c.id]
        assert [n.id for n in await outbox.unacknowledged()] == [a.id, b.id, c.id]
        got = await outbox.get(a.id)
        assert got is not None and got.delivered_at == T0 + timedelta(seconds=2)

        # Acknowledged before any client got it: the person saw it (`reverie notices`), so it
        # is never pushed again.
        assert await outbox.acknowledge([b.id, "n-unknown"]) == 1
        assert [n.id for n in await outbox.pending()] == [c.id]
        assert [n.id for n in await outbox.unacknowledged()] == [a.id, c.id]
        assert [n.id for n in await outbox.recent(2)] == [b.id, c.id]
        assert [n.id for n in await outbox.recent(10)] == [a.id, b.id, c.id]

    # Durable: a new process reads the same state.
    async with await Database.open(tmp_path / "db.sqlite") as db, EventBus() as bus:
        outbox = Outbox(db, bus=bus, clock=clock)
        assert [n.id for n in await outbox.pending()] == [c.id]
        assert (await outbox.by_key("k-a")) == (await outbox.get(a.id))


async def test_a_notice_that_cannot_be_posted_says_why(tmp_path: Path) -> None:
    async with await Database.open(tmp_path / "db.sqlite") as db, EventBus() as bus:
        outbox = Outbox(db, bus=bus, clock=FakeClock(T0))
        with pytest.raises(NoticeError, match="unknown notice kind 'shout'"):
            await outbox.post(kind="shout", text="x", key="k")
        with pytest.raises(NoticeError, match="needs text"):
            await outbox.post(kind="system", text="  ", key="k")
        with pytest.raises(NoticeError, match="needs a key"):
            await outbox.post(kind="system", text="x", key="")
        assert await outbox.pending() == []
        with anyio.fail_after(5):
            long = await outbox.post(kind="task", text="x" * 10_000, key="long")
        assert len(long.text) == 4000 and long.text.endswith("…")
