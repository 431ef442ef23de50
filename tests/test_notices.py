"""Notices: the durable outbox, their delivery to the person's clients, quiet hours, the
notification command, the morning greeting and the standing checklist (issue 23)."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import anyio.lowlevel
import pytest

from daemon.bus import EventBus
from daemon.chat.link import DaemonLink
from daemon.chat.protocol import (
    LineReader,
    ProtocolError,
    SeenFrame,
    encode,
    parse_client_frame,
    seen,
)
from daemon.chat.server import ChatServer
from daemon.chat.stream import UnixConnection, connect_unix
from daemon.clock import FakeClock
from daemon.events import NoticePosted, SleepFinished
from daemon.paths import Home
from daemon.schedule.courier import NoticeCourier
from daemon.schedule.greeting import (
    MorningGreeting,
    compose_greeting,
    open_threads,
    todays_schedule,
)
from daemon.schedule.outbox import NoticeError, Outbox
from daemon.schedule.store import ScheduleStore
from daemon.settings import (
    NoticesSettings,
    SchedulerSettings,
    ScheduleSettings,
    Settings,
    SleepSettings,
)
from daemon.store.db import Database
from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import OFFLINE_ROLES, REPO, Client, DaemonProcess, daemon_env, run_cli
from tests.harness import wait_until as wait_for
from tests.sleep_support import START, Rig, rig, wait_until
from tests.test_checklist import is_check
from tests.test_daemon_sleep import SUMMARY, RoutedFake

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

    async def send(self, frame: dict[str, Any]) -> None:
        await self.stream.send(encode(frame))

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


async def test_a_connected_client_gets_a_notice_at_once_and_it_is_delivered_once_it_says_seen(
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
                # Written to the socket is not shown: pending until the client says `seen`.
                await r.bus.drain()
                assert [f for f in await person.quiet_for(0.3) if f["type"] == "notice"] == []
                assert not _delivered(r, notice.id)
                assert [n.id for n in await r.services.outbox.pending()] == [notice.id]
                # An id this connection was not sent is refused; the one it was sent is marked.
                await person.send(seen(ids=[notice.id, "n-never-sent"]))
                refused = await person.until("error")
                assert refused["code"] == "unknown_notice"
                assert "n-never-sent" in refused["message"] and notice.id not in refused["message"]
                await wait_until(lambda: _delivered(r, notice.id), "the notice marked delivered")
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
                # A connection that only reads (a command client) takes the frames, shows
                # nothing and says no `seen`: both stay pending.
                async with connected(path) as glance:
                    assert (await glance.frame())["type"] == "hello"
                    assert [(await glance.frame())["id"] for _ in range(2)] == [first.id, second.id]
                    await anyio.sleep(0.2)
                pending = await r.services.outbox.pending()
                assert [n.id for n in pending] == [first.id, second.id]
                async with connected(path) as person:
                    assert (await person.frame())["type"] == "hello"
                    opening = [await person.frame(), await person.frame()]
                    assert [(f["type"], f["id"]) for f in opening] == [
                        ("notice", first.id),
                        ("notice", second.id),
                    ]
                    await person.send(seen(ids=[first.id, second.id]))
                    await wait_until(
                        lambda: _delivered(r, first.id) and _delivered(r, second.id),
                        "the opening notices delivered",
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
                await person.send(seen(ids=[held.id]))
                # The command's file exists from its open; its line is there at its close.
                await wait_until(
                    lambda: shown.exists() and shown.read_text().endswith("\n"),
                    "the desktop notification",
                )
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


# --- through the real daemon: the standing checklist's notices, another uid, the next chat --


class ChecklistFake(FakeAnthropic):
    """The fake Messages API; the checklist's forks report `findings` in turn, then "nothing"."""

    def __init__(self) -> None:
        super().__init__()
        self.findings: deque[str] = deque()

    def _take(self, body: dict[str, Any]) -> Planned:
        if is_check(body):
            with self._lock:
                text = self.findings.popleft() if self.findings else "NOTHING TO REPORT."
            return Planned.tool("task_complete", {"summary": text, "outcome": "success"})
        return super()._take(body)

    def checklist_requests(self) -> list[RecordedRequest]:
        return [r for r in self.message_requests if is_check(r.body)]


