"""The memory system: wires the index, embedder, facts, summariser and recall.

`MemorySystem` is the one object the orchestrator owns for memory. It is an async context
manager: entering opens the index (and its background embedding), repairs the index from
the facts log, starts the summariser's worker and queues every session whose summary did
not finish last time; exiting gives in-flight summaries the shutdown budget, then leaves
the rest marked unfinished for the next start.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio

from daemon.bus import EventBus
from daemon.clock import Clock, SystemClock
from daemon.events import BeforeFork, SessionBeforeSwitch, SessionShutdown, TurnFinished
from daemon.log import get_logger
from daemon.memory.api import MemoryView
from daemon.memory.auto_recall import IndexMemoryView
from daemon.memory.embedders import Embedder
from daemon.memory.facts import Fact, FactError, FactStore, RememberResult
from daemon.memory.index import MemoryIndex
from daemon.memory.recall import Recall, RecallError, RecallResult
from daemon.memory.summariser import Summariser, read_summary_file, summary_memory
from daemon.models.base import ModelError
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.settings import Settings
from daemon.store.db import Database
from daemon.store.sessions import SessionsRepo
from daemon.store.summaries import SummariesRepo
from daemon.tools.registry import Tool

__all__ = ["FactError", "MemorySystem", "RecallError", "RememberResult", "TopicAddenda"]

log = get_logger("memory")

# topic_addenda(point, text) -> markdown of the matching topic bodies ("" when none);
# point is "recall_persona" or "summary_persona".
TopicAddenda = Callable[[str, str], str]


def _build_embedder(settings: Settings) -> Embedder:
    from daemon.memory.embedders import build_embedder

    return build_embedder(settings.memory)


class MemorySystem:
    """Wire the index, embedder, facts, summariser and recall; an async context manager.

    `background=False` (the CLI) starts no summariser worker and registers no handlers:
    `summarise_session(..., wait=True)` still works, nothing else runs behind the caller.
    `embedder` overrides the configured one (tests pass a `HashEmbedder`).
    """

    def __init__(
        self,
        *,
        home: Home,
        db: Database,
        settings: Settings,
        roles: ModelRoles | None,
        bus: EventBus | None,
        clock: Clock,
        topic_addenda: TopicAddenda | None = None,
        background: bool = True,
        embedder: Embedder | None = None,
    ) -> None:
        self.home = home
        self.db = db
        self.settings = settings
        self.roles = roles
        self.bus = bus
        self.clock = clock
        self.background = background
        self.embedder = embedder if embedder is not None else _build_embedder(settings)
        # A command-line memory system embeds when it flushes, never behind the caller.
        self.index = MemoryIndex(db, self.embedder, settings.memory, clock, background=background)
        self.facts = FactStore(home=home, index=self.index, settings=settings, clock=clock)
        self.summariser = (
            Summariser(
                home=home,
                db=db,
                index=self.index,
                roles=roles,
                settings=settings,
                clock=clock,
                topic_addenda=topic_addenda,
                kept=self.facts.kept_secrets,
            )
            if roles is not None
            else None
        )
        self.recaller = Recall(
            db=db,
            index=self.index,
            roles=roles,
            settings=settings,
            topic_addenda=topic_addenda,
            clock=clock,
        )
        self.view: MemoryView = IndexMemoryView(self.index, settings.memory)
        self._stack: AsyncExitStack | None = None
        self._registered: list[Callable[[], None]] = []
        self._registered_on: set[int] = set()

    async def __aenter__(self) -> MemorySystem:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.index)
            repaired = await self.facts.sync()
            if repaired:
                log.info("index repaired from the facts log", facts=repaired)
            if self.background and self.summariser is not None:
                await stack.enter_async_context(self.summariser)
                await self.summariser.scan()
                if self.bus is not None:
                    self.register(self.bus)
            stack.callback(self._unregister)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if self.index.uses.pending:
            with anyio.CancelScope(shield=True):
                try:
                    await self.index.uses.flush()
                except Exception as err:  # counts only nudge ranking: never block shutdown
                    log.warning("fact uses not written at shutdown", error=repr(err))
        if stack is not None:
            await stack.aclose()

    # --- wiring ------------------------------------------------------------------------
    def tools(self) -> list[Tool]:
        """The six memory tools: remember, correct, retract, recall, recall_session, remember_session."""
        from daemon.memory.tools import memory_tools

        return memory_tools(self)

    def register(self, bus: EventBus) -> None:
        """Queue a summary on session_shutdown, session_before_switch and before_fork (idempotent)."""
        if id(bus) in self._registered_on or self.summariser is None or not self.background:
            return
        self._registered_on.add(id(bus))
        summariser = self.summariser

        def on_shutdown(event: SessionShutdown) -> None:
            summariser.enqueue(event.session_id)

        def on_switch(event: SessionBeforeSwitch) -> None:
            summariser.enqueue(event.session_id)  # never vetoes: the switch goes ahead

        def on_fork(event: BeforeFork) -> None:
            # The fork shares this memory: what the parent did so far should be findable.
            summariser.enqueue(event.parent_session_id)

        async def on_turn_finished(event: TurnFinished) -> None:
            # The uses recall counted during the turn, written once it is answered.
            await self.index.uses.flush()

        self._registered += [
            bus.on(TurnFinished, on_turn_finished, name="memory.write_fact_uses"),
            bus.on(SessionShutdown, on_shutdown, name="memory.summarise_on_shutdown"),
            bus.on(SessionBeforeSwitch, on_switch, name="memory.summarise_on_switch"),
            bus.on(BeforeFork, on_fork, name="memory.summarise_before_fork"),
        ]

    def _unregister(self) -> None:
        for undo in self._registered:
            undo()
        self._registered.clear()
        self._registered_on.clear()

    # --- facts -------------------------------------------------------------------------
    async def remember(
        self, text: str, *, target: str = "memory", origin: str = "person", tags: Sequence[str] = ()
    ) -> RememberResult:
        """Store one explicit fact now (raises `FactError` with the reason when refused)."""
        return await self.facts.remember(text, target=target, origin=origin, tags=tags)

    async def correct(self, uid: str, text: str, *, origin: str) -> RememberResult:
        """Supersede fact `uid` with `text` (raises `FactError` when `uid` is unknown or retired)."""
        return await self.facts.correct(uid, text, origin=origin)

    async def retract(self, uid: str, *, reason: str, origin: str) -> None:
        """Retire fact `uid`, keeping it in history (raises `FactError` when it is not active)."""
        await self.facts.retract(uid, reason=reason, origin=origin)

    def fact(self, uid: str) -> Fact | None:
        return self.facts.get(uid)

    # --- recall ------------------------------------------------------------------------
    async def recall(
        self, query: str, *, session_id: str | None = None, answering: str = ""
    ) -> str:
        """Answer `query` from memory: bounded text citing `[fact:N]`/`[session-…]`.

        Model outages degrade to search plus an extractive answer; raises `RecallError` only
        for an empty query.
        """
        result = await self.recall_result(query, session_id=session_id, answering=answering)
        return result.render(self.settings.memory.recall_max_bytes)

    async def recall_result(
        self, query: str, *, session_id: str | None = None, answering: str = ""
    ) -> RecallResult:
        """`recall`'s result; `answering`: the id of the message the turn is answering."""
        result = await self.recaller.recall(query, session_id=session_id, answering=answering)
        self.index.uses.note_ids(s.cite for s in result.sources)  # the facts it answered from
        return result

    async def recall_session(self, session: str, query: str) -> str:
        """Query-centred windows of one session's messages (raises `RecallError` if unknown)."""
        return await self.recaller.session_windows(session, query)

    # --- sessions ----------------------------------------------------------------------
    async def summarise_session(self, session_id: str, *, wait: bool = False) -> Path | None:
        """Summarise a session: now (`wait=True`, returns the file) or in the background.

        With `wait=True` a model failure raises `ModelError` and the session is queued for a
        later retry; without, the current summary file (if any) is returned at once.
        """
        if self.summariser is None:
            raise ModelError("no model roles were given to this memory system; it cannot summarise")
        if not wait:
            self.summariser.enqueue(session_id)
            found = await SessionsRepo(self.db).summary_path(session_id)
            return Path(found) if found else None
        try:
            return await self.summariser.summarise(session_id)
        except ModelError:
            if self.background:
                self.summariser.enqueue(session_id)
            raise

    async def index_session(self, session_id: str) -> int:
        """Chunk the session's new messages into the index (the trunk calls this after each turn)."""
        return await self.index.index_session(session_id)

    async def reindex(self) -> dict[str, int]:
        """Rebuild the database's memory from the files: facts log, transcripts, summary files.

        Summary files also restore `sessions.summarised_upto`, so a rebuilt database does not
        re-summarise (and pay again for) sessions that already have their file.
        """
        from daemon.memory.importer import reindex_transcripts

        await self.index.clear()
        facts = await self.facts.sync(force=True)
        counts = dict(await reindex_transcripts(self.home, self.index))
        kinds = await SummariesRepo(self.db).kinds()
        summaries = 0
        for path in sorted(self.home.summaries_dir.glob("session-*.md")):
            try:
                meta, body = read_summary_file(path)
            except OSError as exc:
                log.warning("unreadable summary file skipped", path=str(path), error=repr(exc))
                continue
            sid = meta.get("session")
            if not isinstance(sid, str) or not body.strip():
                log.warning("summary file without a session id skipped", path=str(path))
                continue
            origin = "import" if kinds.get(sid) == "imported" else "system"
            await self.index.upsert([summary_memory(meta, body, path, origin=origin)])
            if sid in kinds:
                told = meta.get("messages")
                covered = told if isinstance(told, int) else 0
                await SummariesRepo(self.db).restored(
                    sid, path=str(path), at=str(meta.get("summarised_at") or ""), covered=covered
                )
            summaries += 1
        for sid in kinds:
            counts["chunks"] = counts.get("chunks", 0) + await self.index.index_session(sid)
        from daemon.memory.months import reindex_months

        counts["months"] = await reindex_months(self.home.memory_dir / "months", self.index)
        log.info("memory reindexed", facts=facts, summaries=summaries, **counts)
        return {"facts": facts, "summaries": summaries, **counts}

    @classmethod
    @asynccontextmanager
    async def open_view(cls, home: Home, settings: Settings) -> AsyncIterator[MemoryView]:
        """Open a read-only `MemoryView` over a home's index (no models; safe while the daemon runs)."""
        # A server's store is migrated by whoever opens it first; a SQLite file by its writer.
        readonly = home.db_file.exists() and not settings.storage.url
        db = await Database.open_configured(
            home.db_file, settings, readonly=readonly, migrate=not readonly
        )
        try:
            index = MemoryIndex(db, _build_embedder(settings), settings.memory, SystemClock())
            async with index:
                view = IndexMemoryView(index, settings.memory)
                view.vocabulary_seconds = None  # a one-off look: the vocabulary whole
                yield view
        finally:
            await db.close()
