"""The chat server on a real Unix socket, with a scripted handler standing in for the daemon."""

# ruff: noqa: ASYNC109  (wait_until takes a timeout)
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.chat import protocol
from daemon.chat.protocol import ClientFrame, CommandFrame, LineReader, MessageFrame
from daemon.chat.server import ChatServer, ChatServerError, ClientHandle, take_passed_file
from daemon.chat.stream import UnixConnection, connect_unix
from daemon.chat.testing import ScriptedChatHandler, ScriptedTurn

pytestmark = pytest.mark.anyio

MAX_FRAME = 4096


@asynccontextmanager
async def serving(
    path: Path,
    handler: Any,
    *,
    max_frame_bytes: int = MAX_FRAME,
    queue_frames: int = 64,
    allow_uids: tuple[int, ...] = (),
) -> AsyncIterator[ChatServer]:
    server = ChatServer(
        path,
        handler,
        max_frame_bytes=max_frame_bytes,
        queue_frames=queue_frames,
        allow_uids=allow_uids,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        yield server
        tg.cancel_scope.cancel()


@asynccontextmanager
async def scripted(
    path: Path, **kwargs: Any
) -> AsyncIterator[tuple[ChatServer, ScriptedChatHandler]]:
    turn = kwargs.pop("turn", None)
    commands = kwargs.pop("commands", {"ping": lambda args: {"pong": True, **args}})
    async with ScriptedChatHandler(turn=turn, commands=commands) as handler:
        async with serving(path, handler, **kwargs) as server:
            yield server, handler


class Raw:
    """A byte-level client, so tests can send what a real client never would."""

    def __init__(self, stream: UnixConnection) -> None:
        self.stream = stream
        self.reader = LineReader(stream, 1 << 24)

    @classmethod
    @asynccontextmanager
    async def connect(cls, path: Path) -> AsyncIterator[Raw]:
        stream = await connect_unix(path)
        async with stream:
            yield cls(stream)

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def frame(self) -> dict[str, Any]:
        line = await self.reader.receive()
        assert isinstance(line, bytes), f"expected a frame, got {line!r}"
        return json.loads(line)

    async def eof(self) -> bool:
        return await self.reader.receive() is None


async def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "run" / "reverie.sock"


async def test_socket_is_0600_inside_a_0700_directory(sock: Path) -> None:
    with anyio.fail_after(5):
        async with scripted(sock):
            assert stat.S_ISSOCK(sock.lstat().st_mode)
            assert stat.S_IMODE(sock.stat().st_mode) == 0o600
            assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert not sock.exists(), "the socket file is removed on exit"


async def test_an_existing_loose_directory_of_ours_is_tightened(sock: Path) -> None:
    sock.parent.mkdir(mode=0o755)
    sock.parent.chmod(0o755)
    with anyio.fail_after(5):
        async with scripted(sock):
            assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700


async def test_a_stale_socket_is_removed(sock: Path) -> None:
    sock.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock))
    dead.close()  # bound, never listening: what a crashed daemon leaves behind
    assert sock.exists()
    with anyio.fail_after(5):
        async with scripted(sock), Raw.connect(sock) as raw:
            assert (await raw.frame())["type"] == "hello"


async def test_a_live_socket_is_refused_and_left_alone(sock: Path) -> None:
    with anyio.fail_after(5):
        async with scripted(sock):
            inode = sock.stat().st_ino
            second = ChatServer(
                sock,
                ScriptedChatHandler(),
                max_frame_bytes=MAX_FRAME,
                queue_frames=16,
                allow_uids=(),
            )
            with pytest.raises(ChatServerError, match="another daemon is listening on"):
                await second.serve()
            assert sock.stat().st_ino == inode
            async with Raw.connect(sock) as raw:
                assert (await raw.frame())["type"] == "hello"


