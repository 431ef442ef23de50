"""A scripted `ChatHandler` for tests: a fake daemon that speaks the real protocol.

It greets, acknowledges messages with a turn id, streams a scripted reply as deltas (with
an optional pause between them so cancellation can be exercised), answers scripted
commands, and records everything it saw. Use it as an async context manager: it owns the
task group its turns run in.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio

from daemon.chat import protocol
from daemon.chat.protocol import CancelFrame, ClientFrame, CommandFrame, MessageFrame
from daemon.chat.server import ClientHandle


@dataclass(frozen=True, kw_only=True)
class ScriptedTurn:
    """How the fake daemon answers a message."""

    chunks: tuple[str, ...] = ("Hello", ", ", "world", ".")
    pause_s: float = 0.0
    tools: tuple[str, ...] = ()
    error_code: str | None = None
    error_message: str = "scripted failure"


@dataclass(kw_only=True)
class Seen:
    frames: list[tuple[str, ClientFrame]] = field(default_factory=list)
    connected: list[str] = field(default_factory=list)
    disconnected: list[str] = field(default_factory=list)


class ScriptedChatHandler:
    """Answer chat frames from a script; see the module docstring."""

    def __init__(
        self,
        *,
        turn: ScriptedTurn | None = None,
        commands: Mapping[str, Callable[[dict[str, Any]], Any]] | None = None,
        state: str = "awake",
        session_id: str = "session-test",
        version: str = "test",
    ) -> None:
        self.turn = turn or ScriptedTurn()
        self.commands = dict(commands or {})
        self.state = state
        self.session_id = session_id
        self.version = version
        self.seen = Seen()
        self.frame_arrived = anyio.Event()
        self._turns: dict[str, anyio.CancelScope] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> ScriptedChatHandler:
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)  # runs first on exit: stop scripted turns
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._stack.__aexit__(exc_type, exc, tb)

    async def client_connected(self, client: ClientHandle) -> None:
        self.seen.connected.append(client.id)
        client.send(
            protocol.hello(version=self.version, state=self.state, session_id=self.session_id)
        )

    async def client_finished_sending(self, client: ClientHandle) -> None:
        # Scripted replies are sent as frames arrive: nothing is owed after end of input.
        return None

    async def client_disconnected(self, client: ClientHandle) -> None:
        self.seen.disconnected.append(client.id)

    async def handle_frame(self, client: ClientHandle, frame: ClientFrame) -> None:
        self.seen.frames.append((client.id, frame))
        self.frame_arrived.set()
        self.frame_arrived = anyio.Event()
        if isinstance(frame, MessageFrame):
            turn_id = "t-" + uuid.uuid4().hex[:8]
            client.send(protocol.accepted(turn_id=turn_id, id=frame.id, queued=len(self._turns)))
            assert self._tg is not None, "use ScriptedChatHandler as an async context manager"
            self._tg.start_soon(self._run_turn, client, turn_id, name=f"scripted-turn:{turn_id}")
        elif isinstance(frame, CommandFrame):
            if frame.name not in self.commands:
                client.send(
                    protocol.error(
                        protocol.ErrorCode.UNKNOWN_COMMAND,
                        f"no command '{frame.name}'",
                        id=frame.id,
                    )
                )
                return
            data = self.commands[frame.name](frame.args)
            client.send(protocol.result(id=frame.id, name=frame.name, data=data))
        elif isinstance(frame, CancelFrame):
            targets = [frame.turn_id] if frame.turn_id else list(self._turns)
            for turn_id in targets:
                scope = self._turns.get(turn_id or "")
                if scope is not None:
                    scope.cancel()

    async def _run_turn(self, client: ClientHandle, turn_id: str) -> None:
        script = self.turn
        with anyio.CancelScope() as scope:
            self._turns[turn_id] = scope
            try:
                for name in script.tools:
                    client.send(protocol.tool(turn_id=turn_id, name=name, phase="started"))
                    client.send(
                        protocol.tool(turn_id=turn_id, name=name, phase="finished", is_error=False)
                    )
                if script.error_code:
                    client.send(
                        protocol.error(
                            protocol.ErrorCode(script.error_code),
                            script.error_message,
                            turn_id=turn_id,
                        )
                    )
                    return
                for chunk in script.chunks:
                    if script.pause_s:
                        await anyio.sleep(script.pause_s)
                    client.send(protocol.delta(turn_id=turn_id, text=chunk))
                client.send(
                    protocol.done(
                        turn_id=turn_id, text="".join(script.chunks), stop_reason="end_turn"
                    )
                )
            finally:
                self._turns.pop(turn_id, None)
        if scope.cancelled_caught:
            client.send(
                protocol.error(protocol.CANCELLED, "the turn was cancelled", turn_id=turn_id)
            )
