"""sd_notify against real datagram sockets; watchdog timing; the shipped units verify."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from daemon.systemd import Notifier, unit_socket_paths, watchdog_loop

UNITS = Path(__file__).resolve().parent.parent / "systemd"


@pytest.fixture
def path_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    with sock:
        yield str(path), sock


@pytest.fixture
def abstract_socket() -> Iterator[tuple[str, socket.socket]]:
    name = f"reverie-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    with sock:
        yield "@" + name, sock


def _messages(sock: socket.socket, n: int) -> list[str]:
    return [sock.recv(4096).decode() for _ in range(n)]


def test_notifications_reach_a_path_socket(path_socket: tuple[str, socket.socket]) -> None:
    address, sock = path_socket
    notifier = Notifier({"NOTIFY_SOCKET": address})
    assert notifier.enabled
    assert notifier.ready(status="listening on /run/reverie/reverie.sock")
    assert notifier.status("awake\nsession s-1")
    assert notifier.watchdog()
    assert notifier.stopping()
    assert notifier.extend_timeout(2.5)
    assert _messages(sock, 5) == [
        "READY=1\nSTATUS=listening on /run/reverie/reverie.sock",
        "STATUS=awake session s-1",  # a status is one line
        "WATCHDOG=1",
        "STOPPING=1",
        "EXTEND_TIMEOUT_USEC=2500000",
    ]


def test_notifications_reach_an_abstract_socket(abstract_socket: tuple[str, socket.socket]) -> None:
    address, sock = abstract_socket
    notifier = Notifier({"NOTIFY_SOCKET": address})
    assert notifier.ready()
    assert notifier.reloading()
    assert _messages(sock, 2) == ["READY=1", "RELOADING=1"]


def test_outside_systemd_everything_is_a_quiet_no_op() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.ready() is False
    assert notifier.watchdog() is False
    assert notifier.watchdog_interval() is None


@pytest.mark.parametrize("address", ["vsock:2:1234", "relative/path"])
def test_unsupported_addresses_disable_notification(address: str) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": address})
    assert not notifier.enabled
    assert notifier.ready() is False


def test_a_vanished_socket_never_raises(tmp_path: Path) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert notifier.enabled
    assert notifier.ready() is False
    assert notifier.watchdog() is False  # logged once, still no exception


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "1000"}, 0.0005),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "nope"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({"WATCHDOG_USEC": "30s"}, None),
        ({"WATCHDOG_USEC": ""}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_is_half_the_period(env: dict[str, str], expected: float | None) -> None:
    assert Notifier(env).watchdog_interval() == expected


@pytest.mark.anyio
async def test_watchdog_loop_pings_at_the_interval(path_socket: tuple[str, socket.socket]) -> None:
    address, sock = path_socket
    notifier = Notifier({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "20000000"})
    slept: list[float] = []
    three = anyio.Event()

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            three.set()
        await anyio.lowlevel.checkpoint()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            interval = await tg.start(watchdog_loop, notifier, fake_sleep)
            await three.wait()
            tg.cancel_scope.cancel()
    assert interval == 10.0
    assert slept[:3] == [10.0, 10.0, 10.0]
    assert _messages(sock, 3) == ["WATCHDOG=1"] * 3


@pytest.mark.anyio
async def test_watchdog_loop_returns_at_once_without_a_watchdog() -> None:
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            assert await tg.start(watchdog_loop, Notifier({})) is None


def test_unit_socket_paths_follow_the_units() -> None:
    assert unit_socket_paths({"XDG_RUNTIME_DIR": "/run/user/1000"}) == [
        Path("/run/user/1000/reverie/reverie.sock"),
        Path("/run/reverie/reverie.sock"),
    ]
    assert unit_socket_paths({}) == [Path("/run/reverie/reverie.sock")]


def _directives(unit: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_the_system_unit_says_what_the_daemon_expects() -> None:
    d = _directives(UNITS / "reverie.service")
    for key, value in {
        "Type": "notify",
        "NotifyAccess": "main",
        "ExecStart": "/opt/reverie/bin/reverie run",
        "LoadCredential": "ANTHROPIC_API_KEY:/etc/reverie/credentials/anthropic_api_key",
        "WatchdogSec": "30",
        "Restart": "on-failure",
        "TimeoutStopSec": "20",
        "StateDirectory": "reverie",
        "StateDirectoryMode": "0700",
        "RuntimeDirectory": "reverie",
        "RuntimeDirectoryMode": "0700",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "NoNewPrivileges": "yes",
        "UMask": "0077",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    }.items():
        assert d.get(key) == [value], key
    assert "MemoryDenyWriteExecute" not in d
    assert "User" in d or d.get("DynamicUser") == ["yes"]


def test_the_user_unit_has_no_user_and_lives_in_the_home() -> None:
    d = _directives(UNITS / "reverie-user.service")
    assert "User" not in d and "DynamicUser" not in d
    assert d["Type"] == ["notify"]
    assert d["ExecStart"][0].startswith("%h/")
    assert d["StateDirectory"] == ["reverie"] and d["RuntimeDirectory"] == ["reverie"]
    assert "MemoryDenyWriteExecute" not in d


def _reverie_script() -> str:
    script = Path(sys.executable).with_name("reverie")
    return str(script) if script.exists() else sys.executable


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (apt-get install systemd)",
)
@pytest.mark.parametrize(
    ("unit", "user"), [("reverie.service", False), ("reverie-user.service", True)]
)
def test_units_pass_systemd_analyze_verify(unit: str, user: bool, tmp_path: Path) -> None:
    # `verify` checks that ExecStart exists: point a copy at this checkout's script.
    text = (UNITS / unit).read_text()
    lines = [
        f"ExecStart={_reverie_script()} run" if line.startswith("ExecStart=") else line
        for line in text.splitlines()
    ]
    copy = tmp_path / unit
    copy.write_text("\n".join(lines) + "\n")
    env = dict(os.environ)
    cmd = ["systemd-analyze", "verify", str(copy)]
    if user:
        # A user manager needs a runtime directory even for an offline check.
        runtime = tmp_path / "xdg-runtime"
        runtime.mkdir(mode=0o700)
        env["XDG_RUNTIME_DIR"] = str(runtime)
        cmd.insert(1, "--user")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    # Unknown keys and bad values are only warnings (exit 0): treat any line about our
    # unit as a failure.
    complaints = [line for line in done.stderr.splitlines() if unit in line]
    assert done.returncode == 0, done.stderr
    assert complaints == [], "\n".join(complaints)
