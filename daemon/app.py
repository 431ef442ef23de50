"""The daemon's lifecycle: the home lock, the services, the socket, signals and the shutdown grace.

The services are built and wired in `daemon.services` (the composition root); this module
runs them. Start-up: home lock → the services, entered in dependency order → the trunk,
the sleep cycle and the scheduler serve (the daemon is awake) → the chat server listens
(READY=1) → file watcher, watchdog. Shutdown (SIGTERM/SIGINT): STOPPING=1, let the running
turn finish within half the grace period, then cancel it; the trunk fires `session_shutdown`
and waits for its handlers, and the bus finishes the observers still in flight, within the
other half; memory waits for its summaries within the budget; the store checkpoints and
closes; exit 0. A second signal exits at once (everything acknowledged is already on disk).
"""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import sys
from pathlib import Path

import anyio

from daemon import status as status_mod
from daemon.agent.gateway import state_frame
from daemon.clock import SystemClock
from daemon.errors import ReverieError
from daemon.events import StateChanged
from daemon.lifecycle import DaemonState
from daemon.log import get_logger
from daemon.paths import Home
from daemon.services import Services, open_services
from daemon.settings import Settings
from daemon.tokens import default_counter

log = get_logger("app")


def settle_heap() -> None:
    """After start-up, when `reverie run` held the collector back (`daemon.cli.home`): freeze
    what start-up built, most of it the daemon's for life (modules, services, settings), so
    full collections never walk it again, and collect from here on. The few hundred cyclic
    objects start-up left behind stay (well under a megabyte, once)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


class HomeLocked(ReverieError):
    pass


class HomeLock:
    """One daemon per home: an exclusive `flock` on `<home>/reverie.lock`, held for life."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> HomeLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            first = os.pread(fd, 32, 0).decode(errors="replace").partition("\n")[0]
            holder = first.strip() or "?"
            os.close(fd)
            raise HomeLocked(
                f"another daemon (pid {holder}) is already running with home {self.path.parent}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def record_socket(self, path: Path) -> None:
        """Write where the chat socket listens under the pid, for clients that cannot see
        `$RUNTIME_DIRECTORY` (`daemon.cli.locate.recorded_socket` reads it)."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n{path}\n".encode(), 0)

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            try:
                # The socket is gone with the daemon: no client should be sent there.
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


class Daemon:
    """Runs the services for one home until asked to stop."""

    def __init__(self, home: Home, settings: Settings) -> None:
        self.home = home
        self.settings = settings
        self._stop = anyio.Event()

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT (or `request_stop`); return the exit code.

        Signals are handled from the first moment to the last: a first one asks for a
        graceful stop (also during start-up), a second exits at once.
        """
        code = 1
        with HomeLock(self.home.lock_file) as lock:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._signals, name="signals")
                try:
                    code = await self._serve(lock)
                finally:
                    outer.cancel_scope.cancel()
        return code

    async def _serve(self, lock: HomeLock | None = None) -> int:
        from daemon.chat.server import ChatServer
        from daemon.systemd import Notifier, watchdog_loop

        s = self.settings
        notifier = Notifier()
        # A count on this loop before the tokenizer's vocabulary is in estimates rather than
        # stall for it; the vocabulary loads in a thread once READY is said (below).
        default_counter().spare_loop = True
        async with open_services(self.home, s, SystemClock()) as services:
            register_commands(services)
            socket_path = self.home.socket_path(s.chat.socket)
            server = ChatServer(
                socket_path,
                services.gateway,
                max_frame_bytes=s.chat.max_frame_bytes,
                queue_frames=s.chat.client_queue_frames,
                allow_uids=s.chat.allow_uids,
            )
            services.bus.on(
                StateChanged,
                lambda change: server.broadcast(state_frame(change)),
                name="chat.state_frame",
            )
            async with anyio.create_task_group() as tg:
                await tg.start(services.serve, name="services")
                if notifier.watchdog_interval():
                    await tg.start(watchdog_loop, notifier, name="watchdog")
                await tg.start(server.serve, name="chat-server")
                if lock is not None:
                    lock.record_socket(socket_path)
                notifier.ready(status=f"awake; socket {socket_path}")
                settle_heap()
                # The vocabulary (~47 MB) in a thread right after READY, not by the first turn:
                # READY does not wait for it, the first turn does not pay it, and the daemon
                # holds from its start what it holds after years of turns.
                default_counter().load_soon()
                say_ready(self.home, socket_path)
                log.info(
                    "daemon ready",
                    home=str(self.home.root),
                    socket=str(socket_path),
                    trunk_provider=services.roles.provider_kind("trunk"),
                    session_id=services.trunk.session.id if services.trunk.session else None,
                    pending=len(services.trunk.inbox.pending()),
                )
                await self._stop.wait()
                notifier.stopping()
                services.lifecycle.transition(DaemonState.STOPPING, detail="daemon shutting down")
                await self._drain_turn(services, s.agent.shutdown_grace_s / 2)
                tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(s.agent.shutdown_grace_s / 2):
                await services.trunk.shutdown("shutdown")
                # While every service is still up: what they were told last is done, not lost.
                await services.bus.drain()
        log.info("daemon stopped")
        return 0

    async def _drain_turn(self, services: Services, budget: float) -> None:
        trunk = services.trunk
        with anyio.move_on_after(budget):
            await trunk.wait_idle()
            # While the server still serves: every client hears `stopping`, the last turn is indexed.
            await services.bus.drain()
        if trunk.busy:
            log.info("cancelling the turn in progress for shutdown", turn_id=trunk.current_turn)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            count = 0
            async for signum in signals:
                count += 1
                if count == 1:
                    log.info("shutdown requested", signal=signal.Signals(signum).name)
                    self.request_stop()
                else:
                    log.warning(
                        "second signal: exiting immediately", signal=signal.Signals(signum).name
                    )
                    os._exit(1)


