"""The chat gateway: turns client frames into trunk actions and commands into answers.

It implements the chat server's handler protocol by shape (the chat package does not
import the agent; the agent uses only `chat.protocol`, the wire format). `message` frames are
acknowledged only after the trunk's inbox has them on disk. It alone turns the turns' typed
events and the lifecycle's state changes into frames. A command is registered with its request
class and a handler typed on it (`command(name, RequestCls, handler)`): the frame's `args` are
parsed by `RequestCls.from_args` (a `ValueError` is answered `bad_args`), the handler answers
with a TypedDict, sent as the `result` frame's `data`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar, assert_never

import anyio

from daemon.agent.trunk import Trunk
from daemon.agent.turns import Delta, ToolPhase, TurnDone, TurnEvent, TurnFailed, TurnObserver
from daemon.chat import protocol
from daemon.chat.protocol import (
    ApproveFrame,
    CancelFrame,
    ClientFrame,
    CommandFrame,
    ErrorCode,
    MessageFrame,
    ProtocolError,
    SeenFrame,
)
from daemon.errors import ReverieError
from daemon.events import MessageAccepted, StateChanged
from daemon.log import get_logger
from daemon.seams import NoticeDesk as NoticeDesk
from daemon.store.errors import storage_failure
from daemon.store.postgres import StoreAway
from daemon.tools.approvals import ApprovalRefused, Approvals

log = get_logger("gateway")

VERSION = "0.1.0"


class CommandRequest(Protocol):
    """A command's request: a frozen dataclass parsed from the wire's `args` object.

    `from_args` raises `ValueError` with a sentence for the person when the arguments are
    wrong (the gateway answers `bad_args` with it); the handler then gets a typed request.
    """

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self: ...


RequestT = TypeVar("RequestT", bound=CommandRequest)
# A result is a TypedDict: the exact JSON object the `result` frame carries as `data`.
ResultT = TypeVar("ResultT", bound=Mapping[str, object])


@dataclass(frozen=True, slots=True)
class Command(Generic[RequestT, ResultT]):
    """One registered socket command: its request class and the typed handler answering it."""

    name: str
    request: type[RequestT]
    handler: Callable[[RequestT], Awaitable[ResultT]]

    def parse(self, args: Mapping[str, Any]) -> RequestT:
        return self.request.from_args(args)

    async def answer(self, request: RequestT) -> ResultT:
        return await self.handler(request)

    async def __call__(self, args: Mapping[str, Any]) -> ResultT:
        """Run it as the wire does: parse `args` (`ValueError` when wrong), then answer."""
        return await self.answer(self.parse(args))


# Set while a command runs: sends a `progress` frame to the client that asked for it.
_progress: ContextVar[Callable[[Any], None] | None] = ContextVar("command_progress", default=None)


def command_progress(data: Any) -> None:
    """Tell the client waiting on the running command how far it has got (no-op elsewhere)."""
    send = _progress.get()
    if send is not None:
        send(data)


class CommandUnavailable(ReverieError):
    """The command exists in the contract but its system is not running."""


class CommandBusy(ReverieError):
    """The command cannot run in the daemon's current state (the message says why)."""


def turn_frame(event: TurnEvent) -> dict[str, Any]:
    """The wire frame for one turn event."""
    if isinstance(event, Delta):
        return protocol.delta(turn_id=event.turn_id, text=event.text)
    if isinstance(event, ToolPhase):
        return protocol.tool(
            turn_id=event.turn_id,
            name=event.name,
            phase=event.phase,
            is_error=event.is_error,
            detail=event.detail,
            depth=event.depth,
            fork_id=event.fork_id,
            summary=event.summary,
        )
    if isinstance(event, TurnDone):
        return protocol.done(
            turn_id=event.turn_id, text=event.text, stop_reason=event.stop_reason, usage=event.usage
        )
    if isinstance(event, TurnFailed):
        return protocol.error(event.code, event.message, turn_id=event.turn_id)
    raise TypeError(f"not a turn event: {event!r}")


