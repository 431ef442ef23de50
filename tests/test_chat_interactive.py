"""The interactive `reverie chat` in a real pseudo-terminal against the real daemon:
a reply streams, Ctrl-C cancels a slow turn, Ctrl-D leaves, history is kept."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import FAKE_API_CONFIG, REPO, DaemonProcess, daemon_env


def _read_until(fd: int, needle: bytes, timeout: float, seen: bytearray, start: int = 0) -> int:
    """Read until `needle` appears after offset `start`; return the offset just past it."""
    deadline = time.monotonic() + timeout
    while needle not in seen[start:]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} not seen in {bytes(seen[-600:])!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen.extend(chunk)
    assert needle in seen[start:], bytes(seen[-600:])
    return seen.index(needle, start) + len(needle)


@pytest.mark.skipif(sys.platform != "linux", reason="pty + SO_PEERCRED are Linux here")
def test_interactive_chat_streams_cancels_and_keeps_history(tmp_path: Path) -> None:
    with FakeAnthropic() as fake:
        home = tmp_path / "home"
        env = daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        d = DaemonProcess(home=home, env=env).start()
        try:
            fake.enqueue(
                Planned.reply("Hello from the fake model."), Planned.delayed(30, text="too late")
            )
            pid, fd = pty.fork()
            if pid == 0:  # the client, with the pty as its controlling terminal
                os.chdir(REPO)
                os.execve(
                    sys.executable,
                    [sys.executable, "-m", "daemon.cli", "chat", "--home", str(home)],
                    env,
                )
            seen = bytearray()
            try:
                at = _read_until(fd, b"> ", 20, seen)
                os.write(fd, b"hello there\r")
                at = _read_until(fd, b"Hello from the fake model.", 20, seen, at)
                at = _read_until(fd, b"> ", 20, seen, at)
                os.write(fd, b"/status\r")  # the same view as `reverie status`, not raw JSON
                at = _read_until(fd, b"state:        awake", 20, seen, at)
                assert b'"state"' not in seen[at - 200 :]
                at = _read_until(fd, b"> ", 20, seen, at)
                os.write(fd, b"a slow question\r")
                deadline = time.monotonic() + 20
                while not any(
                    "a slow question" in str(r.body.get("messages")) for r in fake.message_requests
                ):
                    assert time.monotonic() < deadline, "the slow turn never reached the model"
                    time.sleep(0.05)
                os.write(fd, b"\x03")  # Ctrl-C during the reply: cancel the turn
                at = _read_until(fd, b"cancel", 20, seen, at)
                _read_until(fd, b"> ", 20, seen, at)
                os.write(fd, b"\x04")  # Ctrl-D at an empty prompt: leave
                _, status = os.waitpid(pid, 0)
                assert os.waitstatus_to_exitcode(status) == 0, bytes(seen[-600:])
            finally:
                try:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
                os.close(fd)
            history = (home / ".chat_history").read_text()
            assert "hello there" in history and "a slow question" in history
        finally:
            assert d.stop() == 0


@pytest.mark.skipif(sys.platform != "linux", reason="pty + SO_PEERCRED are Linux here")
def test_the_interactive_chat_outlives_a_daemon_restart(tmp_path: Path) -> None:
    """The daemon stops under an open chat: one line says so, the prompt stays (a message typed
    meanwhile is refused in one line, the chat goes on), and once the daemon is back the chat
    says so and a message is answered."""
    with FakeAnthropic() as fake:
        home = tmp_path / "home"
        home.mkdir()
        (home / "reverie.toml").write_text(FAKE_API_CONFIG)  # only the trunk asks the fake
        env = daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        d = DaemonProcess(home=home, env=env).start()
        fake.enqueue(Planned.reply("First answer."), Planned.reply("Answered after the restart."))
        pid, fd = pty.fork()
        if pid == 0:  # the client, with the pty as its controlling terminal
            os.chdir(REPO)
            os.execve(
                sys.executable,
                [sys.executable, "-m", "daemon.cli", "chat", "--home", str(home)],
                env,
            )
        seen = bytearray()
        try:
            at = _read_until(fd, b"> ", 20, seen)
            os.write(fd, b"hello\r")
            at = _read_until(fd, b"First answer.", 20, seen, at)
            at = _read_until(fd, b"> ", 20, seen, at)
            assert d.stop() == 0
            at = _read_until(fd, b"reconnecting when it is back (Ctrl-D leaves)", 20, seen, at)
            down = bytes(seen[at - 200 : at])
            assert b"the daemon stopped; reconnecting" in down, down
            # Typing at the prompt while the daemon is away: one clear line, no exit.
            os.write(fd, b"anyone there?\r")
            at = _read_until(fd, b"not sent: the daemon is not back yet", 20, seen, at)
            at = _read_until(fd, b"> ", 20, seen, at)
            assert os.waitpid(pid, os.WNOHANG) == (0, 0), bytes(seen[-600:])
            d.start()
            at = _read_until(fd, b"reconnected: the daemon is back (awake", 20, seen, at)
            os.write(fd, b"and now?\r")
            at = _read_until(fd, b"Answered after the restart.", 20, seen, at)
            _read_until(fd, b"> ", 20, seen, at)
            os.write(fd, b"\x04")  # Ctrl-D at an empty prompt: leave
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, bytes(seen[-600:])
        finally:
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(fd)
            d.stop()
    said = [
        str(r.body.get("messages")) for r in fake.message_requests if "anyone there" in str(r.body)
    ]
    assert said == []  # the message typed while the daemon was away was never sent
    lines = bytes(seen).decode(errors="replace").splitlines()
    assert sum("the daemon stopped" in ln for ln in lines) == 1, lines