def ready_line(home: Home, socket_path: Path) -> str:
    """The one human line that says the daemon listens, and how to talk to it."""
    return f"reverie: ready — socket {socket_path}; chat with `reverie chat --home {home.root}`"


def say_ready(home: Home, socket_path: Path) -> None:
    """Print `ready_line` on stderr: the JSON log lines on stdout stay JSON for their readers
    (journald shows both), and a person watching a pipe or a terminal reads one plain line."""
    try:
        print(ready_line(home, socket_path), file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # no stderr to write to (closed): the log line says the same


def register_commands(services: Services) -> None:
    """The socket's commands, each answered by the system that owns it.

    Each is registered with its request class, which parses the wire's `args` (a wrong one is
    answered `bad_args`), and a handler typed on that request and on its result.
    """
    from daemon.commands.service import register_memory_commands
    from daemon.journal.commands import JournalRequest, JournalResult, journal_command
    from daemon.schedule.tools import ScheduleRequest, ScheduleResult, answer_schedule
    from daemon.sleep.commands import SleepRequest, SwitchRequest

    gateway = services.gateway

    async def status(_request: status_mod.StatusRequest) -> status_mod.StatusResult:
        return await status_mod.live_status(services)

    async def ping(_request: status_mod.PingRequest) -> status_mod.PingResult:
        return {"pong": True, "state": services.state}

    async def journal(request: JournalRequest) -> JournalResult:
        return await journal_command(services.home, services.settings, request)

    async def schedule(request: ScheduleRequest) -> ScheduleResult:
        return await answer_schedule(services.schedules, request)

    gateway.command("status", status_mod.StatusRequest, status)
    gateway.command("ping", status_mod.PingRequest, ping)
    gateway.command("sleep", SleepRequest, services.sleep_cycle.sleep_command)
    gateway.command("switch", SwitchRequest, services.sleep_cycle.switch_command)
    gateway.command("journal", JournalRequest, journal)
    gateway.command("schedule", ScheduleRequest, schedule)
    # remember, recall, memory_search, memory_import: the CLI's memory commands, answered warm.
    register_memory_commands(gateway, services.memory, services.clock)
