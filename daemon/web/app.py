"""The console's ASGI app: its routes, templates, static files and the guard in front of them.

`build_app(services, auth)` is the seam the pages build on: `app.state.services` is the
running daemon's `Services`, `app.state.templates` the Jinja environment over
`daemon/web/templates/` (globals `nav`, `csrf_input()`, `csrf_token()`, `short_time()`;
every page extends `base.html`), and every route of `daemon.web.pages.ROUTES` is served behind the login. Core
routes: `/login`, `/logout`, `/events` (the live stream), `/chat…`, `/static/…`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
from jinja2 import pass_context
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from daemon.log import get_logger
from daemon.web import chat, pages
from daemon.web.auth import CSRF_FIELD, SESSION_TTL_S, ConsoleAuth, ConsoleGuard
from daemon.web.chat import ChatDesk
from daemon.web.live import EventStreamResponse, LiveFeed
from daemon.web.pages.render import counted, short_time

if TYPE_CHECKING:
    from daemon.services import Services

log = get_logger("web.app")

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
# How long a gateway callback may take while a chat page's stream is torn down.
DISCONNECT_TIMEOUT_S = 5.0


def navigation() -> list[tuple[str, str]]:
    """The navigation bar: the pages' entries, with Chat after the first (the Now page)."""
    entries = list(pages.NAV)
    return [*entries[:1], ("/chat", "Chat"), *entries[1:]]


@pass_context
def _csrf_token(context: Any) -> str:
    session = context["request"].scope.get("reverie.session")
    return session.csrf if session is not None else ""


@pass_context
def _csrf_input(context: Any) -> Markup:
    token = _csrf_token(context)
    return Markup(f'<input type="hidden" name="{CSRF_FIELD}" value="{escape(token)}">')


def make_templates(services: Services) -> Jinja2Templates:
    def daemon_state(_request: Request) -> dict[str, Any]:
        lifecycle = services.lifecycle
        return {"daemon_state": lifecycle.state.value, "daemon_phase": lifecycle.phase}

    templates = Jinja2Templates(directory=str(TEMPLATES), context_processors=[daemon_state])
    templates.env.globals.update(
        nav=navigation(),
        csrf_token=_csrf_token,
        csrf_input=_csrf_input,
        agent_name=services.settings.agent.name,
        short_time=short_time,
        counted=counted,
    )
    return templates


def _next_path(raw: str | None) -> str:
    """Where to go after logging in: a path on this console only (never another site)."""
    if not raw:
        return "/"
    parts = urlsplit(raw)
    # A browser reads a backslash as "/": "/\evil.example" would leave the console too.
    if (
        parts.scheme
        or parts.netloc
        or not raw.startswith("/")
        or raw.startswith("//")
        or "\\" in raw
        or not raw.isprintable()
    ):
        return "/"
    return raw


def _logged_in(auth: ConsoleAuth, session_id: str, target: str) -> Response:
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        auth.cookie,
        session_id,
        max_age=int(SESSION_TTL_S),
        httponly=True,
        samesite="strict",
        path="/",
    )
    return response


async def login(request: Request) -> Response:
    auth: ConsoleAuth = request.app.state.auth
    templates: Jinja2Templates = request.app.state.templates
    target = _next_path(request.query_params.get("next"))
    if request.method == "POST":
        form = await request.form()
        token = form.get("token")
        target = _next_path(str(form.get("next") or "") or None)
        if isinstance(token, str) and token.strip() and auth.check_token(token):
            log.info("web login", by="token")
            return _logged_in(auth, auth.open_session(), target)
        log.warning("web login refused", by="token")
        return templates.TemplateResponse(
            request,
            "login.html",
            {"error": "That is not this console's token.", "next": target},
            status_code=403,
        )
    once = request.query_params.get("once")
    if once:
        session_id = auth.redeem(once)
        if session_id is not None:
            log.info("web login", by="link")
            return _logged_in(auth, session_id, target)
        return templates.TemplateResponse(
            request,
            "login.html",
            {
                "error": "This login link was used already or has expired: "
                "run reverie web for a new one, or paste the token.",
                "next": target,
            },
            status_code=403,
        )
    return templates.TemplateResponse(request, "login.html", {"error": None, "next": target})


async def logout(request: Request) -> Response:
    session = request.scope.get("reverie.session")
    if session is not None:
        request.app.state.auth.close_session(session.id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(request.app.state.auth.cookie, path="/")
    return response


async def events(request: Request) -> Response:
    """One page's live stream; with `?chat=1` the page is also a client of the chat gateway."""
    feed: LiveFeed = request.app.state.live
    desk: ChatDesk = request.app.state.chat
    services = request.app.state.services
    session = request.scope["reverie.session"]
    wants_chat = request.query_params.get("chat") == "1"

    async def stream() -> AsyncIterator[str]:
        # Opened here, not before: only a stream that runs is sure to be released.
        page = feed.open()
        client = desk.open(page, session.id) if wants_chat else None
        try:
            page.send("hello", {"client": client.id if client else None, "state": services.state})
            if client is not None:
                await services.gateway.client_connected(client)
            async for line in page.lines():
                yield line
        finally:
            feed.release(page)
            if client is not None:
                desk.close(client)
                with anyio.CancelScope(shield=True), anyio.move_on_after(DISCONNECT_TIMEOUT_S):
                    await services.gateway.client_disconnected(client)

    return EventStreamResponse(
        stream(), headers={"cache-control": "no-store", "x-accel-buffering": "no"}
    )


def build_app(services: Services, auth: ConsoleAuth) -> Starlette:
    """The console for the running daemon's `services`, every route behind `auth`."""
    feed = LiveFeed(services.bus)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        off = feed.register()
        try:
            yield
        finally:
            off()
            feed.close_all()

    routes: list[BaseRoute] = [
        Route("/login", login, methods=["GET", "POST"], name="login"),
        Route("/logout", logout, methods=["POST"], name="logout"),
        Route("/events", events, methods=["GET"], name="events"),
        *chat.ROUTES,
        Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
        *pages.ROUTES,
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(ConsoleGuard, auth=auth)],
        lifespan=lifespan,
    )
    app.state.services = services
    app.state.auth = auth
    app.state.live = feed
    app.state.chat = ChatDesk()
    app.state.templates = make_templates(services)
    return app
