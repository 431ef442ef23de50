"""Notices: the durable outbox, their delivery to the person's clients, quiet hours, the
notification command, the morning greeting and the standing checklist (issue 23)."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from daemon.bus import EventBus
from daemon.chat.protocol import LineReader
from daemon.chat.server import ChatServer
from daemon.chat.stream import UnixConnection, connect_unix
from daemon.clock import FakeClock
from daemon.events import NoticePosted
from daemon.schedule.courier import NoticeCourier
from daemon.schedule.outbox import NoticeError, Outbox
from daemon.settings import NoticesSettings, SchedulerSettings, Settings, SleepSettings
from daemon.store.db import Database
from tests.sleep_support import START, Rig, rig, wait_until

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


# --- delivery to the person's clients, on a real socket, with the daemon's services ---------


class Raw:
    """A chat client on the real socket, reading frames as they come."""

    def __init__(self, stream: UnixConnection) -> None:
        self.stream = stream
        self.reader = LineReader(stream, 1 << 24)
        self.frames: list[dict[str, Any]] = []

    async def frame(self) -> dict[str, Any]:
        line = await self.reader.receive()
        assert isinstance(line, bytes), f"expected a frame, got {line!r}"
        got = json.loads(line)
        self.frames.append(got)
        return got

    async def until(self, kind: str) -> dict[str, Any]:
        with anyio.fail_after(10):
            while True:
                got = await self.frame()
                if got["type"] == kind:
                    return got

    async def quiet_for(self, seconds: float) -> list[dict[str, Any]]:
        """Whatever arrives within `seconds` (nothing, when the daemon holds its notices)."""
        seen: list[dict[str, Any]] = []
        with anyio.move_on_after(seconds):
            while True:
                seen.append(await self.frame())
        return seen


@asynccontextmanager
async def connected(path: Path) -> AsyncIterator[Raw]:
    stream = await connect_unix(path)
    async with stream:
        yield Raw(stream)


@asynccontextmanager
async def chat_served(r: Rig) -> AsyncIterator[Path]:
    """The daemon's chat server on a real socket, answered by the services' own gateway."""
    path = r.home.root / "run" / "reverie.sock"
    server = ChatServer(
        path, r.services.gateway, max_frame_bytes=1 << 20, queue_frames=64, allow_uids=()
    )
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        yield path
        tg.cancel_scope.cancel()


def notices_settings(**notices: Any) -> Settings:
    return Settings(
        scheduler=SchedulerSettings(timezone="Europe/London"),
        notices=NoticesSettings(**notices),
    )


async def test_a_connected_client_gets_a_notice_at_once_and_it_is_marked_delivered(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        async with rig(tmp_path / "home", settings=notices_settings()) as r:
            async with chat_served(r) as path, connected(path) as person:
                assert (await person.frame())["type"] == "hello"
                await wait_until(lambda: r.services.courier.connected == 1, "the person attached")
                notice = await r.services.outbox.post(
                    kind="reminder",
                    text="Call the plumber",
                    key="fire:s-1:2026-03-02T09:00:00+00:00",
                    due_at=START,
                    late_s=42.0,
                    schedule_id="s-1",
                )
                got = await person.until("notice")
                assert got == {
                    "type": "notice",
                    "id": notice.id,
                    "kind": "reminder",
                    "text": "Call the plumber",
                    "ts": START.isoformat(),
                    "due_at": START.isoformat(),
                    "late_s": 42.0,
                    "schedule_id": "s-1",
                }
                await wait_until(
                    lambda: _delivered(r, notice.id),
                    "the notice marked delivered",
                )
                # Posting the same key again (a retry after a crash) sends nothing new.
                await r.services.outbox.post(
                    kind="reminder", text="Call the plumber", key=notice.key
                )
                assert [f for f in await person.quiet_for(0.3) if f["type"] == "notice"] == []
            assert await r.services.outbox.pending() == []


def _delivered(r: Rig, notice_id: str) -> bool:
    """Whether the notice is marked delivered, read as another process would."""
    conn = sqlite3.connect(f"file:{r.home.db_file}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT delivered_at FROM notices WHERE id = ?", (notice_id,)).fetchone()
    finally:
        conn.close()
    return row is not None and row[0] is not None


async def test_what_came_while_nobody_was_connected_opens_the_next_chat(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with rig(tmp_path / "home", settings=notices_settings()) as r:
            async with chat_served(r) as path:
                first = await r.services.outbox.post(
                    kind="task", text="The build is green.", key="a"
                )
                r.clock.advance(60)
                second = await r.services.outbox.post(kind="system", text="Disk 91% full.", key="b")
                await r.bus.drain()
                assert [n.id for n in await r.services.outbox.pending()] == [first.id, second.id]
                async with connected(path) as person:
                    assert (await person.frame())["type"] == "hello"
                    opening = [await person.frame(), await person.frame()]
                    assert [(f["type"], f["id"]) for f in opening] == [
                        ("notice", first.id),
                        ("notice", second.id),
                    ]
                    await wait_until(
                        lambda: _delivered(r, second.id), "the opening notices delivered"
                    )
                # Delivered once: the next chat opens with nothing.
                async with connected(path) as again:
                    assert (await again.frame())["type"] == "hello"
                    assert await again.quiet_for(0.3) == []


NOTIFY_SCRIPT = """
import sys
with open(sys.argv[1], "a") as fh:
    fh.write(sys.argv[2] + "\\n")
