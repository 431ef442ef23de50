"""The heartbeat's quiet line through the real daemon: pushed to an open chat when the heartbeat
wrote an entry, never when nothing changed, never kept for a later chat; and how `reverie chat`
shows it."""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.cli.chat import Notes
from daemon.paths import Home
from tests.harness import REPO, Client, DaemonProcess, daemon_env, wait_until


class Recording(Client):
    """A raw client that keeps every frame it reads, whatever helper read it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.frames: list[dict[str, Any]] = []

    def recv(self) -> dict[str, Any]:
        frame = super().recv()
        self.frames.append(frame)
        return frame

    def quiet(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("type") == "notice" and f.get("quiet")]


@pytest.fixture
def daemon(tmp_path: Path):
    d = DaemonProcess(home=tmp_path / "home", env=daemon_env())
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.wait(10)


def _heartbeat_entries(home: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((home / "journal").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in out if e["trigger"] == "heartbeat"]


def test_a_heartbeat_that_wrote_pushes_one_quiet_line_and_an_idle_one_none(
    daemon: DaemonProcess,
) -> None:
    home = daemon.home
    home.mkdir(parents=True)
    (home / "reverie.toml").write_text("[journal]\nheartbeat_minutes = 0.02\n")  # every 1.2 s
    daemon.start()
    with Recording(daemon.socket_path) as c:
        c.hello()
        _, frames = c.chat("Remember that the kiln Bartholomew-9 is glazed in cobalt blue.")
        assert frames[-1]["type"] == "done"
        c.recv_until(lambda f: f.get("quiet") and "Bartholomew-9" in f.get("text", ""))
        line = c.quiet()[-1]
        assert line["type"] == "notice" and line["kind"] == "heartbeat"
        assert line["text"].startswith("journal: wrote an entry — ")
        assert "\n" not in line["text"] and line["ts"]
        # An older client answers `seen` for every notice it printed: accepted, nothing kept.
        c.send({"type": "seen", "ids": [line["id"]]})
        assert c.command("ping")["type"] == "result"
        assert not [f for f in c.frames if f.get("type") == "error"]

        # Idle: the heartbeats go on, check, write nothing and push nothing.
        wait_until(
            lambda: "nothing new" in (c.command("status")["data"]["last_heartbeat_result"] or ""),
            20,
            "an idle heartbeat",
        )
        pushed, written = len(c.quiet()), len(_heartbeat_entries(home))
        runs = c.command("status")["data"]["jobs"]["heartbeat"]["runs"]
        time.sleep(4.0)
        assert c.command("status")["data"]["jobs"]["heartbeat"]["runs"] >= runs + 2
        assert len(_heartbeat_entries(home)) == written
        assert len(c.quiet()) == pushed
        # One line for each heartbeat that wrote (one trunk session: one entry a tick).
        assert pushed == written >= 1

        # Never kept: a chat opened now is not sent what was said in passing.
        with Recording(daemon.socket_path) as later:
            later.hello()
            assert later.command("ping")["type"] == "result"
            assert not [f for f in later.frames if f.get("type") == "notice"]
    assert daemon.stop() == 0
    # Not a notice to deliver: the outbox never held it.
    with sqlite3.connect(Home(home).db_file) as db:
        kept = "SELECT COUNT(*) FROM notices WHERE kind = 'heartbeat' OR text LIKE '%journal:%'"
        assert db.execute(kept).fetchone() == (0,)


def test_reverie_chat_shows_a_quiet_line_dim_on_one_line() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    frame = {
        "type": "notice",
        "id": "q-1",
        "kind": "heartbeat",
        "text": "journal: wrote an entry — Glazed\nthe bowls.",
        "ts": "2026-03-02T09:20:00+00:00",
        "quiet": True,
    }
    shown = Notes(Tty()).describe(frame) or ""
    assert shown.startswith("\x1b[2mheartbeat · ") and shown.endswith("\x1b[0m")
    assert "journal: wrote an entry — Glazed the bowls." in shown and "\n" not in shown
    loud = Notes(Tty()).describe({**frame, "quiet": None}) or ""
    assert "\n" in loud  # an ordinary notice: its heading, then its text


@pytest.mark.skipif(sys.platform != "linux", reason="pty + SO_PEERCRED are Linux here")
def test_the_interactive_client_shows_the_heartbeats_line_dim(daemon: DaemonProcess) -> None:
    import pty

    from tests.test_chat_interactive import _read_until

    home = daemon.home
    home.mkdir(parents=True)
    (home / "reverie.toml").write_text("[journal]\nheartbeat_minutes = 0.02\n")
    daemon.start()
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(REPO)
        os.execve(
            sys.executable,
            [sys.executable, "-m", "daemon.cli", "chat", "--home", str(home)],
            daemon.env,
        )
    seen = bytearray()
    try:
        at = _read_until(fd, b"> ", 20, seen)
        os.write(fd, b"The kiln Bartholomew-9 is glazed in cobalt blue.\r")
        at = _read_until(fd, b"\x1b[2mheartbeat \xc2\xb7 ", 30, seen, at)
        at = _read_until(fd, b"journal: wrote an entry \xe2\x80\x94 ", 5, seen, at)
        line = bytes(seen[at:]).split(b"\x1b[0m", 1)[0]
        assert b"Bartholomew-9" in line and b"\n" not in line
    finally:
        os.write(fd, b"\x04")  # Ctrl-D leaves; a client that does not is stopped
        deadline = time.monotonic() + 10
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.1)
        os.close(fd)
