"""The one client connection to the daemon's socket (standard library only).

`DaemonLink` is a connection: it builds the frames it sends with the protocol's constructors
(`daemon.chat.wire`), reads what comes back through the one `LineBuffer`/`decode` path, keeps
the daemon's greeting, and settles a command's reply. Its own methods block, which is what a
forwarded `reverie memory search` wants: no event loop, no anyio, a process start and one
round trip. `ChatClient` (`daemon.chat.client`) drives the same link from an event loop for
`reverie chat`, `status` and `sleep`. Every failure is a `ChatError` with one line a person
can act on.
"""

from __future__ import annotations

import _socket  # `socket` wraps it in enums and selectors: ~4 ms of a forwarded command
import os
import sys
from collections import deque

from daemon.chat import wire
from daemon.errors import ReverieError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

# Daemon frames can carry large command results; bound them anyway.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
CONNECT_TIMEOUT_S = 5.0


class ChatError(ReverieError):
    """Talking to the daemon failed; `frame` is the daemon's `error` frame when there was one."""

    def __init__(self, message: str, frame: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.frame = frame

    @property
    def code(self) -> str | None:
        return self.frame.get("code") if self.frame else None


class MessageSaved(ChatError):
    """The connection ended after the daemon had saved the message: it will still be answered.

    The daemon acknowledges a message (`accepted`) only once it is on disk, and a restarted
    daemon answers every message it acknowledged.
    """

    def __init__(self, turn_id: str) -> None:
        super().__init__(
            "the daemon stopped before its reply was complete; your message was saved "
            f"and will be answered when the daemon is back (turn {turn_id})"
        )
        self.turn_id = turn_id


def new_id() -> str:
    """A fresh frame id (12 hex digits)."""
    return os.urandom(6).hex()


# How to start the daemon, wherever a command finds it not running: installed, or in a checkout.
START_HINT = "start it with `reverie run` (or `./scripts/run-daemon.sh` in a checkout)"


def not_running(path: str | os.PathLike[str]) -> ChatError:
    return ChatError(f"the daemon is not running (no socket at {os.fspath(path)}); {START_HINT}")


def connect_failure(path: str | os.PathLike[str], exc: OSError) -> ChatError:
    """Say why connecting to the socket at `path` failed, in words a person can act on."""
    if isinstance(exc, FileNotFoundError | ConnectionRefusedError):
        return not_running(path)
    if isinstance(exc, PermissionError):
        return ChatError(
            f"permission denied on {os.fspath(path)}; run as the daemon's user (or root), "
            "or add your uid to chat.allow_uids"
        )
    return ChatError(f"cannot connect to {os.fspath(path)}: {exc.strerror or exc}")


def error_text(frame: Mapping[str, Any]) -> str:
    """An `error` frame as one line: its message, then its code."""
    message = str(frame.get("message") or "").strip()
    code = str(frame.get("code") or "error")
    return f"{message} ({code})" if message else code


def concerns(frame: Mapping[str, Any], frame_id: str, turn_id: str | None = None) -> bool:
    """Whether `frame` answers the frame `frame_id` sent (or belongs to its turn)."""
    if frame.get("id") == frame_id:
        return True
    if turn_id is not None and frame.get("turn_id") == turn_id:
        return True
    # A connection-level error (no id, no turn) on a connection that sent only this.
    return frame.get("type") == "error" and "id" not in frame and "turn_id" not in frame


def command_reply(
    frame: dict[str, Any],
    command_id: str,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any] | None:
    """The frame that ends command `command_id` (its `result` or `error`), or None if not this one.

    The command's `progress` frames go to `on_progress`; everything else (state broadcasts,
    other conversations' frames) passes by.
    """
    kind = frame.get("type")
    if kind == "progress" and frame.get("id") == command_id:
        if on_progress is not None:
            on_progress(frame.get("data") or {})
        return None
    if kind == "result" and frame.get("id") == command_id:
        return frame
    if kind == "error" and concerns(frame, command_id):
        return frame
    return None


def command_data(frame: dict[str, Any]) -> Any:
    """A settled command's `data`; raise `ChatError` when the daemon refused it."""
    if frame.get("type") == "error":
        raise ChatError(error_text(frame), frame)
    return frame.get("data")


class DaemonLink:
    """One connection to the daemon: frames out, frames in, the greeting it began with.

    `feed`/`finish`/`next_frame` are the reading side without I/O: bytes go in, whole frames
    come out (an oversized or malformed frame is a `ChatError`). `receive`, `send` and
    `request` do blocking I/O on the socket; `ChatClient` does its own, non-blocking, on the
    same link. `hello` holds the daemon's greeting (version, state, session id).
    """

    def __init__(
        self,
        sock: _socket.socket,
        path: str | os.PathLike[str],
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.sock = sock
        self.path = path
        self.max_frame_bytes = max_frame_bytes
        self.hello: dict[str, Any] = {}
        self.ended = False
        self._lines = wire.LineBuffer(max_frame_bytes)
        # Frames read, in order; a frame that could not be read is its `ChatError`, raised in
        # its turn, so one bad frame costs that frame and not the connection.
        self._frames: deque[dict[str, Any] | ChatError] = deque()

    @classmethod
    def connect(
        cls,
        path: str | os.PathLike[str],
        *,
        timeout: float = CONNECT_TIMEOUT_S,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> DaemonLink:
        """Connect and read the daemon's greeting, waiting at most `timeout` seconds for each.

        Raises `ChatError` when no daemon listens there, access is refused, or it does not
        greet in time.
        """
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        sock.settimeout(timeout)
        try:
            sock.connect(os.fspath(path))
        except TimeoutError:
            sock.close()
            raise ChatError(
                f"the daemon at {os.fspath(path)} did not accept the connection within {timeout:g}s"
            ) from None
        except OSError as exc:
            sock.close()
            raise connect_failure(path, exc) from None
        link = cls(sock, path, max_frame_bytes=max_frame_bytes)
        try:
            link.greet(link.receive(timeout))
        except BaseException:
            link.close()
            raise
        return link

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> DaemonLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- frames in, without I/O --------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Take bytes read from the socket; whole frames become available to `next_frame`."""
        self._take_lines(self._lines.feed(data))

    def finish(self) -> None:
        """The daemon closed its side: what is left is the last frame, if anything."""
        tail = self._lines.finish()
        self._take_lines([tail] if tail is not None else [])
        self.ended = True

    def _take_lines(self, lines: list[bytes | wire.Oversized]) -> None:
        for line in lines:
            if isinstance(line, wire.Oversized):
                self._frames.append(
                    ChatError(f"the daemon sent a frame larger than {self.max_frame_bytes} bytes")
                )
                continue
            try:
                self._frames.append(wire.decode(line))
            except ValueError as exc:  # json's decode error is a ValueError too
                self._frames.append(ChatError(f"the daemon sent a malformed frame: {exc}"))

    def next_frame(self) -> dict[str, Any] | None:
        """The next whole frame read, None when none is buffered; a bad frame raises `ChatError`."""
        if not self._frames:
            return None
        frame = self._frames.popleft()
        if isinstance(frame, ChatError):
            raise frame
        return frame

    def greet(self, first: dict[str, Any]) -> None:
        """Take the connection's first frame: the daemon's `hello`, or its refusal."""
        if first.get("type") == "error":
            raise ChatError(error_text(first), first)
        if first.get("type") == "hello":
            self.hello = first
        else:
            # An older daemon without a greeting: keep the frame for the caller.
            self._frames.appendleft(first)

    # --- blocking I/O ------------------------------------------------------------------

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The next frame, waiting at most `timeout` seconds for each read (None: no limit).

        Raises `ChatError` when the daemon closes the connection or is silent that long.
        """
        while (frame := self.next_frame()) is None:
            if self.ended:
                raise ChatError("the daemon closed the connection")
            self.sock.settimeout(timeout)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                raise ChatError(f"no answer from the daemon within {timeout:g}s") from None
            except OSError:
                data = b""
            if data:
                self.feed(data)
            else:
                self.finish()
        return frame

    def send(self, frame: dict[str, Any], *, file: int | None = None) -> None:
        """Send one frame; `file`, an open descriptor, goes with it for the daemon to read."""
        data = wire.encode(frame)
        self.sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            if file is None:
                self.sock.sendall(data)
            else:
                rights = file.to_bytes(4, sys.byteorder)
                sent = self.sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
                self.sock.sendall(data[sent:])
        except OSError:
            raise ChatError("the daemon closed the connection") from None

    def request(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        file: int | None = None,
    ) -> dict[str, Any]:
        """Send command `name`; return the frame that ends it, its `result` or `error`.

        `timeout` bounds each wait for the daemon (None: no limit); its `progress` frames go
        to `on_progress`; `file` goes with the command (`SCM_RIGHTS`).
        """
        command_id = new_id()
        frame = wire.command(
            name=name, id=command_id, args=args, files=1 if file is not None else 0
        )
        self.send(frame, file=file)
        while (reply := command_reply(self.receive(timeout), command_id, on_progress)) is None:
            pass
        return reply
