"""Serve the chat protocol on a Unix stream socket, several clients at once.

The server owns the socket file and the connections; what the frames *mean* belongs to a
`ChatHandler` (the daemon's orchestrator). Each connection runs a reader (frames → handler,
in order) and a writer fed by a bounded queue, so `ClientHandle.send` never blocks: a client
that stops reading fills its queue and is disconnected instead of stalling the trunk.

Only the daemon's own uid — the person whose agent this is — may answer an `approval`: an
`approve` frame from any other admitted uid (root, `chat.allow_uids`) is refused here with
`forbidden` before a handler sees it.

A command frame may come with open files the client passed (`SCM_RIGHTS`); while its handler
runs, `take_passed_file()` hands them over, so the daemon reads what the client could open
and never opens a path a client names with the daemon's own rights.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.chat import protocol
from daemon.chat.protocol import (
    ApproveFrame,
    CommandFrame,
    Oversized,
    ProtocolError,
)
from daemon.chat.stream import UnixConnection, UnixListener, connect_unix
from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.seams import ChatHandler as ChatHandler

log = get_logger("reverie.chat")

# sun_path is 108 bytes on Linux, including the terminating NUL.
MAX_SOCKET_PATH = 107
# How long a departing client's already-queued frames may take to drain.
FLUSH_TIMEOUT_S = 2.0
# Bounds on handler callbacks run during cleanup, so a stuck handler cannot hang shutdown.
DISCONNECT_TIMEOUT_S = 5.0
# How long a half-closed client is kept for the replies to what it already sent.
HALF_CLOSE_LINGER_S = 900.0
LIVE_PROBE_TIMEOUT_S = 2.0
# How long a refused peer's input is read (and discarded) after its `forbidden` frame.
REFUSAL_LINGER_S = 2.0
# Frames already queued are written together up to this size.
WRITE_BATCH_BYTES = 256 * 1024


# The open files passed with the command frame being handled, not yet claimed.
_passed_files: ContextVar[list[int] | None] = ContextVar("chat_passed_files", default=None)


def take_passed_file() -> int | None:
    """Claim the next open file the client passed with the command being handled, or None.

    The caller owns the descriptor and closes it; files a handler leaves unclaimed are closed
    once its frame has been handled.
    """
    files = _passed_files.get()
    return files.pop(0) if files else None


class ChatServerError(ReverieError):
    """The socket cannot be served; the message is one line a person can act on."""


class ClientHandle:
    """One connected client, as the handler sees it.

    `send` enqueues and returns at once; call it from the event loop's thread only.
    """

    def __init__(self, *, uid: int, pid: int, queue_frames: int) -> None:
        self.id = "c-" + uuid.uuid4().hex[:10]
        self.uid = uid
        self.pid = pid
        self.closed = False
        self.drop_reason: str | None = None
        self._outbox: MemoryObjectSendStream[bytes]
        self._inbox: MemoryObjectReceiveStream[bytes]
        self._outbox, self._inbox = anyio.create_memory_object_stream[bytes](queue_frames)
        self._scope: anyio.CancelScope | None = None
        self._flushed = anyio.Event()

    def __repr__(self) -> str:
        return f"ClientHandle(id={self.id!r}, uid={self.uid}, closed={self.closed})"

    def send(self, frame: dict[str, Any]) -> bool:
        """Queue a frame for this client; return False if it is gone or was just dropped.

        Never blocks. When the queue is full the client is too slow to keep up: it is
        disconnected (and logged) rather than allowed to hold up the daemon. A frame that
        is not JSON-serialisable raises `TypeError`/`ValueError` (a programming error).
        """
        if self.closed:
            return False
        return self._enqueue(protocol.encode(frame))

    def _enqueue(self, data: bytes) -> bool:
        if self.closed:
            return False
        try:
            self._outbox.send_nowait(data)
        except anyio.WouldBlock:
            self._drop("too slow: its outgoing queue is full")
            return False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.closed = True
            return False
        return True

    def close(self) -> None:
        """Disconnect this client now (queued frames are discarded)."""
        self._drop("closed by the daemon", level="info")

    def _drop(self, reason: str, *, level: str = "warning") -> None:
        if self.closed:
            return
        self.closed = True
        self.drop_reason = reason
        getattr(log, level)("chat client dropped", client=self.id, uid=self.uid, reason=reason)
        if self._scope is not None:
            self._scope.cancel()

    async def _flush_on_stop(self, stream: UnixConnection, unsent: bytes) -> None:
        """The server is stopping: what was queued before (the `stopping` frame) still goes out.

        A dropped client's frames are discarded instead; a peer that does not read costs at
        most `FLUSH_TIMEOUT_S`.
        """
        with anyio.CancelScope(shield=True), anyio.move_on_after(FLUSH_TIMEOUT_S):
            if unsent:
                await stream.send(unsent)
            while True:
                try:
                    data = self._inbox.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    return
                await stream.send(self._batch(data))

    def _batch(self, first: bytes) -> bytes:
        """Join frames already waiting, so a burst of deltas costs one system call."""
        parts = [first]
        size = len(first)
        while size < WRITE_BATCH_BYTES:
            try:
                data = self._inbox.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            parts.append(data)
            size += len(data)
        return b"".join(parts) if len(parts) > 1 else first

    async def _write_loop(self, stream: UnixConnection) -> None:
        try:
            async with self._inbox:
                batch = b""
                try:
                    async for data in self._inbox:
                        batch = self._batch(data)
                        # Cancelled here, nothing of the batch went out and all of it may still.
                        await anyio.lowlevel.checkpoint_if_cancelled()
                        unsent, batch = batch, b""
                        await stream.send(unsent)
                except anyio.get_cancelled_exc_class():
                    if not self.closed:
                        await self._flush_on_stop(stream, batch)
                    raise
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            # The peer vanished; the reader notices too, and the connection winds down.
            self.closed = True
            if self._scope is not None:
                self._scope.cancel()
        finally:
            self._flushed.set()


class ChatServer:
    """Listen on `path` and run one reader/writer pair per client under one task group.

    Start it with `await tg.start(server.serve)`: `started()` is called once the socket
    listens. Cancelling the surrounding scope stops accepting, closes every client (each
    gets `client_disconnected`, bounded by a timeout) and unlinks the socket file.
    """

    def __init__(
        self,
        path: Path,
        handler: ChatHandler,
        *,
        max_frame_bytes: int,
        queue_frames: int,
        allow_uids: Sequence[int],
    ) -> None:
        self.path = Path(path)
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.queue_frames = queue_frames
        # The person: the only uid whose clients are asked, and may answer, for approvals.
        self.person_uid = os.geteuid()
        self._allowed = {self.person_uid, 0, *allow_uids}
        self._clients: dict[str, ClientHandle] = {}
        self._serving = False

    @property
    def clients(self) -> int:
        """How many clients are connected right now."""
        return len(self._clients)

    def connected(self) -> list[ClientHandle]:
        """A snapshot of the connected clients."""
        return list(self._clients.values())

    def broadcast(self, frame: dict[str, Any]) -> int:
        """Queue `frame` for every connected client; return how many took it. Never blocks."""
        data = protocol.encode(frame)  # once for everyone; a bad frame fails before any send
        return sum(1 for client in self.connected() if client._enqueue(data))

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; raise `ChatServerError` if the socket cannot be set up.

        Cancellation is the normal way to stop; cleanup runs shielded and re-raises it.
        """
        if self._serving:
            raise RuntimeError("this ChatServer is already serving")
        self._serving = True
        await self._prepare_path()
        try:
            listener = UnixListener.bind(self.path, mode=0o600)
        except OSError as exc:
            raise ChatServerError(f"cannot listen on {self.path}: {exc.strerror or exc}") from None
        inode = os.stat(self.path).st_ino
        log.info("chat socket listening", path=str(self.path))
        try:
            async with anyio.create_task_group() as tg:
                task_status.started()
                await self._accept_loop(listener, tg)
        finally:
            listener.close()
            self._unlink_if_ours(inode)
            log.info("chat socket closed", path=str(self.path))
            self._serving = False

    async def _accept_loop(self, listener: UnixListener, tg: anyio.abc.TaskGroup) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                # Out of descriptors and the like: back off instead of spinning or dying.
                log.warning("chat accept failed", error=str(exc))
                await anyio.sleep(0.5)
                continue
            tg.start_soon(self._serve_client, stream, name="chat-client")

    async def _prepare_path(self) -> None:
        path = self.path
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise ChatServerError(
                f"socket path {path} is too long ({len(os.fsencode(path))} bytes; "
                f"Unix sockets allow {MAX_SOCKET_PATH}); set chat.socket to a shorter path"
            )
        directory = path.parent
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = directory.stat()
            if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
                directory.chmod(0o700)
        except OSError as exc:
            raise ChatServerError(
                f"cannot prepare socket directory {directory}: {exc.strerror or exc}"
            ) from None

        try:
            info = path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(info.st_mode):
            raise ChatServerError(
                f"{path} exists and is not a socket; move it away or set chat.socket"
            )
        if await _is_live(path):
            raise ChatServerError(f"another daemon is listening on {path}")
        log.info("removing stale chat socket", path=str(path))
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ChatServerError(
                f"cannot remove stale socket {path}: {exc.strerror or exc}"
            ) from None

    def _unlink_if_ours(self, inode: int) -> None:
        # A successor may already have replaced the file; only remove the one we created.
        try:
            if self.path.lstat().st_ino == inode:
                self.path.unlink()
        except OSError:
            pass

    async def _serve_client(self, stream: UnixConnection) -> None:
        async with stream:
            try:
                uid, pid = _peer_credentials(stream)
            except OSError as exc:
                log.warning("chat peer credentials unavailable", error=str(exc))
                return
            if uid not in self._allowed:
                await _refuse(stream, uid, pid)
                return
            client = ClientHandle(uid=uid, pid=pid, queue_frames=self.queue_frames)
            self._clients[client.id] = client
            log.info("chat client connected", client=client.id, uid=uid, pid=pid)
            announced = False
            try:
                async with anyio.create_task_group() as tg:
                    client._scope = tg.cancel_scope
                    tg.start_soon(
                        client._write_loop, stream, name=f"chat-client-writer:{client.id}"
                    )
                    announced = True
                    if await self._call(client, self.handler.client_connected(client), None):
                        eof = await self._read_loop(client, stream)
                        # A half-closed peer (shut its write side) still reads the replies
                        # to what it sent: linger until the handler has answered them.
                        if eof and not client.closed:
                            with anyio.move_on_after(HALF_CLOSE_LINGER_S):
                                await self._call(
                                    client,
                                    self.handler.client_finished_sending(client),
                                    None,
                                    reply=False,
                                )
                    # The peer finished sending (or vanished): let what is queued go out.
                    client.closed = True
                    client._outbox.close()
                    with anyio.move_on_after(FLUSH_TIMEOUT_S):
                        await client._flushed.wait()
                    tg.cancel_scope.cancel()
            finally:
                client.closed = True
                client._outbox.close()
                self._clients.pop(client.id, None)
                if announced:
                    with (
                        anyio.CancelScope(shield=True),
                        anyio.move_on_after(DISCONNECT_TIMEOUT_S) as scope,
                    ):
                        await self._call(
                            client, self.handler.client_disconnected(client), None, reply=False
                        )
                    if scope.cancelled_caught:
                        log.warning("chat handler client_disconnected timed out", client=client.id)
                log.info(
                    "chat client disconnected", client=client.id, reason=client.drop_reason or "eof"
                )

    async def _read_loop(self, client: ClientHandle, stream: UnixConnection) -> bool:
        """Read and dispatch frames; return True on a clean end of input (EOF)."""
        reader = protocol.LineReader(stream, self.max_frame_bytes)
        while True:
            try:
                line = await reader.receive()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return False
            if line is None:
                return True
            if isinstance(line, Oversized):
                client.send(
                    protocol.error(
                        protocol.FRAME_TOO_LARGE,
                        f"frame exceeds {self.max_frame_bytes} bytes; it was discarded",
                    )
                )
                continue
            try:
                frame = protocol.parse_client_frame(line)
            except ProtocolError as exc:
                client.send(exc.to_frame())
                continue
            if isinstance(frame, ApproveFrame) and client.uid != self.person_uid:
                log.warning("approval answer refused", client=client.id, uid=client.uid)
                client.send(
                    protocol.error(
                        protocol.FORBIDDEN,
                        f"uid {client.uid} may not answer approvals: only the daemon's own "
                        f"uid ({self.person_uid}) may",
                        id=frame.id,
                    )
                )
                continue
            files: list[int] = []
            if isinstance(frame, CommandFrame) and frame.files:
                taken = stream.take_fds(frame.files)
                if taken is None:
                    client.send(
                        protocol.error(
                            protocol.BAD_FRAME,
                            f"the command declares {frame.files} open file(s) "
                            "but none came with it",
                            id=frame.id,
                        )
                    )
                    continue
                files = taken
            token = _passed_files.set(files)
            try:
                await self._call(
                    client, self.handler.handle_frame(client, frame), getattr(frame, "id", None)
                )
            finally:
                _passed_files.reset(token)
                for fd in files:
                    os.close(fd)

    async def _call(
        self, client: ClientHandle, call: Any, frame_id: str | None, *, reply: bool = True
    ) -> bool:
        """Await a handler callback; log and answer `internal` if it raises. Return success."""
        try:
            await call
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            log.exception("chat handler failed", client=client.id)
            if reply:
                client.send(
                    protocol.error(
                        protocol.INTERNAL,
                        "the daemon failed to handle that frame; see its log",
                        id=frame_id,
                    )
                )
            return False
        return True


