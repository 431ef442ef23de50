"""Who may use the console: the token, one-time login links, sessions, the Host and CSRF checks.

The token lives in `<home>/web.token`, created 0600 on first use: whoever can read it is the
person whose daemon this is (the same trust the Unix socket gives the daemon's own uid). It
is never logged and never sent to a browser. A browser gets in by pasting it into the login
form, or through a one-time link (`reverie web`): `/login?once=ID.EXPIRY.MAC`, signed with the
token by whoever could read it, valid for `ONCE_TTL_S` and accepted once. Either way the
browser gets a session cookie (HttpOnly, SameSite=Strict) and the session a CSRF token that
every state-changing request carries (form field `csrf` or header `X-CSRF-Token`).

`ConsoleGuard` is the ASGI middleware in front of every route: the Host header must name the
console (so a DNS-rebinding page on another name is refused), a request without a session is
sent to the login page (or refused, when it is not a page), and a POST without its session's
CSRF token (or from another origin) is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from daemon.log import get_logger
from daemon.settings import WebSettings

log = get_logger("web.auth")

TOKEN_FILE = "web.token"
COOKIE = "reverie_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
# A one-time login link is good for this long after it was made.
ONCE_TTL_S = 120.0
# A browser session lasts this long without a new login.
SESSION_TTL_S = 7 * 24 * 3600.0
# Paths open without a session: the login page itself and the assets it needs.
PUBLIC_PREFIXES = ("/login", "/static/")
# A form body read for its CSRF field is at most this big (the console has no uploads).
MAX_FORM_BYTES = 1_048_576
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# On every response: scripts and everything else from the console itself only, never framed
# (an Allow button under another site's overlay), no address in a Referer to another site.
SECURITY_HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
        b"form-action 'self'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def token_path(home_root: Path) -> Path:
    return home_root / TOKEN_FILE


def ensure_token(home_root: Path) -> str:
    """The console's token, made (0600, atomically) the first time it is needed.

    A token file others can read is no secret: its mode is put back to 0600 and that logged.
    """
    path = token_path(home_root)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        info = path.stat()
        if stat.S_IMODE(info.st_mode) & 0o077:
            log.warning("web token file was readable by others; made 0600", path=str(path))
            path.chmod(0o600)
        token = path.read_text().strip()
        if len(token) < 32:
            raise ValueError(
                f"{path} holds no usable token (under 32 characters); delete it to make a new one"
            ) from None
        return token
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    log.info("web token created", path=str(path))
    return token


def _mac(token: str, payload: str) -> str:
    return hmac.new(token.encode(), f"login-once:{payload}".encode(), hashlib.sha256).hexdigest()


def login_link(token: str, *, now: float | None = None, ttl_s: float = ONCE_TTL_S) -> str:
    """The query value of a one-time login link (`/login?once=…`), signed with the token."""
    expiry = int((time.time() if now is None else now) + ttl_s)
    payload = f"{secrets.token_urlsafe(12)}.{expiry}"
    return f"{payload}.{_mac(token, payload)}"


def allowed_hosts(settings: WebSettings) -> frozenset[str]:
    """The Host header values the console answers to: its listen address's names, with port."""
    address = settings.address
    names = set(settings.hosts)
    if address.path:
        names.add("localhost")
    else:
        hosts = {address.host}
        if address.host in ("127.0.0.1", "localhost"):
            hosts |= {"127.0.0.1", "localhost"}
        elif address.host == "::1":
            hosts |= {"[::1]", "localhost"}
        for host in hosts:
            shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
            names.add(f"{shown}:{address.port}")
            if address.port == 80:
                names.add(shown)
    return frozenset(name.lower() for name in names)


@dataclass(eq=False)
class Session:
    """A logged-in browser: its cookie value, its CSRF token, and when it stops being valid."""

    id: str
    csrf: str
    expires: float