async def test_a_regular_file_in_the_way_is_an_error_not_deleted(sock: Path) -> None:
    sock.parent.mkdir(mode=0o700)
    sock.write_text("precious")
    server = ChatServer(
        sock, ScriptedChatHandler(), max_frame_bytes=MAX_FRAME, queue_frames=16, allow_uids=()
    )
    with anyio.fail_after(5), pytest.raises(ChatServerError, match="not a socket"):
        await server.serve()
    assert sock.read_text() == "precious"


async def test_a_too_long_path_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / ("d" * 120) / "reverie.sock"
    server = ChatServer(
        path, ScriptedChatHandler(), max_frame_bytes=MAX_FRAME, queue_frames=16, allow_uids=()
    )
    with anyio.fail_after(5), pytest.raises(ChatServerError, match="too long"):
        await server.serve()


async def test_garbage_then_a_valid_frame_on_the_same_connection(sock: Path) -> None:
    with anyio.fail_after(5):
        async with scripted(sock) as (_, handler), Raw.connect(sock) as raw:
            assert (await raw.frame())["type"] == "hello"
            await raw.send(b"this is not json\n")
            err = await raw.frame()
            assert err["type"] == "error" and err["code"] == "bad_frame"
            assert "JSON" in err["message"]
            await raw.send(b"[1, 2, 3]\n")
            assert (await raw.frame())["code"] == "bad_frame"
            await raw.send(b'"just a string"\n')
            assert (await raw.frame())["code"] == "bad_frame"
            await raw.send(b'{"type": "dance", "id": "d1"}\n')
            err = await raw.frame()
            assert (err["code"], err["id"]) == ("unknown_type", "d1")
            await raw.send(b'{"type": "message", "id": "m0"}\n')
            assert (await raw.frame())["code"] == "bad_frame"
            await raw.send(b'{"type": "command", "name": "ping", "id": "p1"}\n')
            assert await raw.frame() == {
                "type": "result",
                "id": "p1",
                "name": "ping",
                "data": {"pong": True},
            }
            assert [type(f) for _, f in handler.seen.frames] == [CommandFrame]


async def test_an_oversized_frame_is_discarded_and_the_connection_survives(sock: Path) -> None:
    with anyio.fail_after(5):
        async with scripted(sock) as (_, handler), Raw.connect(sock) as raw:
            await raw.frame()
            huge = json.dumps({"type": "message", "text": "x" * (MAX_FRAME * 5)}).encode() + b"\n"
            await raw.send(huge[:100])
            await raw.send(huge[100:] + b'{"type":"command","name":"ping","id":"after"}\n')
            err = await raw.frame()
            assert err["type"] == "error" and err["code"] == "frame_too_large"
            assert str(MAX_FRAME) in err["message"]
            reply = await raw.frame()
            assert (reply["type"], reply["id"]) == ("result", "after")
            assert len(handler.seen.frames) == 1


async def test_a_message_streams_a_turn(sock: Path) -> None:
    with anyio.fail_after(5):
        async with (
            scripted(sock, turn=ScriptedTurn(chunks=("a", "b"), tools=("recall",))),
            Raw.connect(sock) as raw,
        ):
            await raw.frame()
            await raw.send(b'{"type":"message","text":"hi","id":"m1"}\n')
            accepted = await raw.frame()
            assert (accepted["type"], accepted["id"], accepted["queued"]) == ("accepted", "m1", 0)
            kinds = []
            while True:
                frame = await raw.frame()
                assert frame["turn_id"] == accepted["turn_id"]
                kinds.append(frame["type"])
                if frame["type"] == "done":
                    assert frame["text"] == "ab"
                    break
            assert kinds == ["tool", "tool", "delta", "delta", "done"]


class _Faulty(ScriptedChatHandler):
    async def handle_frame(self, client: ClientHandle, frame: ClientFrame) -> None:
        if isinstance(frame, MessageFrame) and frame.text == "explode":
            raise RuntimeError("handler bug")
        await super().handle_frame(client, frame)


