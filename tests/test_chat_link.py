"""The one client connection (`DaemonLink`): blocking, against a real server and a raw socket.

`reverie memory search` forwarded to a daemon and `reverie chat` read frames through the same
link; these tests drive its blocking side (what a forwarded command uses) from a worker thread
while a real `ChatServer`, or a hand-written peer on a real Unix socket, answers.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.chat import protocol, wire
from daemon.chat.client import ChatClient
from daemon.chat.link import ChatError, DaemonLink
from daemon.chat.server import ChatServer
from daemon.chat.stream import UnixConnection, UnixListener
from daemon.chat.testing import ScriptedChatHandler

pytestmark = pytest.mark.anyio


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "run" / "reverie.sock"


@asynccontextmanager
async def server_at(path: Path) -> AsyncIterator[ScriptedChatHandler]:
    commands = {"status": lambda args: {"state": "awake", "args": args}}
    async with (
        ScriptedChatHandler(commands=commands) as handler,
        anyio.create_task_group() as tg,
    ):
        server = ChatServer(path, handler, max_frame_bytes=65536, queue_frames=64, allow_uids=())
        await tg.start(server.serve)
        yield handler
        tg.cancel_scope.cancel()


@asynccontextmanager
async def peer_at(path: Path, script: Callable[[UnixConnection], Any]) -> AsyncIterator[None]:
    """A hand-written daemon: accept one connection and run `script` on it."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    listener = UnixListener.bind(path, mode=0o600)

    async def serve() -> None:
        conn = await listener.accept()
        async with conn:
            await script(conn)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            yield
            tg.cancel_scope.cancel()
    finally:
        listener.close()


def in_thread(fn: Callable[[], Any]) -> Any:
    return anyio.to_thread.run_sync(fn, abandon_on_cancel=True)


HELLO = protocol.hello(version="t", state="awake", session_id="s")


async def test_a_blocking_link_greets_and_runs_a_command_on_a_real_server(sock: Path) -> None:
    def talk() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        with DaemonLink.connect(sock) as link:
            ok = link.request("status", {"verbose": True}, timeout=5)
            refused = link.request("no_such_command", timeout=5)
            return link.hello, ok, refused

    with anyio.fail_after(10):
        async with server_at(sock):
            hello, ok, refused = await in_thread(talk)
    assert hello["type"] == "hello" and hello["session_id"] == "session-test"
    assert ok["type"] == "result" and ok["data"] == {"state": "awake", "args": {"verbose": True}}
    assert refused["type"] == "error" and refused["code"] == "unknown_command"


async def test_no_daemon_is_a_chat_error_saying_so(sock: Path) -> None:
    with pytest.raises(ChatError, match="the daemon is not running"):
        DaemonLink.connect(sock)


async def test_frames_split_anywhere_read_the_same(tmp_path: Path) -> None:
    """However the bytes arrive, the link yields the frames the server encoded, in order."""
    frames = [
        HELLO,
        protocol.delta(turn_id="t1", text="line one\nline two ☃"),
        protocol.result(id="c1", name="status", data={"nested": [1, 2, {"x": "é"}]}),
        protocol.done(turn_id="t1", text="bye", stop_reason="end_turn", usage={}),
    ]
    data = b"".join(wire.encode(f) for f in frames)
    for size in (1, 2, 5, 64, len(data)):
        link = DaemonLink(None, tmp_path / "x.sock")  # type: ignore[arg-type]
        got: list[dict[str, Any]] = []
        for start in range(0, len(data), size):
            link.feed(data[start : start + size])
            while (frame := link.next_frame()) is not None:
                got.append(frame)
        assert got == frames, size


async def test_a_bad_frame_costs_that_frame_not_the_connection(sock: Path) -> None:
    async def script(conn: UnixConnection) -> None:
        await conn.send(wire.encode(HELLO))
        await conn.send(b'{"type": "result", "id": "a", "data": "' + b"x" * 300 + b'"}\n')
        await conn.send(b"[1, 2]\n")
        await conn.send(wire.encode(protocol.result(id="b", name="ping", data=1)))
        await anyio.sleep(5)

    def read() -> list[Any]:
        out: list[Any] = []
        with DaemonLink.connect(sock, max_frame_bytes=200) as link:
            for _ in range(3):
                try:
                    out.append(link.receive(timeout=5)["id"])
                except ChatError as exc:
                    out.append(exc.message)
        return out

    with anyio.fail_after(10):
        async with peer_at(sock, script):
            got = await in_thread(read)
    assert got == [
        "the daemon sent a frame larger than 200 bytes",
        "the daemon sent a malformed frame: expected a JSON object, got an array",
        "b",
    ]


