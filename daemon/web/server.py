"""Serve the console with uvicorn on the daemon's own event loop, in the daemon's task group.

`WebConsole.serve` binds the listener itself (a loopback TCP port, or a Unix socket made
0600), so a port already taken is one clear log line and a `failed` state in `status`, never
uvicorn's exit of the whole process. uvicorn installs no signal handlers (the daemon owns
signals) and does not tick: its main loop waits for the stop, so an idle console wakes the
daemon for nothing. Cancelling `serve` stops it: the open pages' streams end, uvicorn closes
the connections within `STOP_GRACE_S`, then anything still open is cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn
from anyio.abc import TaskStatus

from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.settings import ListenAddress
from daemon.web.auth import ConsoleAuth
from daemon.web.live import LiveFeed

if TYPE_CHECKING:
    from daemon.services import Services

log = get_logger("web.server")

# How long open connections get to finish when the console stops.
STOP_GRACE_S = 3


class ConsoleServerError(ReverieError):
    """The console cannot listen; the message is one line a person can act on."""


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers and without its 10 Hz tick."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stop_requested = asyncio.Event()
        # Set once start-up is over, listening or not (`started` says which).
        self.settled = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.settled.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def main_loop(self) -> None:
        # One tick sets the default headers (no Date header, so they never change).
        await self.on_tick(0)
        await self.stop_requested.wait()


def bind(address: ListenAddress) -> socket.socket:
    """A listening socket for `address`; raise `ConsoleServerError` saying why not."""
    if address.path:
        return _bind_unix(Path(address.path))
    host = "127.0.0.1" if address.host == "localhost" else address.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, address.port), family=family, backlog=128)
    except OSError as exc:
        raise ConsoleServerError(
            f"cannot listen on {address}: {exc.strerror or exc}"
            + (" (another program has that port; set [web] listen)" if exc.errno == 98 else "")
        ) from None


def _bind_unix(path: Path) -> socket.socket:
    from daemon.chat.server import MAX_SOCKET_PATH

    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ConsoleServerError(f"socket path {path} is too long for a Unix socket")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ConsoleServerError(f"cannot prepare {path.parent}: {exc.strerror or exc}") from None
    if info is not None:
        if not stat.S_ISSOCK(info.st_mode):
            raise ConsoleServerError(
                f"{path} exists and is not a socket; move it or set [web] listen"
            )
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink(missing_ok=True)  # stale: nothing answers on it
        else:
            raise ConsoleServerError(f"another program is listening on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Made 0600 before anyone can connect: the person's own uid only.
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConsoleServerError(f"cannot listen on {path}: {exc.strerror or exc}") from None
    return sock


class WebConsole:
    """The console's listener for the running daemon: bound, serving, or why not."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings = services.settings.web
        self.state = "starting"
        self.error: str | None = None
        self.url: str | None = None
        self._server: _QuietServer | None = None
        self._feed: LiveFeed | None = None

    def describe(self) -> dict[str, Any]:
        """What `status` shows: state, address, open pages, requests served."""
        server = self._server
        return {
            "state": self.state,
            "listen": self.settings.listen,
            "url": self.url,
            "error": self.error,
            "pages_open": self._feed.pages if self._feed is not None else 0,
            "requests": server.server_state.total_requests if server is not None else 0,
        }

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled. A console that cannot start logs why and returns (started)."""
        from daemon.web.app import build_app

        address = self.settings.address
        try:
            # The token file may be made (and fsynced) here: off the event loop.
            auth = await anyio.to_thread.run_sync(
                ConsoleAuth.for_home, self.services.home.root, self.settings
            )
            sock = bind(address)
        except (ConsoleServerError, OSError, ValueError) as exc:
            self.state, self.error = "failed", str(exc)
            log.error("web console not started", listen=str(address), error=str(exc))
            task_status.started()
            return
        app = build_app(self.services, auth)
        self._feed = app.state.live
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_config=None,
            access_log=False,
            server_header=False,
            date_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=STOP_GRACE_S,
        )
        server = self._server = _QuietServer(config)
        self.url = "http://localhost/" if address.path else f"http://{address}/"
        done = anyio.Event()
        run_scope = anyio.CancelScope(shield=True)

        async def run() -> None:
            with run_scope:
                try:
                    await server.serve(sockets=[sock])
                except SystemExit:
                    # uvicorn's way to say its start-up failed; the daemon goes on without it.
                    self.state, self.error = "failed", "the console's app failed to start"
                    log.error("web console stopped", error=self.error)
                except Exception as exc:
                    # A console fault is the console's: the daemon goes on without it.
                    self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"
                    log.exception("web console failed")
            server.settled.set()
            done.set()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, name="web-console-uvicorn")
                with anyio.fail_after(10):
                    await server.settled.wait()
                if server.started:
                    self.state = "listening"
                    log.info("web console listening", url=self.url, listen=str(address))
                task_status.started()
                if not server.started:
                    return
                try:
                    await anyio.sleep_forever()
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(server, app, done, run_scope)
        finally:
            sock.close()
            if address.path:
                with contextlib.suppress(OSError):
                    os.unlink(address.path)
            if self.state == "listening":
                self.state = "stopped"

    async def _stop(
        self, server: _QuietServer, app: Any, done: anyio.Event, run_scope: anyio.CancelScope
    ) -> None:
        app.state.live.close_all()  # every page's stream ends, so its response completes
        server.should_exit = True
        server.stop_requested.set()
        with anyio.move_on_after(STOP_GRACE_S + 1):
            await done.wait()
        if not done.is_set():
            log.warning("web console did not stop in time; its connections are cut")
            server.force_exit = True
            run_scope.cancel()
            with anyio.move_on_after(1):
                await done.wait()
        log.info("web console stopped")
