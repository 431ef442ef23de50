"""Talk to a running daemon over its chat socket.

`ChatClient` is the connection (`async with ChatClient.connect(path) as client`); `command`
and `send_message` are the one-shot helpers other `reverie` subcommands use. Every failure
surfaces as `ChatError` with one line a person can act on.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from daemon.chat import protocol
from daemon.chat.stream import UnixConnection, connect_unix

# Daemon frames can carry large command results; bound them anyway.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024


class ChatError(Exception):
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


def not_running(path: Path) -> ChatError:
    return ChatError(
        f"the daemon is not running (no socket at {path}); start it with `reverie run`"
    )


def new_id() -> str:
    return uuid.uuid4().hex[:12]


class ChatClient:
    """One connection to the daemon; frames in and out as dicts.

    `hello` holds the daemon's greeting (version, state, session id) once connected.
    """

    def __init__(self, stream: UnixConnection, path: Path, *, max_frame_bytes: int) -> None:
        self.path = path
        self._stream = stream
        self._reader = protocol.LineReader(stream, max_frame_bytes)
        self._max_frame_bytes = max_frame_bytes
        self._pending: deque[dict[str, Any]] = deque()
        self._send_lock = anyio.Lock()
        self.hello: dict[str, Any] = {}
        self.closed = False

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        path: Path,
        *,
        timeout: float = 5.0,  # noqa: ASYNC109 - the timeout becomes a ChatError with a message
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> AsyncIterator[ChatClient]:
        """Connect and wait for the daemon's `hello`; close the connection on exit.

        Raises `ChatError` when there is no daemon, access is refused, or no greeting
        arrives within `timeout` seconds.
        """
        path = Path(path)
        try:
            with anyio.fail_after(timeout):
                stream = await connect_unix(path)
        except TimeoutError:
            raise ChatError(
                f"the daemon at {path} did not accept the connection within {timeout:g}s"
            ) from None
        except (FileNotFoundError, ConnectionRefusedError):
            raise not_running(path) from None
        except PermissionError:
            raise ChatError(
                f"permission denied on {path}; run as the daemon's user (or root), "
                "or add your uid to chat.allow_uids"
            ) from None
        except OSError as exc:
            raise ChatError(f"cannot connect to {path}: {exc.strerror or exc}") from None
        client = cls(stream, path, max_frame_bytes=max_frame_bytes)
        try:
            await client._greet(timeout)
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _greet(self, timeout: float) -> None:  # noqa: ASYNC109 - the timeout becomes a ChatError with a message
        first = await self.receive(timeout)
        if first.get("type") == "error":
            raise ChatError(_error_text(first), first)
        if first.get("type") == "hello":
            self.hello = first
        else:
            # An older daemon without a greeting: keep the frame for the caller.
            self._pending.append(first)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            await self._stream.aclose()

    async def send(self, frame: dict[str, Any]) -> None:
        """Send one frame; raise `ChatError` if the daemon has gone away."""
        data = protocol.encode(frame)
        try:
            async with self._send_lock:
                await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise ChatError("the daemon closed the connection") from None

    async def receive(self, timeout: float | None = None) -> dict[str, Any]:  # noqa: ASYNC109 - the timeout becomes a ChatError with a message
        """Return the next frame; raise `ChatError` on end of stream or after `timeout` seconds.

        A timeout leaves the connection usable: a frame arriving later is still delivered.
        """
        frame = await self._next(timeout)
        if frame is None:
            raise ChatError("the daemon closed the connection")
        return frame

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        """Yield frames until the daemon closes the connection."""
        while (frame := await self._next(None)) is not None:
            yield frame

    async def _next(self, timeout: float | None) -> dict[str, Any] | None:  # noqa: ASYNC109 - the timeout becomes a ChatError with a message
        if self._pending:
            return self._pending.popleft()
        try:
            with anyio.fail_after(timeout):
                line = await self._reader.receive()
        except TimeoutError:
            raise ChatError(f"no answer from the daemon within {timeout:g}s") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return None
        if line is None:
            return None
        if isinstance(line, protocol.Oversized):
            raise ChatError(f"the daemon sent a frame larger than {self._max_frame_bytes} bytes")
        try:
            return protocol.decode(line)
        except ValueError as exc:
            raise ChatError(f"the daemon sent a malformed frame: {exc}") from None

    async def run_turn(
        self,
        text: str,
        on_frame: Callable[[dict[str, Any]], None],
        *,
        timeout: float,  # noqa: ASYNC109 - the timeout becomes a ChatError with a message
        on_accepted: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """Send a message and follow its turn to the end; return the `done` frame.

        Every frame received meanwhile goes to `on_frame` (accepted, deltas, tool, state,
        done). Raises `ChatError` on an `error` frame for this message or turn, or when
        the turn does not finish within `timeout` seconds (the turn keeps running in the
        daemon; send a `cancel` to stop it). When the daemon goes away after accepting the
        message the error is `MessageSaved`; before, a `ChatError` saying it may be lost.
        """
        message_id = new_id()
        await self.send({"type": "message", "text": text, "id": message_id})
        turn_id: str | None = None
        with anyio.move_on_after(timeout) as scope:
            while True:
                frame = await self._next(None)
                if frame is None:
                    if turn_id is not None:
                        raise MessageSaved(turn_id)
                    raise ChatError(
                        "the daemon closed the connection before confirming your message; "
                        "it may not have been saved"
                    )
                kind = frame.get("type")
                if kind == "accepted" and frame.get("id") == message_id and turn_id is None:
                    turn_id = str(frame.get("turn_id"))
                    if on_accepted is not None:
                        on_accepted(turn_id)
                mine = _concerns(frame, message_id, turn_id)
                if kind == "error" and mine:
                    raise ChatError(_error_text(frame), frame)
                on_frame(frame)
                if kind == "done" and turn_id is not None and frame.get("turn_id") == turn_id:
                    return frame
        assert scope.cancelled_caught
        raise ChatError(f"the turn did not finish within {timeout:g}s (it may still be running)")


def _concerns(frame: dict[str, Any], message_id: str, turn_id: str | None) -> bool:
    if frame.get("id") == message_id:
        return True
    if turn_id is not None and frame.get("turn_id") == turn_id:
        return True
    # A connection-level error (no id, no turn) on a connection that sent only this.
    return frame.get("type") == "error" and "id" not in frame and "turn_id" not in frame


def _error_text(frame: dict[str, Any]) -> str:
    message = str(frame.get("message") or "").strip()
    code = str(frame.get("code") or "error")
    return f"{message} ({code})" if message else code


async def command(
    path: Path,
    name: str,
    args: dict[str, Any] | None = None,
    timeout: float = 30.0,  # noqa: ASYNC109 - the timeout becomes a ChatError with a message
) -> Any:
    """Run one daemon command and return the `data` of its `result` frame.

    Raises `ChatError` when the daemon is not running, answers with an `error` frame for
    this command, or does not answer within `timeout` seconds (overall).
    """
    with anyio.move_on_after(timeout) as scope:
        async with ChatClient.connect(path, timeout=timeout) as client:
            command_id = new_id()
            frame: dict[str, Any] = {"type": "command", "name": name, "id": command_id}
            if args:
                frame["args"] = args
            await client.send(frame)
            while True:
                reply = await client.receive()
                if reply.get("type") == "result" and reply.get("id") == command_id:
                    return reply.get("data")
                if reply.get("type") == "error" and _concerns(reply, command_id, None):
                    raise ChatError(_error_text(reply), reply)
    assert scope.cancelled_caught
    raise ChatError(f"the daemon did not answer '{name}' within {timeout:g}s")


async def send_message(
    path: Path,
    text: str,
    on_frame: Callable[[dict[str, Any]], None],
    timeout: float,  # noqa: ASYNC109 - the timeout becomes a ChatError with a message
) -> dict[str, Any]:
    """Send one message, pass every frame of its turn to `on_frame`, return the `done` frame.

    Raises `ChatError` as `ChatClient.run_turn` does, or when the daemon is not running.
    """
    async with ChatClient.connect(path, timeout=min(timeout, 10.0)) as client:
        return await client.run_turn(text, on_frame, timeout=timeout)