async def test_a_command_follows_its_progress_and_ends_on_a_connection_level_error(
    sock: Path,
) -> None:
    """Progress goes to the caller; an error with no id ends the command instead of hanging it."""

    async def script(conn: UnixConnection) -> None:
        await conn.send(wire.encode(HELLO))
        lines = wire.LineBuffer(65536)
        while not (got := lines.feed(await conn.receive())):
            pass
        sent = wire.decode(got[0])  # type: ignore[arg-type]
        assert sent == wire.command(name="memory_import", id=sent["id"], args={"name": "f"})
        await conn.send(wire.encode(protocol.state(state="asleep", previous="awake")))
        await conn.send(wire.encode(protocol.progress(id=sent["id"], name="x", data={"n": 1})))
        await conn.send(wire.encode(protocol.progress(id="other", name="x", data={"n": 9})))
        await conn.send(wire.encode(protocol.error("internal", "the import broke")))
        await anyio.sleep(5)

    progress: list[dict[str, Any]] = []

    def run() -> dict[str, Any]:
        with DaemonLink.connect(sock) as link:
            return link.request(
                "memory_import", {"name": "f"}, timeout=5, on_progress=progress.append
            )

    with anyio.fail_after(10):
        async with peer_at(sock, script):
            end = await in_thread(run)
    assert progress == [{"n": 1}]
    assert end == {"type": "error", "code": "internal", "message": "the import broke"}


async def test_a_command_can_pass_an_open_file(sock: Path, tmp_path: Path) -> None:
    passed = tmp_path / "passed.txt"
    passed.write_text("the daemon reads this through the descriptor")
    seen: list[bytes] = []

    async def script(conn: UnixConnection) -> None:
        # An accepted connection keeps descriptors passed with SCM_RIGHTS.
        server_side = conn
        await server_side.send(wire.encode(HELLO))
        lines = wire.LineBuffer(65536)
        while not (got := lines.feed(await server_side.receive())):
            pass
        sent = wire.decode(got[0])  # type: ignore[arg-type]
        (fd,) = server_side.take_fds(1) or [-1]
        seen.append(os.pread(fd, 100, 0))
        os.close(fd)
        await server_side.send(wire.encode(protocol.result(id=sent["id"], name="x", data=None)))
        await anyio.sleep(5)

    def run() -> dict[str, Any]:
        fd = os.open(passed, os.O_RDONLY)
        try:
            with DaemonLink.connect(sock) as link:
                return link.request("memory_import", {"name": "p"}, timeout=5, file=fd)
        finally:
            os.close(fd)

    with anyio.fail_after(10):
        async with peer_at(sock, script):
            end = await in_thread(run)
    assert end["type"] == "result"
    assert seen == [b"the daemon reads this through the descriptor"]


async def test_the_event_loop_client_is_the_same_link(sock: Path) -> None:
    """`ChatClient` reads through its `DaemonLink`: what one buffers, the other delivers."""
    with anyio.fail_after(10):
        async with server_at(sock), ChatClient.connect(sock) as client:
            assert client.link.hello == client.hello and client.hello["type"] == "hello"
            assert await client.command("status", {"a": 1}) == {"state": "awake", "args": {"a": 1}}
            client.link.feed(wire.encode(protocol.delta(turn_id="t", text="buffered")))
            assert (await client.receive(timeout=1))["text"] == "buffered"
            with pytest.raises(ChatError) as info:
                await client.command("no_such_command")
            assert info.value.code == "unknown_command"


async def test_doctor_asks_the_daemon_through_the_link(
    sock: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`reverie doctor` greets a listening daemon (its state and version) and spots a stale socket."""
    import json

    from daemon.cli import main

    home = tmp_path / "agent"
    assert main(["init", str(home)]) == 0
    with (home / "reverie.toml").open("a") as fh:
        fh.write(f'\n[chat]\nsocket = "{sock}"\n')
    sock.parent.mkdir(mode=0o700)

    def doctor() -> dict[str, Any]:
        main(["doctor", "--home", str(home), "--json"])
        checks = json.loads(capsys.readouterr().out)
        return next(c for c in checks if c["name"] == "socket")

    capsys.readouterr()
    with anyio.fail_after(20):
        async with server_at(sock):
            live = await in_thread(doctor)
        # A socket file nobody listens on any more.
        stale = UnixListener.bind(sock, mode=0o600)
        stale.close()
        gone = await in_thread(doctor)
    assert live["status"] == "ok"
    assert live["detail"] == f"daemon listening on {sock} (awake, version test)"
    assert gone["status"] == "warn" and gone["detail"].startswith("stale socket")
