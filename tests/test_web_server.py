"""The console as the daemon serves it: its listener, `reverie web`, start-up failures, shutdown.

Real daemon subprocesses (tests/harness.py) with `[web] enabled`, spoken to over real HTTP.
"""

from __future__ import annotations

import json
import re
import socket
import stat
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import Client, DaemonProcess, daemon_env, run_cli
from tests.web_harness import Console, free_port, start_console


def _status(console: DaemonProcess) -> dict:
    with Client(console.socket_path) as c:
        c.hello()
        return c.command("status")["data"]


def test_reverie_web_prints_a_link_that_logs_in_once_and_a_page_gone_is_let_go(
    tmp_path: Path,
) -> None:
    console = start_console(tmp_path)
    try:
        link = console.login_link()
        assert link.startswith(f"{console.base_url}/login?once=")
        with httpx.Client(timeout=10) as http:
            assert http.get(f"{console.base_url}/chat").status_code == 401
            first = http.get(link)
            assert first.status_code == 303
            assert http.get(f"{console.base_url}/chat").status_code == 200
        with httpx.Client(timeout=10) as other:
            again = other.get(link)
            assert again.status_code == 403 and "used already" in again.text
        token = console.home / "web.token"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        web = _status(console.daemon)["web"]
        assert web["state"] == "listening" and web["url"] == f"{console.base_url}/"
        # The token is never written to the log.
        assert token.read_text().strip() not in console.daemon.logs()
        _a_page_that_goes_away_is_let_go_at_once(console)
        # --open hands the link to the system's browser ($BROWSER here: echo prints it again).
        opened = run_cli(
            "web",
            "--open",
            "--home",
            str(console.home),
            env={**console.daemon.env, "BROWSER": "echo"},
        )
        assert opened.returncode == 0, opened.stderr
        links = [w for w in opened.stdout.split() if "/login?once=" in w]
        assert len(links) == 2 and links[0] == links[1], opened.stdout
    finally:
        console.daemon.stop()


def _a_page_that_goes_away_is_let_go_at_once(console: Console) -> None:
    with httpx.Client(timeout=10) as http:
        http.get(console.signed_link())
        with http.stream("GET", f"{console.base_url}/events?chat=1") as events:
            lines = events.iter_lines()
            assert next(lines).startswith("retry:")
            assert next(lines) == "" and next(lines) == "event: hello"
            client_id = json.loads(next(lines).removeprefix("data: "))["client"]
            assert _status(console.daemon)["web"]["pages_open"] == 1
            # Another session cannot speak through this page's chat client.
            with httpx.Client(timeout=10) as other:
                other.get(console.signed_link())
                page = other.get(f"{console.base_url}/chat").text
                csrf = re.search(r'name="csrf-token" content="([^"]+)"', page)
                assert csrf is not None
                refused = other.post(
                    f"{console.base_url}/chat/message",
                    json={"client": client_id, "text": "not yours"},
                    headers={"x-csrf-token": csrf.group(1)},
                )
                assert refused.status_code == 409
    # Gone without a keep-alive having to find out: its chat client leaves the gateway.
    deadline = time.monotonic() + 2
    while _status(console.daemon)["web"]["pages_open"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _status(console.daemon)["web"]["pages_open"] == 0


def test_reverie_web_says_when_the_daemon_or_the_console_is_not_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    off = run_cli("web", "--home", str(home))
    assert off.returncode != 0 and "[web]" in off.stderr and "enabled = true" in off.stderr
    (home / "reverie.toml").write_text(
        f'[web]\nenabled = true\nlisten = "127.0.0.1:{free_port()}"\n'
    )
    down = run_cli("web", "--home", str(home))
    assert down.returncode != 0 and "daemon is not running" in down.stderr, down.stderr
    assert len(down.stderr.strip().splitlines()) == 1


def test_a_port_already_taken_is_a_log_line_and_a_status_not_a_dead_daemon(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        home = tmp_path / "home"
        home.mkdir()
        (home / "reverie.toml").write_text(f'[web]\nenabled = true\nlisten = "127.0.0.1:{port}"\n')
        daemon = DaemonProcess(home=home, env=daemon_env()).start()
        try:
            web = _status(daemon)["web"]
            assert web["state"] == "failed" and f"127.0.0.1:{port}" in web["error"], web
            assert "in use" in web["error"]
            assert any(e.get("event") == "web console not started" for e in daemon.log_events())
            # The daemon answers as ever.
            with Client(daemon.socket_path) as c:
                c.hello()
                _, frames = c.chat("hello")
                assert frames[-1]["type"] == "done"
            out = run_cli("web", "--home", str(home))
            assert out.returncode != 0 and "not serving" in out.stderr
            shown = run_cli("status", "--home", str(home))
            assert f"console:      failed · cannot listen on 127.0.0.1:{port}" in shown.stdout
        finally:
            assert daemon.stop() == 0


def test_a_unix_socket_listener_is_0600_and_serves(tmp_path: Path) -> None:
    path = tmp_path / "run" / "web.sock"
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(f'[web]\nenabled = true\nlisten = "{path}"\n')
    daemon = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        transport = httpx.HTTPTransport(uds=str(path))
        with httpx.Client(transport=transport, base_url="http://localhost", timeout=10) as http:
            assert http.get("/login").status_code == 200
            assert http.get("/login", headers={"host": "127.0.0.1:8765"}).status_code == 421
        out = run_cli("web", "--home", str(home))
        assert out.returncode == 0 and str(path) in out.stdout
    finally:
        assert daemon.stop() == 0
    assert not path.exists()


def test_the_console_stops_with_the_daemon_while_a_page_is_open(console_and_stream) -> None:
    console, stream_opened = console_and_stream
    assert stream_opened.wait(10)
    t0 = time.monotonic()
    assert console.daemon.stop() == 0
    assert time.monotonic() - t0 < 8
    assert any(e.get("event") == "web console stopped" for e in console.daemon.log_events())


@pytest.fixture
def console_and_stream(tmp_path: Path):
    console: Console = start_console(tmp_path)
    opened = threading.Event()
    http = httpx.Client(timeout=30)
    http.get(console.login_link())

    def read() -> None:
        try:
            with http.stream("GET", f"{console.base_url}/events") as events:
                for line in events.iter_lines():
                    if line.startswith("event: hello"):
                        opened.set()
        except httpx.HTTPError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield console, opened
    finally:
        console.daemon.stop()
        reader.join(10)
        http.close()
