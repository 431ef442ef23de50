"""Live updates: what the daemon's bus says, streamed to every open console page over SSE.

`LiveFeed` listens on the bus for the events a person watching would want to see at once
(the lifecycle's state, turns, forks, sleep, scheduled items, notices, journal notes) and
hands each open page (`PageStream`) a copy. A page's stream is a bounded queue: a tab that
stops reading (asleep in the background) fills it and is closed, never holding anything up;
its `EventSource` reconnects when it wakes. Nothing is sent on a timer but a keep-alive
comment, so an idle console costs no requests and no model calls.

The chat page's stream also carries its chat client's frames (event `chat`): see
`daemon.web.chat`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from daemon.bus import EventBus
from daemon.events import (
    ForkFinished,
    JournalNote,
    MessageAccepted,
    NoticePosted,
    SleepFinished,
    SleepStarted,
    StateChanged,
    TurnFinished,
    Woke,
)
from daemon.log import get_logger

log = get_logger("web.live")

# A keep-alive comment after this long without an event, so proxies keep the stream open.
KEEPALIVE_S = 25.0
# Events queued for one page before it counts as gone.
PAGE_QUEUE = 512
# How long the browser waits before it reconnects a dropped stream.
RETRY_MS = 3000


def _iso(at: datetime) -> str:
    return at.isoformat()


class PageStream:
    """One open page's event stream. `send` never blocks; call it on the event loop only."""

    def __init__(self, *, queue: int = PAGE_QUEUE) -> None:
        self.id = "p-" + uuid.uuid4().hex[:10]
        self.closed = False
        self._send: MemoryObjectSendStream[tuple[str, str]]
        self._receive: MemoryObjectReceiveStream[tuple[str, str]]
        self._send, self._receive = anyio.create_memory_object_stream[tuple[str, str]](queue)

    def send(self, event: str, data: Any) -> bool:
        """Queue one event for the page; False (and the page closed) when it cannot keep up."""
        if self.closed:
            return False
        try:
            self._send.send_nowait((event, json.dumps(data, ensure_ascii=False, default=str)))
        except anyio.WouldBlock:
            log.warning("web page stream dropped: it stopped reading", page=self.id)
            self.close()
            return False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.closed = True
            return False
        return True

    def close(self) -> None:
        self.closed = True
        self._send.close()

    async def lines(self) -> AsyncIterator[str]:
        """The stream as SSE text: the retry hint, then each event, keep-alives between."""
        yield f"retry: {RETRY_MS}\n\n"
        async with self._receive:
            while True:
                item: tuple[str, str] | None = None
                # Never yield inside a cancel scope: the consumer runs between our yields.
                with anyio.move_on_after(KEEPALIVE_S):
                    try:
                        item = await self._receive.receive()
                    except anyio.EndOfStream:
                        return
                if item is None:
                    yield ": keep-alive\n\n"
                else:
                    yield f"event: {item[0]}\ndata: {item[1]}\n\n"


class EventStreamResponse(StreamingResponse):
    """A server-sent event stream that ends as soon as the browser goes away.

    Starlette's own streaming response notices a closed tab only at its next write (up to a
    keep-alive later); this one listens for the disconnect, so a page's chat client leaves
    the gateway at once (a question is then put to the pages still open, or settled as no).
    """

    media_type = "text/event-stream"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:

            async def stream() -> None:
                try:
                    await self.stream_response(send)
                except OSError:
                    pass  # the peer is gone; the listener below notices too
                finally:
                    tg.cancel_scope.cancel()

            tg.start_soon(stream, name="web-event-stream")
            await self.listen_for_disconnect(receive)
            tg.cancel_scope.cancel()
        # A stream cut between two events has its generator's cleanup run now, not at GC.
        close = getattr(self.body_iterator, "aclose", None)
        if close is not None:
            with anyio.CancelScope(shield=True):
                await close()


class LiveFeed:
    """The bus events every open page hears, and the pages open now."""

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self._pages: dict[str, PageStream] = {}

    @property
    def pages(self) -> int:
        return len(self._pages)

    def open(self) -> PageStream:
        page = PageStream()
        self._pages[page.id] = page
        return page

    def release(self, page: PageStream) -> None:
        page.close()
        self._pages.pop(page.id, None)

    def close_all(self) -> None:
        """End every page's stream (the console is stopping): each response finishes."""
        for page in list(self._pages.values()):
            self.release(page)

    def broadcast(self, event: str, data: Any) -> int:
        return sum(1 for page in list(self._pages.values()) if page.send(event, data))

    def register(self) -> Callable[[], None]:
        """Listen on the bus; return what stops listening."""
        name = "web.live"
        offs = [
            self.bus.on(StateChanged, self._state, name=name),
            self.bus.on(MessageAccepted, self._accepted, name=name),
            self.bus.on(TurnFinished, self._turn, name=name),
            self.bus.on(ForkFinished, self._fork, name=name),
            self.bus.on(SleepStarted, self._sleep_started, name=name),
            self.bus.on(SleepFinished, self._sleep_finished, name=name),
            self.bus.on(Woke, self._woke, name=name),
            self.bus.on(JournalNote, self._note, name=name),
            self.bus.on(NoticePosted, self._notice, name=name),
        ]

        def off() -> None:
            for unsubscribe in offs:
                unsubscribe()

        return off

    def _state(self, e: StateChanged) -> None:
        self.broadcast(
            "state",
            {
                "state": str(e.state),
                "previous": str(e.previous),
                "detail": e.detail,
                "phase": e.phase,
                "at": _iso(e.at),
            },
        )

    def _accepted(self, e: MessageAccepted) -> None:
        self.broadcast("turn", {"phase": "accepted", "turn_id": e.turn_id, "queued": e.queued})

    def _turn(self, e: TurnFinished) -> None:
        self.broadcast(
            "turn",
            {
                "phase": "finished",
                "turn_id": e.turn_id,
                "session_id": e.session_id,
                "stop_reason": e.stop_reason,
                "context_tokens": e.context_tokens,
            },
        )

    def _fork(self, e: ForkFinished) -> None:
        self.broadcast(
            "fork",
            {
                "phase": "finished",
                "fork_id": e.fork_session_id,
                "parent": e.parent_session_id,
                "status": e.status,
                "depth": e.depth,
            },
        )

    def _sleep_started(self, e: SleepStarted) -> None:
        self.broadcast(
            "sleep", {"phase": "started", "reason": e.reason, "session_id": e.session_id}
        )

    def _sleep_finished(self, e: SleepFinished) -> None:
        self.broadcast(
            "sleep",
            {"phase": "finished", "reason": e.reason, "session_id": e.new_session_id},
        )

    def _woke(self, e: Woke) -> None:
        self.broadcast("sleep", {"phase": "woke", "session_id": e.session_id})

    def _note(self, e: JournalNote) -> None:
        data = {"summary": e.summary, "tags": list(e.tags), "session_id": e.session_id}
        self.broadcast("journal", data)
        if e.tags and e.tags[0] == "schedule":
            self.broadcast("schedule", data)

    def _notice(self, e: NoticePosted) -> None:
        self.broadcast(
            "notice",
            {"id": e.notice_id, "kind": e.kind, "text": e.text, "at": _iso(e.created_at)},
        )
