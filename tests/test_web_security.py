"""The console lets in only the person: token, one-time links, Host check, CSRF, loopback default.

The app runs over the daemon's real services (a real home, the offline model) and is spoken
to over HTTP in-process (`httpx.ASGITransport`); the listener's own checks (what it binds)
are in test_web_server.py.
"""

from __future__ import annotations

import re
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from daemon.clock import FakeClock
from daemon.paths import Home
from daemon.services import Services, open_services
from daemon.settings import ConfigError, WebSettings, load_settings
from daemon.web.app import build_app
from daemon.web.auth import ConsoleAuth, ensure_token, login_link, token_path

pytestmark = pytest.mark.anyio

BASE = "http://127.0.0.1:8765"


@pytest.fixture
async def services(home_dir: Path) -> AsyncIterator[Services]:
    home = Home(home_dir)
    async with open_services(home, load_settings(home.root), FakeClock(), watch_files=False) as s:
        yield s


@pytest.fixture
async def console(services: Services) -> AsyncIterator[tuple[httpx.AsyncClient, ConsoleAuth]]:
    auth = ConsoleAuth.for_home(services.home.root, services.settings.web)
    app = build_app(services, auth)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client, auth


async def _login(client: httpx.AsyncClient, auth: ConsoleAuth) -> str:
    """Log in through a one-time link; return the session's CSRF token."""
    response = await client.get(f"/login?once={login_link(auth.token)}")
    assert response.status_code == 303, response.text
    page = await client.get("/chat", headers={"accept": "text/html"})
    assert page.status_code == 200
    found = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


async def test_no_session_is_sent_to_login_or_refused(console) -> None:
    client, _ = console
    page = await client.get("/chat", headers={"accept": "text/html"})
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=%2Fchat"
    assert (await client.get("/events")).status_code == 401
    assert (await client.post("/chat/message", json={"text": "hi"})).status_code == 401
    login = await client.get("/login")
    assert login.status_code == 200 and 'name="token"' in login.text


async def test_a_wrong_host_is_refused_even_the_login_page(console) -> None:
    client, auth = console
    await _login(client, auth)
    for host in ("evil.example:8765", "127.0.0.1:9999", "localhost.evil.example:8765", ""):
        response = await client.get("/login", headers={"host": host})
        assert response.status_code == 421, host
    # The listen address's own names are answered.
    for host in ("127.0.0.1:8765", "localhost:8765"):
        assert (await client.get("/login", headers={"host": host})).status_code == 200


async def test_a_one_time_link_works_once(console) -> None:
    client, auth = console
    once = login_link(auth.token)
    first = await client.get(f"/login?once={once}&next=/chat")
    assert first.status_code == 303 and first.headers["location"] == "/chat"
    cookie = first.headers["set-cookie"]
    assert f"{auth.cookie}=" in cookie and auth.cookie == "reverie_session_8765"
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    client.cookies.clear()
    again = await client.get(f"/login?once={once}")
    assert again.status_code == 403 and auth.cookie not in again.headers.get("set-cookie", "")
    assert (await client.get("/events")).status_code == 401


async def test_a_link_not_signed_with_the_token_or_expired_is_refused(console) -> None:
    client, auth = console
    forged = login_link("x" * 43)
    assert (await client.get(f"/login?once={forged}")).status_code == 403
    stale = login_link(auth.token, now=0)
    assert (await client.get(f"/login?once={stale}")).status_code == 403
    assert (await client.get("/login?once=not-a-link")).status_code == 403
    assert not auth.sessions


async def test_the_token_pasted_into_the_form_logs_in_a_wrong_one_does_not(console) -> None:
    client, auth = console
    wrong = await client.post("/login", data={"token": "guess", "next": "/chat"})
    assert wrong.status_code == 403 and not auth.sessions
    right = await client.post("/login", data={"token": auth.token, "next": "//evil.example/"})
    assert right.status_code == 303 and right.headers["location"] == "/"
    assert len(auth.sessions) == 1
    # Never sent on to another site, however the address is written.
    for elsewhere in ("https://evil.example/", "/\\evil.example", "/\\/evil.example", "evil"):
        out = await client.post("/login", data={"token": auth.token, "next": elsewhere})
        assert out.headers["location"] == "/", elsewhere


async def test_a_post_without_the_csrf_token_is_refused(console) -> None:
    client, auth = console
    csrf = await _login(client, auth)
    assert (await client.post("/chat/message", json={"text": "hi"})).status_code == 403
    bad = await client.post("/chat/message", json={"text": "hi"}, headers={"x-csrf-token": "no"})
    assert bad.status_code == 403
    # A form carries it as a field; without it the form is refused too.
    assert (await client.post("/logout", data={})).status_code == 403
    # With it, the request reaches its handler (this one names no open chat page).
    ok = await client.post("/chat/message", json={"text": "hi"}, headers={"x-csrf-token": csrf})
    assert ok.status_code == 409 and "reload" in ok.json()["message"]
    out = await client.post("/logout", data={"csrf": csrf})
    assert out.status_code == 303 and not auth.sessions


async def test_a_post_from_another_origin_is_refused(console) -> None:
    client, auth = console
    csrf = await _login(client, auth)
    response = await client.post(
        "/chat/message",
        json={"text": "hi"},
        headers={"x-csrf-token": csrf, "origin": "http://evil.example"},
    )
    assert response.status_code == 403


def test_the_token_file_is_0600_and_kept(tmp_path: Path) -> None:
    token = ensure_token(tmp_path)
    path = token_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 32 and ensure_token(tmp_path) == token
    path.chmod(0o644)
    assert ensure_token(tmp_path) == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_default_listener_is_loopback_and_remote_needs_saying_so(tmp_path: Path) -> None:
    web = WebSettings()
    assert not web.enabled and web.address.loopback and web.address.host == "127.0.0.1"
    (tmp_path / "reverie.toml").write_text('[web]\nlisten = "0.0.0.0:8765"\n')
    with pytest.raises(ConfigError, match="not a loopback address"):
        load_settings(tmp_path)
    (tmp_path / "reverie.toml").write_text('[web]\nlisten = "0.0.0.0:8765"\nallow_remote = true\n')
    assert not load_settings(tmp_path).web.address.loopback
    (tmp_path / "reverie.toml").write_text('[web]\nlisten = "8765"\n')
    with pytest.raises(ConfigError, match="HOST:PORT"):
        load_settings(tmp_path)
    assert WebSettings(listen="/run/reverie/web.sock").address.path == "/run/reverie/web.sock"


async def test_every_response_forbids_framing_and_foreign_scripts(console) -> None:
    client, _ = console
    for response in (
        await client.get("/login"),
        await client.get("/chat"),
        await client.get("/login", headers={"host": "evil.example"}),
    ):
        policy = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"


def test_the_host_names_answered_are_the_listen_address_s_and_those_configured() -> None:
    from daemon.web.auth import allowed_hosts

    assert allowed_hosts(WebSettings()) == {"127.0.0.1:8765", "localhost:8765"}
    assert allowed_hosts(WebSettings(listen="[::1]:9000")) == {"[::1]:9000", "localhost:9000"}
    proxied = WebSettings(listen="/run/reverie/web.sock", hosts=["Reverie.Example"])
    assert allowed_hosts(proxied) == {"localhost", "reverie.example"}
