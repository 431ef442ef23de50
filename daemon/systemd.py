"""Tell systemd how the daemon is doing: the sd_notify protocol, spoken directly.

Under `Type=notify` systemd passes `NOTIFY_SOCKET` (a filesystem path or an abstract
`@name`); each notification is one datagram of `KEY=value` lines. With `WatchdogSec=` it
also passes `WATCHDOG_USEC` (and `WATCHDOG_PID`), and kills the service if `WATCHDOG=1`
stops arriving — so the ping comes from the event loop itself, proving it still turns.
Outside systemd every call is a no-op, and a failure to notify is logged once and never
raised: the daemon must not die because its supervisor went away.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from daemon.log import get_logger

log = get_logger("reverie.systemd")


class Notifier:
    """Send sd_notify messages to the socket named by `NOTIFY_SOCKET`, if any."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._env = dict(env)
        self._address = _parse_address(env.get("NOTIFY_SOCKET", ""))
        self._warned = False
        if env.get("NOTIFY_SOCKET") and self._address is None:
            self._warn_once("unsupported NOTIFY_SOCKET address", address=env["NOTIFY_SOCKET"])

    @property
    def enabled(self) -> bool:
        """True when running under a supervisor that listens for notifications."""
        return self._address is not None

    def ready(self, status: str | None = None) -> bool:
        """Report start-up finished (the socket listens); optionally set a status line."""
        lines = ["READY=1"]
        if status:
            lines.append(f"STATUS={_one_line(status)}")
        return self.notify(*lines)

    def stopping(self, status: str | None = None) -> bool:
        """Report that shutdown has begun."""
        lines = ["STOPPING=1"]
        if status:
            lines.append(f"STATUS={_one_line(status)}")
        return self.notify(*lines)

    def reloading(self) -> bool:
        """Report a configuration reload in progress (send `ready()` when done)."""
        return self.notify("RELOADING=1")

    def status(self, text: str) -> bool:
        """Set the free-form status shown by `systemctl status`."""
        return self.notify(f"STATUS={_one_line(text)}")

    def watchdog(self) -> bool:
        """Ping the watchdog: the daemon is alive and its event loop turns."""
        return self.notify("WATCHDOG=1")

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for more time to start or stop (e.g. a long shutdown flush)."""
        return self.notify(f"EXTEND_TIMEOUT_USEC={max(1, int(seconds * 1_000_000))}")

    def watchdog_interval(self) -> float | None:
        """Return how often to ping (half the watchdog period, in seconds), or None.

        None when no watchdog is configured, the value is malformed, or `WATCHDOG_PID`
        names another process (the watchdog is not meant for us).
        """
        raw = self._env.get("WATCHDOG_USEC", "").strip()
        if not raw:
            return None
        pid = self._env.get("WATCHDOG_PID", "").strip()
        if pid:
            if not pid.isdigit() or int(pid) != os.getpid():
                return None
        if not raw.isdigit() or int(raw) == 0:
            self._warn_once("ignoring malformed WATCHDOG_USEC", value=raw)
            return None
        return int(raw) / 1_000_000 / 2

    def notify(self, *lines: str) -> bool:
        """Send one datagram of `KEY=value` lines; return True when it was delivered.

        Never raises and never blocks: a full or vanished socket is logged once.
        """
        if self._address is None:
            return False
        payload = "\n".join(lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)
                sock.sendto(payload, self._address)
        except OSError as exc:
            self._warn_once("cannot notify systemd", error=str(exc), message=lines[0])
            return False
        return True

    def _warn_once(self, event: str, **fields: str) -> None:
        if self._warned:
            log.debug(event, **fields)
            return
        self._warned = True
        log.warning(event, **fields)


def _parse_address(value: str) -> str | bytes | None:
    if not value:
        return None
    if value.startswith("@"):
        # Abstract namespace: a leading NUL instead of '@', not a file.
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None  # e.g. vsock: addresses, which a local daemon does not need


def _one_line(text: str) -> str:
    return " ".join(text.split())


async def watchdog_loop(
    notifier: Notifier,
    clock_sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    *,
    task_status: TaskStatus[float | None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Ping the watchdog every `watchdog_interval()` seconds until cancelled.

    Reports the interval through `task_status.started()` (None: no watchdog, and the
    task returns at once). The first ping goes out immediately. Cancellation ends it.
    """
    interval = notifier.watchdog_interval()
    task_status.started(interval)
    if interval is None:
        return
    log.info("systemd watchdog enabled", interval_s=interval)
    while True:
        notifier.watchdog()
        await clock_sleep(interval)


def unit_socket_paths(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Return where the shipped units put the chat socket, user unit first.

    A client started from a shell does not see the service's `$RUNTIME_DIRECTORY`; these
    are the paths it resolves to for `systemd/reverie-user.service` and
    `systemd/reverie.service`.
    """
    env = os.environ if environ is None else environ
    paths = []
    if env.get("XDG_RUNTIME_DIR"):
        paths.append(Path(env["XDG_RUNTIME_DIR"]) / "reverie" / "reverie.sock")
    paths.append(Path("/run/reverie/reverie.sock"))
    return paths
