"""Chat in the console: the page is one more client of the daemon's chat gateway.

A chat page opens its event stream with `/events?chat=1`; that stream becomes a
`WebChatClient` the gateway treats like a socket connection — it gets `hello`, every frame of
the turns it started (`delta`, `tool`, `done`, fork progress), `approval` questions and
notices — and each frame reaches the page as an SSE event `chat`. What the page says goes
in through POSTs that name its client: `/chat/message` answers once the gateway acknowledged
the message, that is once it is on disk (the socket's guarantee); `/chat/approve` answers an
approval in place; `/chat/cancel` and `/chat/seen` are the socket's `cancel` and `seen`.

A logged-in browser is the person (it holds the token only they can read), so its clients
carry the daemon's own uid: approvals and notices reach them as they reach the person's
terminal. A client belongs to the session that opened it; another session cannot speak
through it.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemon.chat.protocol import (
    APPROVAL_ANSWERS,
    ApproveFrame,
    CancelFrame,
    ClientFrame,
    MessageFrame,
    SeenFrame,
)
from daemon.log import get_logger
from daemon.web.chat_history import recent_turns
from daemon.web.live import PageStream

log = get_logger("web.chat")

# A message typed into the page is at most this long (the socket's frame limit is larger).
MAX_MESSAGE_CHARS = 100_000


class WebChatClient:
    """A chat page's stream, shaped as the gateway's client (`id`, `uid`, `closed`, `send`)."""

    def __init__(self, page: PageStream, *, session_id: str, uid: int | None = None) -> None:
        self.id = "w-" + uuid.uuid4().hex[:10]
        self.uid = os.geteuid() if uid is None else uid
        self.session_id = session_id
        self.page = page
        # Frames that answer a POST's own frame id (accepted, error), kept for that POST.
        self._expected: dict[str, dict[str, Any] | None] = {}

    @property
    def closed(self) -> bool:
        return self.page.closed

    def send(self, frame: dict[str, Any]) -> bool:
        """Hand a frame to the page; never blocks (a page that cannot keep up is dropped)."""
        frame_id = frame.get("id")
        if isinstance(frame_id, str) and frame_id in self._expected:
            self._expected[frame_id] = frame
        return self.page.send("chat", frame)

    async def ask(self, gateway: Any, frame: ClientFrame, frame_id: str) -> dict[str, Any] | None:
        """Hand `frame` to the gateway as this client; return the frame answering `frame_id`."""
        self._expected[frame_id] = None
        try:
            await gateway.handle_frame(self, frame)
            return self._expected[frame_id]
        finally:
            self._expected.pop(frame_id, None)


class ChatDesk:
    """The chat pages open now, by client id."""

    def __init__(self) -> None:
        self.clients: dict[str, WebChatClient] = {}

    def open(self, page: PageStream, session_id: str) -> WebChatClient:
        client = WebChatClient(page, session_id=session_id)
        self.clients[client.id] = client
        return client

    def close(self, client: WebChatClient) -> None:
        self.clients.pop(client.id, None)

    def of(self, request: Request, client_id: Any) -> WebChatClient | None:
        client = self.clients.get(client_id) if isinstance(client_id, str) else None
        session = request.scope.get("reverie.session")
        if client is None or client.closed or session is None or client.session_id != session.id:
            return None
        return client


def _error(status: int, message: str, code: str = "bad_request") -> JSONResponse:
    return JSONResponse({"type": "error", "code": code, "message": message}, status_code=status)


async def _body(request: Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _client(request: Request, data: dict[str, Any]) -> WebChatClient | None:
    desk: ChatDesk = request.app.state.chat
    return desk.of(request, data.get("client"))


GONE = "this page's chat connection is gone; reload the page"


def _answered(reply: dict[str, Any] | None) -> JSONResponse:
    if reply is None:
        return JSONResponse({"type": "ok"})
    if reply.get("type") == "error":
        status = 503 if reply.get("code") in ("storage", "unavailable", "busy") else 409
        return JSONResponse(reply, status_code=status)
    return JSONResponse(reply)


async def send_message(request: Request) -> Response:
    data = await _body(request)
    client = _client(request, data)
    if client is None:
        return _error(409, GONE, "gone")
    text = data.get("text")
    if not isinstance(text, str) or not text.strip():
        return _error(400, "the message is empty")
    if len(text) > MAX_MESSAGE_CHARS:
        return _error(413, f"the message is longer than {MAX_MESSAGE_CHARS:,} characters")
    frame_id = "web-" + uuid.uuid4().hex[:12]
    gateway = request.app.state.services.gateway
    reply = await client.ask(gateway, MessageFrame(text=text, id=frame_id), frame_id)
    if reply is None:
        return _error(500, "the daemon did not acknowledge the message; see its log", "internal")
    return _answered(reply)


async def approve(request: Request) -> Response:
    data = await _body(request)
    client = _client(request, data)
    if client is None:
        return _error(409, GONE, "gone")
    approval_id, decision = data.get("id"), data.get("decision")
    if not isinstance(approval_id, str) or decision not in APPROVAL_ANSWERS:
        return _error(
            400, f"an approval answer needs an id and a decision ({', '.join(APPROVAL_ANSWERS)})"
        )
    gateway = request.app.state.services.gateway
    reply = await client.ask(gateway, ApproveFrame(id=approval_id, decision=decision), approval_id)
    log.info("web approval answered", approval=approval_id, decision=decision, ok=reply is None)
    return _answered(reply)


async def cancel(request: Request) -> Response:
    data = await _body(request)
    client = _client(request, data)
    if client is None:
        return _error(409, GONE, "gone")
    turn_id = data.get("turn_id") if isinstance(data.get("turn_id"), str) else None
    gateway = request.app.state.services.gateway
    await gateway.handle_frame(client, CancelFrame(turn_id=turn_id))
    return JSONResponse({"type": "ok"})


async def seen(request: Request) -> Response:
    data = await _body(request)
    client = _client(request, data)
    if client is None:
        return _error(409, GONE, "gone")
    ids = data.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return _error(400, "seen needs a list of notice ids")
    gateway = request.app.state.services.gateway
    await gateway.handle_frame(client, SeenFrame(ids=tuple(ids)))
    return JSONResponse({"type": "ok"})


async def chat_page(request: Request) -> Response:
    templates = request.app.state.templates
    turns = await recent_turns(request.app.state.services)
    return templates.TemplateResponse(request, "chat.html", {"turns": turns})


ROUTES = [
    Route("/chat", chat_page, methods=["GET"], name="chat"),
    Route("/chat/message", send_message, methods=["POST"]),
    Route("/chat/approve", approve, methods=["POST"]),
    Route("/chat/cancel", cancel, methods=["POST"]),
    Route("/chat/seen", seen, methods=["POST"]),
]
