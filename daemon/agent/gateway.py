"""The chat gateway: turns client frames into trunk actions and commands into answers.

It implements the chat server's handler protocol by shape (the chat package does not
import the agent, nor the agent the chat package). `message` frames are acknowledged only
after the trunk's inbox has them on disk.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from daemon.agent.trunk import Trunk
from daemon.log import get_logger

log = get_logger("gateway")

Command = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
VERSION = "0.1.0"


def _get(frame: Any, key: str, default: Any = None) -> Any:
    if isinstance(frame, dict):
        return frame.get(key, default)
    return getattr(frame, key, default)


def _frame_type(frame: Any) -> str:
    kind = _get(frame, "type")
    if isinstance(kind, str):
        return kind
    return type(frame).__name__.lower().removesuffix("frame")


class CommandUnavailable(Exception):
    """The command exists in the contract but its system is not running."""


class ChatGateway:
    """Bridges chat connections to the trunk and to named commands."""

    def __init__(self, trunk: Trunk, *, state: Callable[[], str], session_id: Callable[[], str]) -> None:
        self.trunk = trunk
        self._state = state
        self._session_id = session_id
        self.commands: dict[str, Command] = {}
        self._client_sinks: dict[str, Callable[[dict[str, Any]], None]] = {}
        # Turns each client is still waiting on, so a half-closed client gets its replies.
        self._outstanding: dict[str, set[str]] = {}
        self._drained: dict[str, anyio.Event] = {}

    def command(self, name: str, fn: Command) -> None:
        self.commands[name] = fn

    async def client_connected(self, client: Any) -> None:
        client.send({"type": "hello", "version": VERSION, "state": self._state(), "session_id": self._session_id()})

    async def client_finished_sending(self, client: Any) -> None:
        """Return once every turn this client started has been answered."""
        if self._outstanding.get(client.id):
            event = self._drained.setdefault(client.id, anyio.Event())
            await event.wait()

    async def client_disconnected(self, client: Any) -> None:
        self._outstanding.pop(client.id, None)
        event = self._drained.pop(client.id, None)
        if event is not None:
            event.set()
        sink = self._client_sinks.pop(client.id, None)
        if sink is not None:
            # The turn goes on (its reply lands on disk); only this listener goes away.
            self.trunk.detach_sink(sink)

    def _sink_for(self, client: Any) -> Callable[[dict[str, Any]], None]:
        sink = self._client_sinks.get(client.id)
        if sink is None:

            def sink(frame: dict[str, Any], _client: Any = client) -> None:
                if not _client.closed:
                    _client.send(frame)
                if frame.get("type") in ("done", "error") and frame.get("turn_id"):
                    waiting = self._outstanding.get(_client.id)
                    if waiting is not None:
                        waiting.discard(frame["turn_id"])
                        if not waiting and _client.id in self._drained:
                            self._drained.pop(_client.id).set()

            self._client_sinks[client.id] = sink
        return sink

    async def handle_frame(self, client: Any, frame: Any) -> None:
        kind = _frame_type(frame)
        if kind == "message":
            text = _get(frame, "text") or ""
            cid = _get(frame, "id")
            if not text.strip():
                client.send({"type": "error", "code": "bad_frame", "message": "message text is empty", "id": cid})
                return
            try:
                accepted = await self.trunk.submit(text, sink=self._sink_for(client), client_msg_id=cid)
            except OSError as exc:
                # Not on disk means not acknowledged: the client still holds the message.
                log.error("could not persist an incoming message", error=repr(exc))
                reason = "the disk is full" if exc.errno == 28 else (exc.strerror or str(exc))
                client.send({"type": "error", "code": "storage", "message": f"message NOT saved ({reason}); please resend later", "id": cid})
                return
            self._outstanding.setdefault(client.id, set()).add(accepted.turn_id)
            client.send({"type": "accepted", "turn_id": accepted.turn_id, "id": cid, "queued": accepted.queued})
        elif kind == "cancel":
            turn_id = _get(frame, "turn_id")
            if not await self.trunk.cancel(turn_id):
                client.send({"type": "error", "code": "not_running", "message": "no turn to cancel", "turn_id": turn_id})
        elif kind == "command":
            await self._command(client, frame)
        else:
            client.send({"type": "error", "code": "unknown_type", "message": f"unknown frame type {kind!r}"})

    async def _command(self, client: Any, frame: Any) -> None:
        name = _get(frame, "name") or ""
        cid = _get(frame, "id")
        args = _get(frame, "args") or {}
        fn = self.commands.get(name)
        if fn is None:
            client.send(
                {"type": "error", "code": "unknown_command", "message": f"unknown command {name!r}; known: {', '.join(sorted(self.commands))}", "id": cid}
            )
            return
        try:
            data = await fn(args if isinstance(args, dict) else {})
        except CommandUnavailable as exc:
            client.send({"type": "error", "code": "unavailable", "message": str(exc), "id": cid})
            return
        except (ValueError, KeyError, TypeError) as exc:
            client.send({"type": "error", "code": "bad_args", "message": str(exc), "id": cid})
            return
        except Exception as exc:
            log.error("command failed", command=name, error=repr(exc), exc_info=True)
            client.send({"type": "error", "code": "internal", "message": f"{name} failed: {exc}", "id": cid})
            return
        client.send({"type": "result", "id": cid, "name": name, "data": data})