async def test_a_failing_handler_answers_internal_and_keeps_the_connection(sock: Path) -> None:
    with anyio.fail_after(5):
        async with _Faulty(commands={"ping": lambda a: 1}) as handler, serving(sock, handler):
            async with Raw.connect(sock) as raw:
                await raw.frame()
                await raw.send(b'{"type":"message","text":"explode","id":"x"}\n')
                err = await raw.frame()
                assert (err["code"], err["id"]) == ("internal", "x")
                await raw.send(b'{"type":"command","name":"ping","id":"y"}\n')
                assert (await raw.frame())["data"] == 1


async def test_a_half_closed_client_gets_its_answer_then_is_cleaned_up(sock: Path) -> None:
    with anyio.fail_after(5):
        async with scripted(sock) as (server, handler), Raw.connect(sock) as raw:
            await raw.frame()
            await raw.send(b'{"type":"command","name":"ping","id":"h"}')  # no newline, then EOF
            await raw.stream.send_eof()
            assert (await raw.frame())["id"] == "h"
            assert await raw.eof()
            await wait_until(lambda: server.clients == 0)
            assert handler.seen.disconnected == handler.seen.connected


async def test_a_vanished_client_mid_turn_is_cleaned_up_quietly(sock: Path) -> None:
    turn = ScriptedTurn(chunks=tuple("abcdefghij"), pause_s=0.01)
    with anyio.fail_after(5):
        async with scripted(sock, turn=turn) as (server, handler):
            async with Raw.connect(sock) as raw:
                await raw.frame()
                await raw.send(b'{"type":"message","text":"hi"}\n')
                await raw.frame()  # accepted; then vanish while deltas are still coming
            await wait_until(lambda: server.clients == 0)
            assert len(handler.seen.disconnected) == 1
            async with Raw.connect(sock) as again:
                assert (await again.frame())["type"] == "hello"


async def test_a_client_that_never_reads_is_dropped_without_blocking_others(sock: Path) -> None:
    big = "y" * 60_000
    n = 300  # ~18 MB in total: far past any socket buffer
    with anyio.fail_after(20):
        async with scripted(sock, queue_frames=16, max_frame_bytes=1 << 20) as (server, handler):
            async with Raw.connect(sock) as stuck, Raw.connect(sock) as reader:
                await stuck.frame()
                await reader.frame()
                await wait_until(lambda: server.clients == 2)
                stuck_id = next(
                    c.id for c in server.connected() if c.id == handler.seen.connected[0]
                )
                received = 0

                async def read_all() -> None:
                    nonlocal received
                    while received < n:
                        frame = await reader.frame()
                        if frame["type"] == "state":
                            received += 1

                async with anyio.create_task_group() as tg:
                    tg.start_soon(read_all)
                    for i in range(n):
                        server.broadcast(protocol.state("awake", detail=f"{i} {big}"))
                        await anyio.sleep(0.001)
                        if i == n // 2:
                            # The handler still answers the reader while the other is stuck.
                            await reader.send(b'{"type":"command","name":"ping","id":"mid"}\n')
                assert received == n
                assert stuck_id in handler.seen.disconnected
                assert server.clients == 1
                assert any(
                    isinstance(f, CommandFrame) and f.id == "mid" for _, f in handler.seen.frames
                )


async def test_several_clients_and_broadcast(sock: Path) -> None:
    with anyio.fail_after(5):
        async with scripted(sock) as (server, _):
            async with Raw.connect(sock) as a, Raw.connect(sock) as b, Raw.connect(sock) as c:
                for raw in (a, b, c):
                    assert (await raw.frame())["type"] == "hello"
                assert server.clients == 3
                assert server.broadcast(protocol.state("asleep", detail="consolidating")) == 3
                for raw in (a, b, c):
                    assert await raw.frame() == {
                        "type": "state",
                        "state": "asleep",
                        "detail": "consolidating",
                    }
                await b.send(b'{"type":"command","name":"ping","id":"b"}\n')
                assert (await b.frame())["id"] == "b"
            await wait_until(lambda: server.clients == 0)
            assert server.broadcast(protocol.state("awake")) == 0