DAEMON_CONFIG = (
    """
[scheduler]
timezone = "UTC"

[journal]
heartbeat_minutes = {heartbeat}

[notices]
checklist_minutes = {every}

[chat]
allow_uids = [65534]

[sleep]
nightly = false

# Only the trunk and the checklist's forks talk to the fake (not the forks' summaries).
"""
    + OFFLINE_ROLES
)

CHECKLIST = """# My checklist
<!-- Things to look at on each heartbeat. -->
- Look at the build in ~/ci/status; tell me when it is red.
"""

# Another uid's client: prints every frame it receives (one JSON per line); stays until killed.
GUEST = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
for line in s.makefile("rb"):
    sys.stdout.write(line.decode()); sys.stdout.flush()
"""
NOBODY = 65534


def _python_for(uid: int) -> str | None:
    """An interpreter another uid can run (the venv may sit in a private directory)."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            done = subprocess.run(
                [candidate, "-c", "pass"], user=uid, capture_output=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return candidate
    return None


@pytest.fixture
def shared_home() -> Iterator[Path]:
    """A home whose socket another uid can reach (tmp_path's parents are private)."""
    base = Path(tempfile.mkdtemp(prefix="reverie-notices-"))
    base.chmod(0o711)
    home = base / "home"
    home.mkdir()
    yield home
    shutil.rmtree(base, ignore_errors=True)


