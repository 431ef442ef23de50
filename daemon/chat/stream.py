"""Unix stream sockets as anyio byte streams, built on `anyio.wait_readable`/`wait_writable`.

anyio's own UNIX socket streams on asyncio resolve a readiness future from a selector
callback; when a pending read is cancelled in the same loop iteration as the peer closes
(the ordinary way a server stops), the callback hits an already-cancelled future and
asyncio logs `InvalidStateError` (agronholm/anyio#1267 is the `aclose` variant). The
readiness waits used here tolerate that race, and the rest is a dozen lines of plain
non-blocking socket calls.

A server-side connection also receives open files a client passes with `SCM_RIGHTS`
(`received_fds`), so a client can hand the daemon a file it may read instead of a path the
daemon would open with its own rights.
"""

from __future__ import annotations

import array
import os
import socket
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import ByteStream, SocketAttribute

from daemon.log import get_logger

log = get_logger("reverie.chat")

# Open files a peer may have passed and not yet had claimed; more are closed on arrival, so a
# peer cannot make the daemon hold descriptors without bound.
MAX_PENDING_FDS = 4
_FD_SIZE = array.array("i").itemsize


class UnixConnection(ByteStream):
    """One connected Unix stream socket; the stream owns (and closes) the socket.

    With `accept_fds`, descriptors passed with `SCM_RIGHTS` are kept in `received_fds`, in
    arrival order, until `take_fds` claims them; the connection closes any left unclaimed.
    """

    def __init__(self, sock: socket.socket, *, accept_fds: bool = False) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._closed = False
        self._accept_fds = accept_fds
        self.received_fds: deque[int] = deque()

    @property
    def raw_socket(self) -> socket.socket:
        return self._sock

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return {SocketAttribute.raw_socket: lambda: self._sock}

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """Return the next bytes; raise `EndOfStream` when the peer has finished sending."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                data = self._recvmsg(max_bytes) if self._accept_fds else self._sock.recv(max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return data

    def _recvmsg(self, max_bytes: int) -> bytes:
        # The kernel never joins bytes that carry descriptors to bytes before them, so a file
        # arrives no later than the first byte of the frame it was sent with.
        space = socket.CMSG_SPACE(MAX_PENDING_FDS * _FD_SIZE)
        data, ancillary, flags, _ = self._sock.recvmsg(max_bytes, space, socket.MSG_CMSG_CLOEXEC)
        for level, kind, payload in ancillary:
            if level != socket.SOL_SOCKET or kind != socket.SCM_RIGHTS:
                continue
            fds = array.array("i")
            fds.frombytes(payload[: len(payload) - len(payload) % _FD_SIZE])
            for fd in fds:
                if len(self.received_fds) < MAX_PENDING_FDS:
                    self.received_fds.append(fd)
                else:
                    os.close(fd)
                    log.warning("chat peer passed more open files than it claimed; closed one")
        if flags & socket.MSG_CTRUNC:
            # The kernel closed what did not fit; the frame that wanted them will say so.
            log.warning("chat peer passed more open files at once than are accepted")
        return data

    def take_fds(self, count: int) -> list[int] | None:
        """Claim the `count` oldest passed descriptors (the caller closes them), or None if fewer arrived."""
        if count > len(self.received_fds):
            return None
        return [self.received_fds.popleft() for _ in range(count)]

    async def send(self, item: bytes) -> None:
        """Send all of `item`, waiting while the peer's buffer is full (cancellable)."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        view = memoryview(item)
        while view:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            view = view[sent:]
        await anyio.lowlevel.cancel_shielded_checkpoint()

    async def send_eof(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._sock)
            self._sock.close()
            while self.received_fds:
                os.close(self.received_fds.popleft())
        await anyio.lowlevel.checkpoint()


async def connect_unix(path: Path) -> UnixConnection:
    """Connect to a Unix stream socket; raise `OSError` as `socket.connect` would.

    Cancellable (a full listen backlog is retried until the caller's deadline).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.setblocking(False)
    try:
        while True:
            try:
                sock.connect(os.fspath(path))
                break
            except BlockingIOError:
                # AF_UNIX reports a full backlog as EAGAIN; retry shortly.
                await anyio.sleep(0.01)
    except BaseException:
        sock.close()
        raise
    return UnixConnection(sock)


class UnixListener:
    """A listening Unix socket whose `accept` waits without blocking the event loop."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock

    @classmethod
    def bind(cls, path: Path, *, mode: int, backlog: int = 128) -> UnixListener:
        """Bind and listen at `path`, then set the socket file's mode.

        The caller keeps the directory private (0700), so the instant between bind and
        chmod exposes nothing.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(os.fspath(path))
            os.chmod(path, mode)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    async def accept(self) -> UnixConnection:
        """Wait for the next client (cancellable); raise `OSError` on accept failures.

        The connection accepts files its client passes (`UnixConnection.received_fds`).
        """
        while True:
            try:
                conn, _ = self._sock.accept()
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            return UnixConnection(conn, accept_fds=True)

    def close(self) -> None:
        anyio.notify_closing(self._sock)
        self._sock.close()