async def test_stopping_the_server_closes_clients_and_unlinks_the_socket(sock: Path) -> None:
    with anyio.fail_after(5):
        async with ScriptedChatHandler() as handler:
            async with anyio.create_task_group() as tg:
                server = ChatServer(
                    sock, handler, max_frame_bytes=MAX_FRAME, queue_frames=16, allow_uids=()
                )
                await tg.start(server.serve)
                async with Raw.connect(sock) as raw:
                    await raw.frame()
                    tg.cancel_scope.cancel()
                    await wait_until(lambda: not sock.exists())
                    assert await raw.eof()
            assert handler.seen.disconnected == handler.seen.connected != []
            assert server.clients == 0


async def test_a_passed_file_reaches_the_command_and_one_left_unclaimed_is_closed(
    sock: Path, tmp_path: Path
) -> None:
    source = tmp_path / "notes.jsonl"
    source.write_text("what the client may read\n")

    def read_passed(args: dict[str, Any]) -> dict[str, Any]:
        fd = take_passed_file()
        assert fd is not None
        try:
            return {"text": os.pread(fd, 1024, 0).decode()}
        finally:
            os.close(fd)

    def still_open() -> bool:
        links = []
        for entry in Path("/proc/self/fd").iterdir():
            try:
                links.append(os.readlink(entry))
            except OSError:
                continue
        return str(source) in links

    commands = {"read": read_passed, "ping": lambda args: {"pong": True}}
    with anyio.fail_after(5):
        async with scripted(sock, commands=commands), Raw.connect(sock) as raw:
            await raw.frame()
            for name in ("read", "ping"):
                fd = os.open(source, os.O_RDONLY)
                frame = {"type": "command", "name": name, "id": name, "files": 1}
                socket.send_fds(raw.stream.raw_socket, [json.dumps(frame).encode() + b"\n"], [fd])
                os.close(fd)
                reply = await raw.frame()
                assert (reply["type"], reply["id"]) == ("result", name)
                if name == "read":
                    assert reply["data"] == {"text": "what the client may read\n"}
            # `ping` did not claim its file: the server closed it once the frame was handled.
            assert not still_open()


async def test_a_frame_that_declares_a_file_it_did_not_pass_is_refused(sock: Path) -> None:
    with anyio.fail_after(5):
        async with scripted(sock) as (_, handler), Raw.connect(sock) as raw:
            await raw.frame()
            await raw.send(b'{"type":"command","name":"ping","id":"p","files":1}\n')
            err = await raw.frame()
            assert (err["type"], err["code"], err["id"]) == ("error", "bad_frame", "p")
            assert "none came with it" in err["message"]
            await raw.send(b'{"type":"command","name":"ping","id":"p2"}\n')
            assert (await raw.frame())["id"] == "p2"
            assert len(handler.seen.frames) == 1


async def test_a_wrongly_typed_argument_is_refused_before_the_command_runs(sock: Path) -> None:
    stored: list[Any] = []
    commands = {"remember": lambda args: stored.append(args["text"]) or {"ok": True}}
    with anyio.fail_after(5):
        async with scripted(sock, commands=commands), Raw.connect(sock) as raw:
            await raw.frame()
            await raw.send(b'{"type":"command","name":"remember","id":"r","args":{"text":7}}\n')
            err = await raw.frame()
            assert (err["type"], err["code"], err["id"]) == ("error", "bad_args", "r")
            await raw.send(b'{"type":"command","name":"remember","id":"r2","args":{"text":"7"}}\n')
            assert (await raw.frame())["id"] == "r2"
    assert stored == ["7"]