def _notice_rows(home: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        return [
            tuple(r)
            for r in conn.execute(
                "SELECT id, kind, text, delivered_at, acknowledged_at FROM notices ORDER BY rowid"
            )
        ]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


class PtyChat:
    """The interactive `reverie chat` in a pseudo-terminal, as a person runs it."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the client, with the pty as its controlling terminal
            os.chdir(REPO)
            argv = [sys.executable, "-m", "daemon.cli", "chat", "--home", str(home)]
            os.execve(sys.executable, argv, env)
        self.seen = bytearray()

    def wait_for(self, needle: bytes, timeout: float = 20) -> bytes:
        """Read until the chat has shown `needle` and waits at its prompt; return all shown."""
        deadline = time.monotonic() + timeout
        # At the prompt too: a Ctrl-D typed before readline is ready is lost.
        while needle not in self.seen or not self.seen.rstrip().endswith(b">"):
            assert time.monotonic() < deadline, f"{needle!r} not shown: {bytes(self.seen)!r}"
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                self.seen.extend(os.read(self.fd, 4096))
        return bytes(self.seen)

    def leave(self) -> None:
        """Ctrl-D at the prompt; the client must exit cleanly."""
        try:
            os.write(self.fd, b"\x04")
            _, status = os.waitpid(self.pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, bytes(self.seen)
        finally:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(self.fd)


def _interactive_chat_shows(home: Path, env: dict[str, str], needle: bytes) -> bytes:
    """Run the interactive `reverie chat` until it shows `needle`; leave."""
    chat = PtyChat(home, env)
    try:
        return chat.wait_for(needle)
    finally:
        chat.leave()


@pytest.mark.skipif(os.geteuid() != 0, reason="a second uid's client needs root to start")
def test_checklist_notices_reach_the_person_live_and_in_the_next_chat_never_another_uid(
    shared_home: Path,
) -> None:
    python = _python_for(NOBODY)
    if python is None:
        pytest.skip("no interpreter the other uid can run")
    home = shared_home
    (home / "reverie.toml").write_text(DAEMON_CONFIG.format(heartbeat=0.03, every=0.03))
    (home / "HEARTBEAT.md").write_text(CHECKLIST)
    with ChecklistFake() as fake:
        env = daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        d = DaemonProcess(home=home, env=env)
        d.start()
        guest: subprocess.Popen[str] | None = None
        try:
            # Loosened on purpose: the uid check (SO_PEERCRED) is what is tested, not modes.
            d.socket_path.parent.chmod(0o711)
            d.socket_path.chmod(0o666)
            guest = subprocess.Popen(
                [python, "-c", GUEST, str(d.socket_path)],
                user=NOBODY,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            chat = PtyChat(home, env)
            try:
                chat.wait_for(b"connected")
                with Client(d.socket_path, timeout=30) as person:
                    assert person.hello()["type"] == "hello"
                    # Checked on the heartbeat, one call; the finding reaches the person at once,
                    # in each of their chats.
                    fake.findings.append("The build is red since 08:12: test_login fails.")
                    live = person.recv_until(lambda f: f["type"] == "notice")[-1]
                    shown = chat.wait_for(b"test_login fails.")
                    assert b"checklist" in shown
                    assert (live["kind"], live["text"]) == (
                        "checklist",
                        "The build is red since 08:12: test_login fails.",
                    )
                    wait_for(lambda: _notice_rows(home)[0][3] is not None, 10, "delivered")
            finally:
                chat.leave()
            request = fake.checklist_requests()[0]
            prompt = json.dumps(request.body["messages"])
            assert "Look at the build in ~/ci/status" in prompt
            assert "My checklist" not in prompt and "Things to look at" not in prompt

            # Nobody connected now: the next finding waits in the outbox.
            fake.findings.append("The disk of the build machine is 97% full.")
            wait_for(lambda: len(_notice_rows(home)) == 2, 20, "the second finding")
            # "Nothing to report" answers meanwhile cost no notice.
            calls = len(fake.checklist_requests())
            wait_for(lambda: len(fake.checklist_requests()) >= calls + 2, 20, "more checks")
            assert len(_notice_rows(home)) == 2
            waiting = _notice_rows(home)[1]
            assert waiting[1:4] == ("checklist", "The disk of the build machine is 97% full.", None)

            listed = run_cli("notices", "--home", str(home), env=env)
            assert listed.returncode == 0, listed.stderr
            assert "seen" in listed.stdout and "new" in listed.stdout
            assert "97% full" in listed.stdout

            # The next chat opens with it (on stderr; stdout is the reply).
            fake.enqueue(Planned.reply("Hello again."))
            chat = run_cli("chat", "-m", "hello", "--home", str(home), env=env)
            assert chat.returncode == 0, chat.stderr
            assert chat.stdout.strip() == "Hello again."
            assert "The disk of the build machine is 97% full." in chat.stderr
            assert "checklist" in chat.stderr
            wait_for(lambda: _notice_rows(home)[1][3] is not None, 10, "delivered on connect")

            acked = run_cli("notices", "--ack", waiting[0], "--home", str(home), env=env)
            assert acked.returncode == 0 and "acknowledged 1 notice" in acked.stdout
            rest = run_cli("notices", "--json", "--home", str(home), env=env)
            assert [json.loads(line)["state"] for line in rest.stdout.splitlines()] == ["seen"]
            assert run_cli("notices", "--ack-all", "--home", str(home), env=env).returncode == 0
            none = run_cli("notices", "--home", str(home), env=env)
            assert "no notices waiting" in none.stdout
            every = run_cli("notices", "--all", "--json", "--home", str(home), env=env)
            assert [json.loads(line)["state"] for line in every.stdout.splitlines()] == [
                "acked",
                "acked",
            ]
            bad = run_cli("notices", "--ack", "n-nope", "--home", str(home), env=env)
            assert bad.returncode == 1 and "no notice n-nope" in bad.stderr
        finally:
            if guest is not None:
                guest.kill()
                out, _ = guest.communicate(timeout=10)
            d.stop()
    guest_frames = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert guest_frames and guest_frames[0]["type"] == "hello"
    assert [f for f in guest_frames if f["type"] == "notice"] == []


# --- the morning greeting, through the real daemon's sleep cycle ---------------------------

GREETING_CONFIG = """
[providers.anthropic]
max_retries = 1
backoff_base_s = 0.05
backoff_max_s = 0.1

[scheduler]
timezone = "UTC"

[sleep]
nightly = false
"""

LETTER = """# Wake-up notes

## Where things stand
- Porto in May is settled.

## Open threads
- Ask Ada whether her Lisbon flat is free on 12 May.
- Book the train from Porto to Lisbon.

## Decisions
- Porto in May.
"""


def test_after_a_sleep_the_first_chat_opens_with_one_greeting_and_a_restart_does_not_repeat_it(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(GREETING_CONFIG)
    with RoutedFake() as fake:
        env = daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        d = DaemonProcess(home=home, env=env)
        fake.enqueue(Planned.reply("Porto in May it is."))
        d.start()
        try:
            with Client(d.socket_path, timeout=30) as c:
                c.hello()
                c.chat("we settled on Porto for May; Ada lives in Lisbon")
                fake.route("session summaries", Planned.reply(json.dumps(SUMMARY)))
                fake.route("Write WAKE.md", Planned.reply(LETTER))
                started = c.command("sleep")
                assert started["type"] == "result" and started["data"]["started"], started
            # Nobody is connected when the agent wakes.
            wait_for(lambda: [r[1] for r in _notice_rows(home)] == ["greeting"], 60, "the greeting")
            # The interactive chat opens with it.
            shown = _interactive_chat_shows(home, env, b"Book the train from Porto to Lisbon.")
            assert b"greeting" in shown and b"rested" in shown
            # The interactive chat said `seen` once it had printed it.
            wait_for(lambda: _notice_rows(home)[0][3] is not None, 10, "the greeting delivered")
            ((_, kind, text, _, _),) = _notice_rows(home)
            assert kind == "greeting"
            with Client(d.socket_path, timeout=5) as c:
                c.hello()
                # The second connection of the same wake: no greeting again.
                c.sock.settimeout(1.0)
                with pytest.raises(TimeoutError):
                    c.recv()
        finally:
            d.stop()
        d.start()
        try:
            with Client(d.socket_path, timeout=5) as c:
                c.hello()
                c.sock.settimeout(1.0)
                with pytest.raises(TimeoutError):
                    c.recv()
        finally:
            d.stop()
    assert "rested" in text
    assert "Ask Ada whether her Lisbon flat is free on 12 May." in text
    assert "Book the train from Porto to Lisbon." in text
    assert "Porto in May is settled" not in text  # open threads, not the whole letter
    assert len(text) < 400
    assert len(_notice_rows(home)) == 1


async def test_the_greeting_is_extractive_once_per_wake_and_not_after_a_mid_conversation_sleep(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    home.wake_file.write_text(LETTER)
    clock = FakeClock(datetime(2026, 3, 3, 3, 40, tzinfo=UTC))
    async with await Database.open(home.db_file) as db, EventBus() as bus:
        outbox = Outbox(db, bus=bus, clock=clock)
        greeting = MorningGreeting(home=home, db=db, outbox=outbox, zone=UTC, now=clock.now)
        tired = SleepFinished(reason="compaction", old_session_id="s-1", new_session_id="s-2")
        assert await greeting.on_sleep_finished(tired) is None
        night = SleepFinished(reason="nightly", old_session_id="s-2", new_session_id="s-3")
        first = await greeting.on_sleep_finished(night)
        assert first is not None and first.kind == "greeting" and first.key == "greeting:s-3"
        assert first.text == (
            "Good morning — I slept and I'm rested.\n"
            # No message of s-2 is in this database: the day they are from is not named.
            "Still open:\n"
            "- Ask Ada whether her Lisbon flat is free on 12 May.\n"
            "- Book the train from Porto to Lisbon."
        )
        home.wake_file.write_text("# changed\n")
        assert await greeting.on_sleep_finished(night) == first
        assert [n.id for n in await outbox.pending()] == [first.id]
        # No schedules table in this home: nothing scheduled today.
        assert await todays_schedule(db, UTC, clock.now()) == []


def test_open_threads_are_the_open_questions_never_where_things_stand() -> None:
    offline = (
        "# Wake\n\n## Where things stand\n- A quiet day.\n\n## Open questions\n- Which hotel?\n"
    )
    assert open_threads(offline) == ["Which hotel?"]
    assert open_threads("## Where things stand\n- A quiet day.\n") == []
    assert open_threads("") == []
    assert compose_greeting([], [], datetime(2026, 3, 3, 19, 0)) == (
        "Good evening — I slept and I'm rested.\nNothing is waiting on us today."
    )


async def test_the_greeting_names_what_is_still_scheduled_today_from_the_schedules(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    home.wake_file.write_text("# Wake\n")
    london = ZoneInfo("Europe/London")
    # 03:40 in London on Tuesday 3 March (GMT), as after the nightly sleep.
    clock = FakeClock(datetime(2026, 3, 3, 3, 40, tzinfo=UTC))
    async with await Database.open(home.db_file) as db, EventBus() as bus:
        store = ScheduleStore(db, clock=clock, zone=london, settings=ScheduleSettings())
        await store.add("today at 15:30", "Call the plumber")
        await store.add("every weekday at 8:00", "Stand-up notes")
        await store.add("tomorrow at 9", "Dentist")
        cancelled = await store.add("today at 11:00", "Water the plants")
        await store.cancel(cancelled.id)
        # Proposed on the strength of a tool's text: not kept until the person approves it.
        await store.add("today at 12:00", "Wire the deposit", requested_by="tool")
        outbox = Outbox(db, bus=bus, clock=clock)
        greeting = MorningGreeting(home=home, db=db, outbox=outbox, zone=london, now=clock.now)
        notice = await greeting.greet("s-9")
    assert notice.text == (
        "Good morning — I slept and I'm rested.\n"
        "Today:\n"
        "- 08:00 Stand-up notes\n"
        "- 15:30 Call the plumber"
    )


# --- delivered means shown: command-only connections never use a notice up ----------------

SHOWN_CONFIG = (
    """
[scheduler]
timezone = "UTC"

[sleep]
nightly = false

"""
    + OFFLINE_ROLES
)


def _remind_in(home: Path, env: dict[str, str], seconds: int, text: str) -> None:
    added = run_cli("schedule", "add", f"in {seconds} seconds", text, "--home", str(home), env=env)
    assert added.returncode == 0, added.stderr


def _row(home: Path, text: str) -> tuple[Any, ...] | None:
    return next((r for r in _notice_rows(home) if r[2] == text), None)


def test_status_and_schedule_list_do_not_use_up_a_notice_it_opens_the_next_chat_once(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(SHOWN_CONFIG)
    with FakeAnthropic() as fake:
        env = daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        d = DaemonProcess(home=home, env=env)
        d.start()
        try:
            # Fired while nobody was connected: it waits in the outbox.
            _remind_in(home, env, 1, "Call the plumber")
            wait_for(lambda: _row(home, "Call the plumber") is not None, 20, "the reminder")

            # Fired while only command connections were open: pushed to them at once — a
            # script's raw command client and the `DaemonLink` forwarded commands use — and
            # neither shows it, so it stays pending.
            with (
                Client(d.socket_path, timeout=20) as script,
                DaemonLink.connect(d.socket_path) as link,
            ):
                assert script.hello()["type"] == "hello"
                opening = script.recv()
                assert (opening["type"], opening["text"]) == ("notice", "Call the plumber")
                _remind_in(home, env, 1, "Water the plants")
                live = script.recv_until(lambda f: f["type"] == "notice")[-1]
                assert live["text"] == "Water the plants"
                # The link passes over the notices sent ahead of its command's result.
                status = link.request("status", timeout=20)
                assert status["type"] == "result", status
                assert script.command("status")["type"] == "result"
            time.sleep(0.3)
            assert [r[3] for r in _notice_rows(home)] == [None, None]

            # A status check and a schedule listing connect as the person and are sent both.
            for argv in (("status",), ("schedule", "list")):
                done = run_cli(*argv, "--home", str(home), env=env)
                assert done.returncode == 0, done.stderr
                assert "Call the plumber" not in done.stdout + done.stderr
            time.sleep(0.3)
            assert [r[3] for r in _notice_rows(home)] == [None, None]

            # The next chat opens with both (stderr; stdout is the reply), says `seen`, and
            # that is what delivers them.
            fake.enqueue(Planned.reply("Hello."))
            chat = run_cli("chat", "-m", "hello", "--home", str(home), env=env)
            assert chat.returncode == 0, chat.stderr
            assert chat.stdout.strip() == "Hello."
            assert "Call the plumber" in chat.stderr and "Water the plants" in chat.stderr
            assert chat.stderr.index("Call the plumber") < chat.stderr.index("Water the plants")
            wait_for(
                lambda: all(r[3] is not None for r in _notice_rows(home)), 10, "both delivered"
            )
            # Shown once: the following chat opens with nothing.
            fake.enqueue(Planned.reply("Hello again."))
            again = run_cli("chat", "-m", "hello again", "--home", str(home), env=env)
            assert again.returncode == 0, again.stderr
            assert again.stdout.strip() == "Hello again."
            assert "Call the plumber" not in again.stderr
            assert "Water the plants" not in again.stderr
        finally:
            d.stop()


# Another uid's client: sends `seen` for the ids given, prints the frames it gets back.
GUEST_SEEN = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
lines = s.makefile("rb")
print(lines.readline().decode().strip(), flush=True)
s.sendall((json.dumps({"type": "seen", "ids": sys.argv[2:]}) + "\\n").encode())
print(lines.readline().decode().strip(), flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a second uid's client needs root to start")
def test_another_uids_seen_is_forbidden_and_changes_nothing(shared_home: Path) -> None:
    python = _python_for(NOBODY)
    if python is None:
        pytest.skip("no interpreter the other uid can run")
    home = shared_home
    (home / "reverie.toml").write_text(SHOWN_CONFIG + "\n[chat]\nallow_uids = [65534]\n")
    env = daemon_env()
    d = DaemonProcess(home=home, env=env)
    d.start()
    try:
        d.socket_path.parent.chmod(0o711)
        d.socket_path.chmod(0o666)
        _remind_in(home, env, 1, "Call the plumber")
        wait_for(lambda: _row(home, "Call the plumber") is not None, 20, "the reminder")
        row = _row(home, "Call the plumber")
        assert row is not None
        guest = subprocess.run(
            [python, "-c", GUEST_SEEN, str(d.socket_path), row[0]],
            user=NOBODY,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert guest.returncode == 0, guest.stderr
        hello, answer = (json.loads(line) for line in guest.stdout.splitlines())
        # It was never sent the notice (the hello is followed by the answer, not a notice).
        assert hello["type"] == "hello"
        assert (answer["type"], answer["code"]) == ("error", "forbidden"), answer
        time.sleep(0.3)
        assert _row(home, "Call the plumber") == row
    finally:
        d.stop()


def test_a_seen_frame_names_notice_ids_or_is_refused_with_why() -> None:
    assert parse_client_frame(encode(seen(ids=["n-1", "n-2"]))) == SeenFrame(ids=("n-1", "n-2"))
    for frame, why in (
        (b'{"type": "seen"}', "got nothing"),
        (b'{"type": "seen", "ids": []}', "got an empty array"),
        (b'{"type": "seen", "ids": "n-1"}', "got a string"),
        (b'{"type": "seen", "ids": ["n-1", 7]}', "holding something else"),
        (b'{"type": "seen", "ids": [""]}', "holding something else"),
        (encode(seen(ids=[f"n-{i}" for i in range(1001)])), "at most 1000 notices, got 1001"),
    ):
        with pytest.raises(ProtocolError, match=why) as refused:
            parse_client_frame(frame)
        assert refused.value.code == "bad_frame"