async def _refuse(stream: UnixConnection, uid: int, pid: int) -> None:
    """Tell a peer it may not talk to this daemon, in a way it gets to read.

    Closing a socket with unread input makes the peer's next read fail with a reset, and a
    write after the close fails outright, so a peer that wrote first would never see the
    `forbidden` frame: stop writing, then read and discard its input until it closes (bounded).
    """
    log.warning("chat client refused", uid=uid, pid=pid)
    frame = protocol.error(protocol.FORBIDDEN, f"uid {uid} may not talk to this daemon")
    with anyio.move_on_after(REFUSAL_LINGER_S):
        try:
            await stream.send(protocol.encode(frame))
            await stream.send_eof()
            while True:
                await stream.receive()
        except (
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ):
            pass


def _peer_credentials(stream: UnixConnection) -> tuple[int, int]:
    """Return the peer's (uid, pid) from SO_PEERCRED (Linux)."""
    sock = stream.raw_socket
    fmt = "3i"
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize(fmt))
    pid, uid, _gid = struct.unpack(fmt, raw)
    return uid, pid


async def _is_live(path: Path) -> bool:
    """Return True if something accepts connections on `path` (a running daemon)."""
    try:
        with anyio.fail_after(LIVE_PROBE_TIMEOUT_S):
            stream = await connect_unix(path)
    except TimeoutError:
        # A listener too busy to accept is still a listener.
        return True
    except OSError:
        return False
    await stream.aclose()
    return True