def state_frame(change: StateChanged) -> dict[str, Any]:
    return protocol.state(
        str(change.state), previous=str(change.previous), detail=change.detail, phase=change.phase
    )


class ChatGateway:
    """Bridges chat connections to the trunk and to named commands."""

    def __init__(
        self,
        trunk: Trunk,
        *,
        state: Callable[[], str],
        session_id: Callable[[], str],
        approvals: Approvals | None = None,
        notices: NoticeDesk | None = None,
    ) -> None:
        self.trunk = trunk
        # What the agent has to tell the person: their clients get it after `hello`.
        self.notices = notices
        # The questions tool calls put to the person; their clients are attached as they connect.
        self.approvals = approvals
        self._state = state
        self._session_id = session_id
        self.commands: dict[str, Command[Any, Any]] = {}
        self._client_observers: dict[str, TurnObserver] = {}
        # Turns each client is still waiting on, so a half-closed client gets its replies.
        self._outstanding: dict[str, set[str]] = {}
        self._drained: dict[str, anyio.Event] = {}

    def command(
        self,
        name: str,
        request: type[RequestT],
        handler: Callable[[RequestT], Awaitable[ResultT]],
    ) -> None:
        """Answer command `name`: its args parsed by `request.from_args`, then `handler` runs."""
        self.commands[name] = Command(name, request, handler)

    async def client_connected(self, client: Any) -> None:
        client.send(
            protocol.hello(version=VERSION, state=self._state(), session_id=self._session_id())
        )
        if self.approvals is not None:
            self.approvals.attach(client)
        if self.notices is not None:
            try:
                await self.notices.attach(client)
            except StoreAway as exc:
                # The outbox lives in the store: its notices wait for a connection made once
                # the server is back, and this one is served meanwhile.
                log.warning("notices not delivered: the store's server is away", error=str(exc))

    async def client_finished_sending(self, client: Any) -> None:
        """Return once every turn this client started has been answered."""
        if self.approvals is not None:
            # It can read on but never answer: a question it would hold up goes elsewhere.
            self.approvals.detach(client)
        if self._outstanding.get(client.id):
            event = self._drained.setdefault(client.id, anyio.Event())
            await event.wait()

    async def client_disconnected(self, client: Any) -> None:
        if self.approvals is not None:
            self.approvals.detach(client)
        if self.notices is not None:
            self.notices.detach(client)
        self._outstanding.pop(client.id, None)
        event = self._drained.pop(client.id, None)
        if event is not None:
            event.set()
        observer = self._client_observers.pop(client.id, None)
        if observer is not None:
            # The turn goes on (its reply lands on disk); only this listener goes away.
            self.trunk.detach(observer)

    def _observer_for(self, client: Any) -> TurnObserver:
        observer = self._client_observers.get(client.id)
        if observer is None:

            def observer(event: TurnEvent, _client: Any = client) -> None:
                if not _client.closed:
                    _client.send(turn_frame(event))
                if isinstance(event, TurnDone | TurnFailed):
                    waiting = self._outstanding.get(_client.id)
                    if waiting is not None:
                        waiting.discard(event.turn_id)
                        if not waiting and _client.id in self._drained:
                            self._drained.pop(_client.id).set()

            self._client_observers[client.id] = observer
        return observer

    async def handle_frame(self, client: Any, frame: ClientFrame) -> None:
        """Act on one frame, parsed and checked at the edge (`protocol.parse_client_frame`)."""
        match frame:
            case MessageFrame():
                await self._message(client, frame)
            case CancelFrame():
                if not await self.trunk.cancel(frame.turn_id):
                    client.send(
                        protocol.error(
                            ErrorCode.NOT_RUNNING, "no turn to cancel", turn_id=frame.turn_id
                        )
                    )
            case CommandFrame():
                await self._command(client, frame)
            case ApproveFrame():
                self._approve(client, frame)
            case SeenFrame():
                await self._seen(client, frame)
            case _:
                assert_never(frame)

    async def _message(self, client: Any, frame: MessageFrame) -> None:
        cid = frame.id
        if not frame.text.strip():
            # The parser refuses it too; a frame built in-process (the console) is checked here.
            client.send(protocol.error(ErrorCode.BAD_FRAME, "message text is empty", id=cid))
            return
        refusal = self.trunk.refusal()
        if refusal is not None:
            client.send(protocol.error(ErrorCode.STORAGE, f"message NOT saved: {refusal}", id=cid))
            return
        try:
            accepted = await self.trunk.submit(
                frame.text, observer=self._observer_for(client), client_msg_id=cid
            )
        except OSError as exc:
            # Not on disk means not acknowledged: the client still holds the message.
            log.error("could not persist an incoming message", error=repr(exc))
            reason = storage_failure(exc) or exc.strerror or str(exc)
            client.send(
                protocol.error(
                    ErrorCode.STORAGE, f"message NOT saved ({reason}); please resend later", id=cid
                )
            )
            return
        self._outstanding.setdefault(client.id, set()).add(accepted.turn_id)
        client.send(protocol.accepted(turn_id=accepted.turn_id, id=cid, queued=accepted.queued))
        # While the model is down the person hears so now, not after the outage ends.
        self.trunk.tell_if_waiting(accepted.turn_id)
        await self.trunk.loop.bus.publish(
            MessageAccepted(turn_id=accepted.turn_id, queued=accepted.queued)
        )

    def _approve(self, client: Any, frame: ApproveFrame) -> None:
        aid = frame.id
        if self.approvals is None:
            client.send(
                protocol.error(ErrorCode.UNKNOWN_APPROVAL, "no approvals are asked here", id=aid)
            )
            return
        try:
            self.approvals.answer(client, aid, frame.decision)
        except ApprovalRefused as exc:
            client.send(protocol.error(exc.code, exc.message, id=aid))

    async def _seen(self, client: Any, frame: SeenFrame) -> None:
        if self.notices is None:
            client.send(protocol.error(ErrorCode.UNKNOWN_NOTICE, "no notices are sent here"))
            return
        try:
            await self.notices.seen(client, list(frame.ids))
        except ProtocolError as exc:
            client.send(exc.to_frame())

    async def _command(self, client: Any, frame: CommandFrame) -> None:
        name, cid = frame.name, frame.id
        command = self.commands.get(name)
        if command is None:
            known = ", ".join(sorted(self.commands))
            client.send(
                protocol.error(
                    ErrorCode.UNKNOWN_COMMAND, f"unknown command {name!r}; known: {known}", id=cid
                )
            )
            return
        token = _progress.set(
            lambda data: client.send(protocol.progress(id=cid, name=name, data=data))
        )
        try:
            # Parsed by its request class, then answered by its handler with a typed result.
            data = await command(frame.args)
        except CommandUnavailable as exc:
            client.send(protocol.error(ErrorCode.UNAVAILABLE, str(exc), id=cid))
            return
        except CommandBusy as exc:
            client.send(protocol.error(ErrorCode.BUSY, str(exc), id=cid))
            return
        except (ValueError, KeyError, TypeError) as exc:
            # Its arguments refused by `from_args`, or a refusal found while answering (an
            # unknown fact id, a bad line in an import).
            client.send(protocol.error(ErrorCode.BAD_ARGS, str(exc), id=cid))
            return
        except Exception as exc:
            log.error("command failed", command=name, error=repr(exc), exc_info=True)
            client.send(protocol.error(ErrorCode.INTERNAL, f"{name} failed: {exc}", id=cid))
            return
        finally:
            _progress.reset(token)
        client.send(protocol.result(id=cid, name=name, data=data))
