"""The orchestrator: wires the services together and runs them. No feature logic here.

Start-up order: home lock → database → bus → ledger, model roles → topic router, memory,
journal heartbeat, context assembler → tools → trunk → chat server (READY=1 once it listens) → scheduler,
file watcher, watchdog. Shutdown (SIGTERM/SIGINT): STOPPING=1, let the running turn finish
within half the grace period, then cancel it; the trunk fires `session_shutdown` and waits
for its handlers, and the bus finishes the observers still in flight, within the other half;
memory waits for its summaries within the budget; the store checkpoints and closes; exit 0. A
second signal exits at once (everything acknowledged is already on disk).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from daemon import status as status_mod
from daemon.agent.gateway import ChatGateway, CommandBusy, state_frame
from daemon.agent.loop import AgentLoop
from daemon.agent.trunk import SwitchVetoed, Trunk
from daemon.bus import EventBus
from daemon.clock import Clock, SystemClock
from daemon.events import (
    ForkFinished,
    Heartbeat,
    SleepHousekeeping,
    StateChanged,
    TurnFinished,
)
from daemon.lifecycle import DaemonState, Lifecycle
from daemon.log import get_logger
from daemon.models.base import Model
from daemon.models.ledger import UsageLedger
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.scheduler import Scheduler
from daemon.settings import Settings
from daemon.store.db import Database
from daemon.tokens import default_counter
from daemon.tools import ToolRegistry

log = get_logger("app")


class HomeLocked(Exception):
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
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise HomeLocked(
                f"another daemon (pid {holder}) is already running with home {self.path.parent}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Daemon:
    """The running daemon's parts, for the handful of things that need more than one."""

    def __init__(
        self,
        home: Home,
        settings: Settings,
        *,
        clock: Clock | None = None,
        model_overrides: dict[str, Model] | None = None,
    ) -> None:
        self.home = home
        self.settings = settings
        self.clock = clock or SystemClock()
        self.model_overrides = model_overrides or {}
        self.bus = EventBus("daemon-bus")
        self.lifecycle = Lifecycle(self.clock, self.bus)
        self.started_at = self.clock.now()
        self.db: Database | None = None
        self.ledger: UsageLedger | None = None
        self.roles: ModelRoles | None = None
        self.trunk: Trunk | None = None
        self.scheduler: Scheduler | None = None
        self.memory: Any = None
        self.router: Any = None
        self.delegator: Any = None
        self.journal: Any = None
        self.server: Any = None
        self.sleep_cycle: Any = None
        self._stop = anyio.Event()

    @property
    def state(self) -> str:
        return self.lifecycle.state.value

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT (or `request_stop`); return the exit code.

        Signals are handled from the first moment to the last: a first one asks for a
        graceful stop (also during start-up), a second exits at once.
        """
        code = 1
        with HomeLock(self.home.lock_file):
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._signals)
                try:
                    code = await self._serve()
                finally:
                    outer.cancel_scope.cancel()
        return code

    async def _serve(self) -> int:
        from daemon.chat.server import ChatServer
        from daemon.context.assembler import ContextAssembler
        from daemon.delegate.fork import Delegator
        from daemon.journal import JournalHeartbeat
        from daemon.memory.system import MemorySystem
        from daemon.sleep.cycle import SleepCycle
        from daemon.sleep.dreams import DreamsPhase
        from daemon.sleep.maintenance import MaintenancePhase
        from daemon.sleep.wake import WakeUp
        from daemon.systemd import Notifier, watchdog_loop
        from daemon.topics.router import TopicRouter
        from daemon.topics.watch import FileWatcher

        s = self.settings
        notifier = Notifier()
        async with AsyncExitStack() as stack:
            self.db = await Database.open(
                self.home.db_file, busy_timeout_ms=s.store.busy_timeout_ms
            )
            stack.push_async_callback(self.db.close)
            # Entered before every service that publishes or listens, so it outlives them all.
            await stack.enter_async_context(self.bus)
            if not self.db.vec_available:
                log.warning(
                    "sqlite-vec is not available; vector search is off (run `reverie doctor`)"
                )
            self.ledger = UsageLedger(self.db, s.spend, self.clock)
            self.roles = await stack.enter_async_context(
                ModelRoles(s, self.ledger, overrides=self.model_overrides)
            )
            counter = default_counter()
            self.router = TopicRouter(self.home, s.topics)
            self.memory = await stack.enter_async_context(
                MemorySystem(
                    home=self.home,
                    db=self.db,
                    settings=s,
                    roles=self.roles,
                    bus=self.bus,
                    clock=self.clock,
                    topic_addenda=self.router.addenda,
                )
            )
            memory = self.memory
            # Each finished turn and fork is indexed for recall, beside whatever comes next.
            stack.callback(
                self.bus.on(
                    TurnFinished,
                    lambda e: memory.index_session(e.session_id),
                    name="memory.index_turn",
                )
            )
            stack.callback(
                self.bus.on(
                    ForkFinished,
                    lambda e: memory.index_session(e.fork_session_id),
                    name="memory.index_fork",
                )
            )
            # Entered before the trunk, so it is still there when the trunk's session ends.
            self.journal = await stack.enter_async_context(
                JournalHeartbeat(
                    home=self.home,
                    db=self.db,
                    settings=s,
                    roles=self.roles,
                    clock=self.clock,
                    index=self.memory.index,
                )
            )
            self.journal.register(self.bus)
            assembler = ContextAssembler(
                home=self.home,
                settings=s,
                view=self.memory.view,
                router=self.router,
                counter=counter,
                clock=self.clock,
            )
            # Required: a turn never reaches the model without its context (it fails visibly).
            assembler.register(self.bus)
            tools = ToolRegistry(s.agent.tool_output_max_chars)
            for tool in self.memory.tools():
                tools.register(tool)
            # Fork transcripts are kept within their retention limits during sleep's maintenance.
            stack.callback(
                self.bus.on(SleepHousekeeping, self._fork_retention, name="delegate.fork_retention")
            )
            self.delegator = await stack.enter_async_context(
                Delegator(
                    home=self.home,
                    db=self.db,
                    roles=self.roles,
                    bus=self.bus,
                    clock=self.clock,
                    counter=counter,
                    settings=s,
                    base_tools=tools,
                )
            )
            for tool in self.delegator.tools_for(0):
                tools.register(tool)
            trunk_cfg = s.models.trunk
            loop = AgentLoop(
                roles=self.roles,
                tools=tools,
                bus=self.bus,
                clock=self.clock,
                counter=counter,
                max_tool_steps=s.agent.max_tool_steps,
                history_max_messages=s.agent.history_max_messages,
                history_min_turns=s.agent.history_min_turns,
                compaction_threshold=s.agent.compaction_threshold,
                context_window=trunk_cfg.context_window,
                max_parallel_tools=s.delegate.max_parallel,
            )
            self.trunk = await stack.enter_async_context(
                Trunk(
                    home=self.home,
                    db=self.db,
                    loop=loop,
                    clock=self.clock,
                    turn_timeout_s=s.agent.turn_timeout_s,
                    retry_base_s=s.agent.unavailable_retry_s,
                    retry_max_s=s.agent.unavailable_retry_max_s,
                )
            )
            # Entered before the trunk serves: an interrupted cycle holds it before any answer.
            self.sleep_cycle = await stack.enter_async_context(
                SleepCycle(
                    home=self.home,
                    settings=s,
                    db=self.db,
                    models=self.roles,
                    bus=self.bus,
                    clock=self.clock,
                    memory=self.memory,
                    trunk=self.trunk,
                    lifecycle=self.lifecycle,
                    phases=[
                        MaintenancePhase(),
                        DreamsPhase(),
                        WakeUp(self.trunk),
                    ],
                )
            )
            gateway = ChatGateway(
                self.trunk,
                state=lambda: self.state,
                session_id=lambda: (
                    self.trunk.session.id if self.trunk and self.trunk.session else ""
                ),
            )
            self._register_commands(gateway)
            self.scheduler = await stack.enter_async_context(
                Scheduler(clock=self.clock, db=self.db, timezone=s.scheduler.timezone)
            )
            self.sleep_cycle.schedule(self.scheduler)
            if self.bus.handlers(Heartbeat):
                # Only when something keeps a record on it: a heartbeat that does nothing is not one.
                self.scheduler.add_interval(
                    "heartbeat", self._heartbeat, seconds=s.journal.heartbeat_minutes * 60
                )
            self.scheduler.add_interval(
                "checkpoint", self._checkpoint, seconds=s.store.checkpoint_interval_s
            )
            socket_path = self.home.socket_path(s.chat.socket)
            self.server = ChatServer(
                socket_path,
                gateway,
                max_frame_bytes=s.chat.max_frame_bytes,
                queue_frames=s.chat.client_queue_frames,
                allow_uids=s.chat.allow_uids,
            )
            server = self.server
            self.bus.on(
                StateChanged,
                lambda change: server.broadcast(state_frame(change)),
                name="chat.state_frame",
            )
            watcher = (
                FileWatcher(
                    self.home,
                    s.topics,
                    router=self.router,
                    files=assembler.files,
                    bus=self.bus,
                    # An idle daemon should cost ~nothing: wake rarely when no file changes.
                    step_ms=200,
                    idle_wakeup_ms=60_000,
                )
                if s.topics.watch
                else None
            )
            async with anyio.create_task_group() as tg:
                await tg.start(self.trunk.serve)
                await tg.start(self.sleep_cycle.serve)
                await tg.start(self.scheduler.run)
                if watcher is not None:
                    # Live reload is not needed to answer: do not hold READY for it.
                    tg.start_soon(watcher.run)
                if notifier.watchdog_interval():
                    await tg.start(watchdog_loop, notifier)
                self.lifecycle.transition(DaemonState.AWAKE, detail="ready")
                await tg.start(self.server.serve)
                # Load the tokenizer's vocabulary now, off the loop, not in the first turn.
                tg.start_soon(anyio.to_thread.run_sync, counter.raw, "warm up")
                notifier.ready(status=f"awake; socket {socket_path}")
                log.info(
                    "daemon ready",
                    home=str(self.home.root),
                    socket=str(socket_path),
                    trunk_provider=self.roles.provider_kind("trunk"),
                    session_id=self.trunk.session.id if self.trunk.session else None,
                    pending=len(self.trunk.inbox.pending()),
                )
                await self._stop.wait()
                notifier.stopping()
                self.lifecycle.transition(DaemonState.STOPPING, detail="daemon shutting down")
                await self._drain_turn(s.agent.shutdown_grace_s / 2)
                tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(s.agent.shutdown_grace_s / 2):
                await self.trunk.shutdown("shutdown")
                # While every service is still up: what they were told last is done, not lost.
                await self.bus.drain()
        log.info("daemon stopped")
        return 0

    async def _drain_turn(self, budget: float) -> None:
        assert self.trunk is not None
        with anyio.move_on_after(budget):
            await self.trunk.wait_idle()
            # While the server still serves: every client hears `stopping`, the last turn is indexed.
            await self.bus.drain()
        if self.trunk.busy:
            log.info(
                "cancelling the turn in progress for shutdown", turn_id=self.trunk.current_turn
            )

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

    async def _fork_retention(self, event: SleepHousekeeping) -> str:
        from daemon.delegate.retention import apply_fork_retention

        assert self.db is not None
        return await apply_fork_retention(self.home, self.db, self.settings, self.clock)

    async def _heartbeat(self) -> str:
        failed = await self.bus.deliver(Heartbeat(at=self.clock.now()))
        if failed:
            # Recorded as a failed run: status never claims a heartbeat that did not do its check.
            raise RuntimeError(
                f"{failed} of {len(self.bus.handlers(Heartbeat))} heartbeat handler(s) failed"
            )
        tick = self.journal.last_tick if self.journal is not None else None
        return (
            tick.describe() if tick is not None else f"handlers={len(self.bus.handlers(Heartbeat))}"
        )

    async def _checkpoint(self) -> str:
        assert self.db is not None
        busy, log_frames, done = await self.db.checkpoint()
        return f"busy={busy} wal_frames={log_frames} checkpointed={done}"

    def _register_commands(self, gateway: ChatGateway) -> None:
        async def status(_args: dict[str, Any]) -> dict[str, Any]:
            return await status_mod.live_status(self)

        async def ping(_args: dict[str, Any]) -> dict[str, Any]:
            return {"pong": True, "state": self.state}

        async def journal(args: dict[str, Any]) -> dict[str, Any]:
            from daemon.journal.commands import journal_command

            return await journal_command(self.home, self.settings, args)

        async def sleep(args: dict[str, Any]) -> dict[str, Any]:
            from daemon.sleep.cycle import SleepBusy

            try:
                record = await self.sleep_cycle.start("manual")
            except SleepBusy as exc:
                raise CommandBusy(str(exc)) from None
            if args.get("wait"):
                try:
                    outcome = await self.sleep_cycle.wait(record.id)
                except SleepBusy as exc:
                    raise CommandBusy(str(exc)) from None
                return dict(outcome.to_json())
            return {
                "cycle_id": record.id,
                "reason": record.reason,
                "started": True,
                "session_id": record.session_id,
            }

        async def switch(args: dict[str, Any]) -> dict[str, Any]:
            assert self.trunk is not None
            if self.lifecycle.state is not DaemonState.AWAKE:
                raise CommandBusy(f"the daemon is {self.state}; a session switch needs it awake")
            reason = str(args.get("reason") or "requested by the person").strip()[:200]
            try:
                done = await self.trunk.switch(reason)
            except SwitchVetoed as exc:
                raise CommandBusy(str(exc)) from None
            return dataclasses.asdict(done)

        for name, fn in (
            ("status", status),
            ("ping", ping),
            ("sleep", sleep),
            ("switch", switch),
            ("journal", journal),
        ):
            gateway.command(name, fn)
        # remember, recall, memory_search, memory_import: the CLI's memory commands, answered warm.
        from daemon.commands.service import memory_commands

        for name, command in memory_commands(self.memory, self.clock).items():
            gateway.command(name, command)
