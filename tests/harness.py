"""Run the real daemon as a subprocess and talk to it over its real Unix socket."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_python(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """This interpreter as a subprocess in the repository (the daemon's test environment)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env or daemon_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`reverie ARGS` as a subprocess."""
    return run_python("-m", "daemon.cli", *args, env=env, timeout=timeout)


def wait_until(pred: Any, timeout: float, what: str) -> None:
    """Poll `pred` every 50 ms until it is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def unavailable(reason: str) -> None:
    """Skip a test whose real component (a PostgreSQL server, Chromium) cannot run here — or,
    where `REVERIE_TESTS_REQUIRE_ALL` is set (CI sets it), fail it: there a skip would let the
    test pass without ever running."""
    if os.environ.get("REVERIE_TESTS_REQUIRE_ALL"):
        pytest.fail(f"required by REVERIE_TESTS_REQUIRE_ALL: {reason}", pytrace=False)
    pytest.skip(reason)


# Every model role but the trunk's (and its forks') answered offline, so a fake Messages API's
# script is the trunk's alone.
OFFLINE_ROLES = """
[models.summariser]
provider = "offline"
[models.recall_planner]
provider = "offline"
[models.recall_synthesis]
provider = "offline"
[models.heartbeat]
provider = "offline"
[models.dreams]
provider = "offline"
"""

# A daemon home talking to the fake Messages API: the SDK gives up fast, and only the trunk and
# its forks talk to the fake.
FAKE_API_CONFIG = (
    """
[providers.anthropic]
max_retries = 1
backoff_base_s = 0.05
backoff_max_s = 0.1
timeout_s = 90
"""
    + OFFLINE_ROLES
)


def daemon_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "REVERIE_", "NOTIFY_", "WATCHDOG_"))
    }
    env["PYTHONUNBUFFERED"] = "1"
    env["REVERIE_LOG_FORMAT"] = "json"
    env["HF_HUB_OFFLINE"] = "1"
    env.setdefault("REVERIE_EMBEDDER", "none")
    env.update(extra or {})
    return env


@dataclass
class DaemonProcess:
    home: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _log: Any = None
    started: list[float] = field(default_factory=list)

    @property
    def socket_path(self) -> Path:
        return self.home / "run" / "reverie.sock"

    def start(self, timeout: float = 20.0) -> DaemonProcess:
        self.log_path = self.home.parent / f"daemon-{len(self.started)}.log"
        self._log = open(self.log_path, "wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "run", "--home", str(self.home)],
            cwd=REPO,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.started.append(t0)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited early ({self.proc.returncode}):\n{self.logs()}"
                )
            if self.socket_path.exists():
                try:
                    with Client(self.socket_path, timeout=2.0) as c:
                        hello = c.recv()
                        if hello.get("type") == "hello":
                            return
                except OSError:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"daemon not ready after {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-8000:]
        return ""

    def log_events(self) -> list[dict[str, Any]]:
        out = []
        if self.log_path and self.log_path.exists():
            for line in self.log_path.read_text(errors="replace").splitlines():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
        return out

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        finally:
            if self._log:
                self._log.close()
                self._log = None

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.signal(signal.SIGTERM)
        try:
            return self.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.wait(5)
            raise

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.wait(10)


class Client:
    """A raw newline-JSON client (blocking, with timeouts) for daemon tests."""

    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buf = b""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, frame: dict[str, Any]) -> None:
        self.send_raw((json.dumps(frame) + "\n").encode())

    def recv(self) -> dict[str, Any]:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def recv_until(self, pred: Any, limit: int = 10_000) -> list[dict[str, Any]]:
        frames = []
        for _ in range(limit):
            f = self.recv()
            frames.append(f)
            if pred(f):
                return frames
        raise AssertionError(f"no matching frame in {frames[-5:]}")

    def hello(self) -> dict[str, Any]:
        return self.recv()

    def chat(self, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Send a message; return (accepted, frames up to and including done/error)."""
        self.send({"type": "message", "text": text})
        accepted = self.recv_until(lambda f: f.get("type") in ("accepted", "error"))[-1]
        assert accepted["type"] == "accepted", accepted
        frames = self.recv_until(
            lambda f: f.get("type") in ("done", "error") and f.get("turn_id") == accepted["turn_id"]
        )
        return accepted, frames

    def command(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        self.send({"type": "command", "name": name, "args": args or {}, "id": f"c-{name}"})
        return self.recv_until(
            lambda f: f.get("type") in ("result", "error") and f.get("id") == f"c-{name}"
        )[-1]