_PEER = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.settimeout(5)
data = b""
while not data.endswith(b"\\n"):
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.decode().strip())
"""


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


NOBODY = 65534
PEER_PYTHON = _python_for(NOBODY) if os.geteuid() == 0 else None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as a second uid")
@pytest.mark.skipif(PEER_PYTHON is None, reason="no Python interpreter the nobody user may run")
@pytest.mark.parametrize("allowed", [False, True])
async def test_peer_uid_is_checked(allowed: bool) -> None:
    nobody = NOBODY
    assert PEER_PYTHON is not None
    # tmp_path sits under a 0700 directory; the other uid needs a traversable path.
    base = Path(tempfile.mkdtemp(prefix="reverie-peer-"))
    try:
        base.chmod(0o711)
        path = base / "run" / "r.sock"
        allow = (nobody,) if allowed else ()
        with anyio.fail_after(10):
            async with scripted(path, allow_uids=allow):
                # Loosen the file modes on purpose: SO_PEERCRED is the last line of defence.
                path.parent.chmod(0o711)
                path.chmod(0o666)
                proc = await anyio.run_process(
                    [PEER_PYTHON, "-c", _PEER, str(path)], user=nobody, check=False
                )
        assert proc.returncode == 0, proc.stderr.decode()
        frame = json.loads(proc.stdout)
        if allowed:
            assert frame["type"] == "hello"
        else:
            assert (frame["type"], frame["code"]) == ("error", "forbidden")
    finally:
        shutil.rmtree(base, ignore_errors=True)


# Writes before it reads, and again once the server had time to answer and close.
_EAGER_PEER = """
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.settimeout(5)
s.sendall(b'{"type":"message","text":"hello"}\\n')
time.sleep(0.3)
s.sendall(b'{"type":"message","text":"anyone there?"}\\n')
s.shutdown(socket.SHUT_WR)
data = b""
while chunk := s.recv(4096):
    data += chunk
print(data.decode().strip())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as a second uid")
@pytest.mark.skipif(PEER_PYTHON is None, reason="no Python interpreter the nobody user may run")
async def test_a_refused_peer_that_writes_first_still_reads_why() -> None:
    assert PEER_PYTHON is not None
    base = Path(tempfile.mkdtemp(prefix="reverie-peer-"))
    try:
        base.chmod(0o711)
        path = base / "run" / "r.sock"
        with anyio.fail_after(15):
            async with scripted(path, allow_uids=()):
                path.parent.chmod(0o711)
                path.chmod(0o666)
                proc = await anyio.run_process(
                    [PEER_PYTHON, "-c", _EAGER_PEER, str(path)], user=NOBODY, check=False
                )
        # No reset, no broken pipe: the refusal arrives and the connection ends cleanly.
        assert proc.returncode == 0, proc.stderr.decode()
        frame = json.loads(proc.stdout)
        assert (frame["type"], frame["code"]) == ("error", "forbidden")
    finally:
        shutil.rmtree(base, ignore_errors=True)


# Says hello, then answers an approval it was never asked (the id does not matter: the uid does).
_APPROVING_PEER = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.settimeout(5)
f = s.makefile("rb")
hello = json.loads(f.readline())
s.sendall(b'{"type":"approve","id":"ap-1","decision":"yes"}\\n')
print(json.dumps([hello, json.loads(f.readline())]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as a second uid")
@pytest.mark.skipif(PEER_PYTHON is None, reason="no Python interpreter the nobody user may run")
async def test_an_approve_from_another_admitted_uid_is_forbidden_before_any_handler() -> None:
    assert PEER_PYTHON is not None
    base = Path(tempfile.mkdtemp(prefix="reverie-peer-"))
    try:
        base.chmod(0o711)
        path = base / "run" / "r.sock"
        with anyio.fail_after(15):
            async with scripted(path, allow_uids=(NOBODY,)) as (server, handler):
                path.parent.chmod(0o711)
                path.chmod(0o666)
                proc = await anyio.run_process(
                    [PEER_PYTHON, "-c", _APPROVING_PEER, str(path)], user=NOBODY, check=False
                )
                seen = [frame for _, frame in handler.seen.frames]
        assert proc.returncode == 0, proc.stderr.decode()
        hello, refusal = json.loads(proc.stdout)
        assert hello["type"] == "hello"
        assert (refusal["type"], refusal["code"], refusal["id"]) == ("error", "forbidden", "ap-1")
        assert server.person_uid == os.geteuid() and seen == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
