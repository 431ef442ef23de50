"""Talk to a running daemon from an event loop: `reverie chat`, `status`, `sleep`.

`ChatClient` drives a `DaemonLink` (`daemon.chat.link`, the one client connection: the
frames it builds, the one way frames are read) with non-blocking I/O, so a chat can stream a
reply while it waits for Ctrl-C. `async with ChatClient.connect(path) as client`; `command`
and `send_message` are the one-shot helpers other `reverie` subcommands use. Every failure
surfaces as `ChatError` with one line a person can act on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from daemon.chat import wire
from daemon.chat.link import (
    DEFAULT_MAX_FRAME_BYTES,
    ChatError,
    DaemonLink,
    MessageSaved,
    command_data,
    command_reply,
    concerns,
    connect_failure,
    error_text,
    new_id,
    not_running,
)
from daemon.chat.stream import UnixConnection, connect_unix

__all__ = [
    "ChatClient",
    "ChatError",
    "MessageSaved",
    "command",
    "new_id",
    "not_running",
    "send_message",
]


class ChatClient:
    """One connection to the daemon, read and written from an event loop; frames as dicts.

    `hello` holds the daemon's greeting (version, state, session id) once connected.
    """

    def __init__(self, stream: UnixConnection, link: DaemonLink) -> None:
        self.path = Path(link.path)
        self.link = link
        self._stream = stream
        self._send_lock = anyio.Lock()
        self.closed = False

    @property
    def hello(self) -> dict[str, Any]:
        return self.link.hello

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
        except OSError as exc:
            raise connect_failure(path, exc) from None
        link = DaemonLink(stream.raw_socket, path, max_frame_bytes=max_frame_bytes)
        client = cls(stream, link)
        try:
            link.greet(await client.receive(timeout))
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            await self._stream.aclose()

    async def send(self, frame: dict[str, Any]) -> None:
        """Send one frame; raise `ChatError` if the daemon has gone away."""
        data = wire.encode(frame)
        try:
            async with self._send_lock:
                await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise ChatError("the daemon closed the connection") from None

    async def seen(self, ids: list[str]) -> None:
        """Tell the daemon these notices were shown to the person (they count as delivered).

        Only a client that printed them says so; a command-only one never does.
        """
        await self.send(wire.seen(ids=ids))

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
        # Bytes land in the link as they arrive, so a timeout or a cancellation loses nothing.
        try:
            with anyio.fail_after(timeout):
                while (frame := self.link.next_frame()) is None:
                    if self.link.ended:
                        return None
                    try:
                        data = await self._stream.receive()
                    except anyio.EndOfStream:
                        self.link.finish()
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        return None
                    else:
                        self.link.feed(data)
        except TimeoutError:
            raise ChatError(f"no answer from the daemon within {timeout:g}s") from None
        return frame

    async def command(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> Any:
        """Run one command on this connection; return the `data` of its `result`.

        Raises `ChatError` on its `error` frame or when the connection ends first. It has no
        timeout of its own: bound it with a cancel scope (the module's `command` does); a reply
        that arrives after a cancellation is passed over by the next command.
        """
        command_id = new_id()
        await self.send(wire.command(name=name, id=command_id, args=args))
        while (reply := command_reply(await self.receive(), command_id, on_progress)) is None:
            pass
        return command_data(reply)

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
        await self.send(wire.message(text=text, id=message_id))
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
                mine = concerns(frame, message_id, turn_id)
                if kind == "error" and mine:
                    raise ChatError(error_text(frame), frame)
                on_frame(frame)
                if kind == "done" and turn_id is not None and frame.get("turn_id") == turn_id:
                    return frame
        assert scope.cancelled_caught
        raise ChatError(f"the turn did not finish within {timeout:g}s (it may still be running)")


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
            return await client.command(name, args)
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
