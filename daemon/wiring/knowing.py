"""The systems of what the agent knows: memory, the journal, and the context of each turn (the
open threads, a model handover, the assembler), with the topic files' watcher."""

from __future__ import annotations

from daemon.context.assembler import ContextAssembler
from daemon.context.handover import HandoverDesk, model_id
from daemon.events import ForkFinished, TurnFinished
from daemon.journal import JournalHeartbeat
from daemon.memory.embedders import Embedder
from daemon.memory.system import MemorySystem
from daemon.models.roles import ModelRoles
from daemon.threads import ThreadBook
from daemon.tokens import TokenCounter
from daemon.topics.router import TopicRouter
from daemon.topics.watch import FileWatcher
from daemon.wiring.core import Core


async def open_memory(
    core: Core, roles: ModelRoles, router: TopicRouter, embedder: Embedder | None
) -> MemorySystem:
    """The memory system; each finished turn and fork is indexed for recall, and what only the
    home's files hold is indexed once a PostgreSQL store is back from an outage."""
    bus, stack = core.bus, core.stack
    memory = await stack.enter_async_context(
        MemorySystem(
            home=core.home,
            db=core.db,
            settings=core.settings,
            roles=roles,
            bus=bus,
            clock=core.clock,
            topic_addenda=router.addenda,
            embedder=embedder,
        )
    )
    # Each finished turn and fork is indexed for recall, beside whatever comes next.
    stack.callback(
        bus.on(TurnFinished, lambda e: memory.index_session(e.session_id), name="memory.index_turn")
    )
    stack.callback(
        bus.on(
            ForkFinished,
            lambda e: memory.index_session(e.fork_session_id),
            name="memory.index_fork",
        )
    )

    async def catch_up(sessions: set[str]) -> None:
        # The PostgreSQL server is back and the queued writes are in: index what only the
        # home's files hold (facts remembered meanwhile, the new messages' chunks).
        await memory.facts.sync()
        for session_id in sorted(sessions):
            await memory.index_session(session_id)

    core.db.after_outage(catch_up)
    return memory


async def open_journal(core: Core, roles: ModelRoles, memory: MemorySystem) -> JournalHeartbeat:
    """The journal, listening on the bus (entered before the trunk, so it hears its end)."""
    s = core.settings
    journal = await core.stack.enter_async_context(
        JournalHeartbeat(
            home=core.home,
            db=core.db,
            settings=s,
            roles=roles,
            clock=core.clock,
            index=memory.index,
        )
    )
    journal.register(core.bus)
    return journal


async def open_context(
    core: Core,
    roles: ModelRoles,
    memory: MemorySystem,
    router: TopicRouter,
    counter: TokenCounter,
) -> tuple[ThreadBook, ContextAssembler]:
    """The open threads, the handover desk and the context assembler, each on the bus."""
    s, bus, stack = core.settings, core.bus, core.stack
    # Open promises, questions and plans: noted at each turn's end, swept during sleep.
    threads = ThreadBook(
        core.db, clock=core.clock, zone=core.zone, expire_days=s.threads.expire_days
    )
    stack.callback(threads.register(bus))
    # A trunk model other than the last answered turn's: a handover letter for its first turn.
    handover = HandoverDesk(
        home=core.home,
        db=core.db,
        settings=s,
        clock=core.clock,
        current=model_id(roles.provider_kind("trunk"), roles.config("trunk").model),
        view=memory.view,
        threads=threads,
    )
    await handover.notice(bus)
    stack.callback(handover.register(bus))
    assembler = ContextAssembler(
        home=core.home,
        settings=s,
        view=memory.view,
        router=router,
        counter=counter,
        clock=core.clock,
        threads=threads,
        handover=handover,
    )
    # Required: a turn never reaches the model without its context (it fails visibly).
    stack.callback(assembler.register(bus))
    return threads, assembler


def file_watcher(
    core: Core, router: TopicRouter, assembler: ContextAssembler, watch: bool | None
) -> FileWatcher | None:
    """The watcher that reloads topic and context files live (`topics.watch`, unless `watch`
    says otherwise); None when off."""
    if not (core.settings.topics.watch if watch is None else watch):
        return None
    return FileWatcher(
        core.home,
        core.settings.topics,
        router=router,
        files=assembler.files,
        bus=core.bus,
        # An idle daemon should cost ~nothing: wake rarely when no file changes.
        step_ms=200,
        idle_wakeup_ms=60_000,
    )