@dataclass(eq=False)
class ConsoleAuth:
    """The token, the sessions and the one-time links already used, for one running console."""

    token: str
    hosts: frozenset[str]
    # Cookies are per host, not per port: each console's cookie is named after its port, so
    # two homes' consoles on one machine do not log each other out.
    cookie: str = COOKIE
    sessions: dict[str, Session] = field(default_factory=dict)
    # One-time links already exchanged, until they would have expired anyway.
    _used: dict[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.time

    @classmethod
    def for_home(cls, home_root: Path, settings: WebSettings) -> ConsoleAuth:
        port = settings.address.port
        return cls(
            token=ensure_token(home_root),
            hosts=allowed_hosts(settings),
            cookie=f"{COOKIE}_{port}" if port else COOKIE,
        )

    def check_token(self, offered: str) -> bool:
        return hmac.compare_digest(offered.strip().encode(), self.token.encode())

    def redeem(self, once: str) -> str | None:
        """Exchange a one-time link for a new session's id; None (and why, logged) if it is no good."""
        now = self.clock()
        for key, expiry in list(self._used.items()):
            if expiry < now:
                del self._used[key]
        try:
            nonce, expiry_text, mac = once.split(".")
            expiry = float(int(expiry_text))
        except ValueError:
            log.warning("web login link refused", reason="malformed")
            return None
        if not hmac.compare_digest(
            mac.encode(), _mac(self.token, f"{nonce}.{expiry_text}").encode()
        ):
            log.warning("web login link refused", reason="bad signature")
            return None
        if expiry < now or expiry > now + ONCE_TTL_S + 5:
            log.warning("web login link refused", reason="expired")
            return None
        if nonce in self._used:
            log.warning("web login link refused", reason="already used")
            return None
        self._used[nonce] = expiry
        return self.open_session()

    def open_session(self) -> str:
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            expires=self.clock() + SESSION_TTL_S,
        )
        self.sessions[session.id] = session
        log.info("web session opened", sessions=len(self.sessions))
        return session.id

    def close_session(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    def session(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        session = self.sessions.get(cookie)
        if session is None:
            return None
        if session.expires < self.clock():
            del self.sessions[cookie]
            return None
        return session


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _cookie(scope: Scope, name: str) -> str | None:
    raw = _header(scope, b"cookie")
    if not raw:
        return None
    for part in raw.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


async def _plain(
    send: Send, status: int, text: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ConsoleGuard:
    """Host check, login and CSRF in front of the console's every route (pure ASGI)."""

    def __init__(self, app: ASGIApp, *, auth: ConsoleAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self._guard(scope, receive, _hardened(send))

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = (_header(scope, b"host") or "").lower()
        if host not in self.auth.hosts:
            # Another name pointing here (DNS rebinding) gets nothing, not even the login page.
            log.warning("web request refused", reason="host", host=host[:100])
            await _plain(send, 421, f"this console does not answer to the host {host[:100]!r}")
            return
        path: str = scope["path"]
        method: str = scope["method"]
        session = self.auth.session(_cookie(scope, self.auth.cookie))
        scope["reverie.session"] = session
        if method not in SAFE_METHODS and not self._same_origin(scope, host):
            await _plain(send, 403, "refused: the request came from another origin")
            return
        if session is None:
            if path.startswith(PUBLIC_PREFIXES):
                await self.app(scope, receive, send)
                return
            if method == "GET" and "text/html" in (_header(scope, b"accept") or ""):
                target = path + (
                    f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
                )
                location = "/login?next=" + quote(target, safe="")
                await _plain(send, 303, "log in first", ((b"location", location.encode()),))
                return
            await _plain(send, 401, "log in first: reverie web prints a login link")
            return
        if method in SAFE_METHODS or path == "/login":
            await self.app(scope, receive, send)
            return
        offered = _header(scope, CSRF_HEADER.encode())
        replay: list[Message] = []
        if offered is None:
            content_type = _header(scope, b"content-type") or ""
            if content_type.startswith("application/x-www-form-urlencoded"):
                body, replay = await _read_body(receive)
                if body is None:
                    await _plain(send, 413, "request body too large")
                    return
                fields = parse_qs(body.decode("latin-1")).get(CSRF_FIELD)
                offered = fields[0] if fields else None
        if offered is None or not hmac.compare_digest(offered.encode(), session.csrf.encode()):
            log.warning("web request refused", reason="csrf", method=method, path=path)
            await _plain(
                send, 403, "refused: the form's CSRF token is missing or wrong; reload the page"
            )
            return
        await self.app(scope, _replaying(replay, receive) if replay else receive, send)

    @staticmethod
    def _same_origin(scope: Scope, host: str) -> bool:
        origin = _header(scope, b"origin")
        if origin is None:
            return True  # not a browser's cross-site request (those carry an Origin)
        return urlsplit(origin).netloc.lower() == host


def _hardened(send: Send) -> Send:
    async def hardened(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", ()), *SECURITY_HEADERS]
        await send(message)

    return hardened


async def _read_body(receive: Receive) -> tuple[bytes | None, list[Message]]:
    """Read a request body (bounded) and keep its messages to hand to the app afterwards."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return None, messages
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks), messages


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    queue = list(messages)

    async def replay() -> Message:
        if queue:
            return queue.pop(0)
        return await receive()

    return replay