"""


def _notify_command(tmp_path: Path) -> tuple[list[str], Path]:
    script = tmp_path / "notify.py"
    script.write_text(NOTIFY_SCRIPT)
    shown = tmp_path / "shown.txt"
    return [sys.executable, str(script), str(shown)], shown


async def test_quiet_hours_hold_a_notice_until_they_end_then_it_is_pushed_and_notified(
    tmp_path: Path,
) -> None:
    command, shown = _notify_command(tmp_path)
    settings = Settings(
        scheduler=SchedulerSettings(timezone="Europe/London"),
        sleep=SleepSettings(nightly=False),
        notices=NoticesSettings(quiet_hours="22:00-07:00", notify_command=command),
    )
    # 23:00 in London (GMT in early March): inside the window.
    clock = FakeClock(datetime(2026, 3, 2, 23, 0, tzinfo=UTC))
    with anyio.fail_after(60):
        async with rig(tmp_path / "home", settings=settings, clock=clock) as r:
            courier = r.services.courier
            scheduler = r.services.scheduler
            # The release is a job on the daemon's scheduler at the window's end, not a poll.
            assert scheduler.next_run("notices.quiet_hours_end") == datetime(
                2026, 3, 3, 7, 0, tzinfo=UTC
            )
            async with chat_served(r) as path, connected(path) as person:
                assert (await person.frame())["type"] == "hello"
                await wait_until(lambda: courier.connected == 1, "the person attached")
                held = await r.services.outbox.post(
                    kind="task", text="The nightly backup failed.", key="late"
                )
                await r.bus.drain()
                assert await person.quiet_for(0.5) == []
                assert not shown.exists()
                assert [n.id for n in await r.services.outbox.pending()] == [held.id]

                # The night passes on the daemon's own scheduler and clock.
                async with anyio.create_task_group() as tg:
                    await tg.start(scheduler.run)
                    release = datetime(2026, 3, 3, 7, 0, tzinfo=UTC)
                    while clock.now() < release + timedelta(minutes=1):
                        await anyio.lowlevel.checkpoint()
                    tg.cancel_scope.cancel()
                got = await person.until("notice")
                assert (got["id"], got["text"]) == (held.id, "The nightly backup failed.")
                await wait_until(lambda: shown.exists(), "the desktop notification")
                await wait_until(lambda: _delivered(r, held.id), "the notice marked delivered")
            assert shown.read_text() == "The nightly backup failed.\n"
            assert scheduler.describe()["notices.quiet_hours_end"]["runs"] == 1


async def test_the_notification_command_gets_the_text_as_one_argument_and_failures_are_not_fatal(
    tmp_path: Path,
) -> None:
    command, shown = _notify_command(tmp_path)
    clock = FakeClock(T0)
    async with await Database.open(tmp_path / "db.sqlite") as db, EventBus() as bus:
        outbox = Outbox(db, bus=bus, clock=clock)

        def courier(argv: list[str], timeout_s: float = 10.0) -> NoticeCourier:
            return NoticeCourier(
                outbox=outbox,
                settings=NoticesSettings(notify_command=argv, notify_timeout_s=timeout_s),
                zone=UTC,
                clock=clock,
            )

        with anyio.fail_after(30):
            async with courier(command) as c:
                # No shell: quotes, a semicolon and $() are the text, nothing runs.
                text = "Call Ada; $(touch pwned) 'at nine'"
                assert await c.notify(text)
            assert shown.read_text() == text + "\n"
            assert not (tmp_path / "pwned").exists()
            async with courier([sys.executable, "-c", "import sys; sys.exit(3)"]) as c:
                assert not await c.notify("x")
            async with courier(["/nonexistent/notify-send"]) as c:
                assert not await c.notify("x")
            started = anyio.current_time()
            async with courier([sys.executable, "-c", "import time; time.sleep(30)"], 0.5) as c:
                assert not await c.notify("x")
            assert anyio.current_time() - started < 5
