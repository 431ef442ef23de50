"""The trunk: the one long-lived session a person talks to, fed by the durable inbox.

Messages are answered one at a time, in arrival order. A turn can be cancelled; a turn
whose model stays unreachable is left pending and retried with backoff, nothing is lost.
While the trunk waits for the model (`waiting_for_model`), every listener on a queued turn is
told once, with a `model_unavailable` failure that says the message is kept — including
listeners on messages accepted during the outage, right after their `accepted`. A message
that arrives mid-turn waits its turn. Who listens to a turn (a
chat connection) registers a `TurnObserver` for it; with no listener the turn still runs
and lands on disk.

`hold()` finishes the turn in progress and pauses answering (messages are still accepted
and fsynced); `release()` resumes. `switch(reason)` moves the trunk to a fresh session:
the intent is written first, `session_before_switch` fires (the summariser writes the
outgoing session's summary; a handler may veto), the new session opens with a link to the
old one, and per-session state is reset. A crash anywhere in between is finished at the
next start, before any message is answered, so messages that arrived during a switch are
always answered in the new session.

The parts live beside it: the retry and outage state in `daemon.agent.retry` (`TurnRetry`),
who listens to which turn in `daemon.agent.listeners`, and how a turn is tried and ends in
`daemon.agent.turn_end`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus

from daemon.agent.inbox import Inbox, InboxEntry
from daemon.agent.listeners import Listeners
from daemon.agent.loop import AgentLoop, TurnResult
from daemon.agent.retry import Kept, StorageDown, TurnRetry, WaitingForModel
from daemon.agent.session import Session, new_session_id
from daemon.agent.turn_end import TurnEnds, attempt
from daemon.agent.turns import TurnFailed, TurnObserver
from daemon.chat.protocol import ErrorCode
from daemon.clock import Clock
from daemon.errors import ReverieError
from daemon.events import SessionBeforeSwitch, SessionShutdown
from daemon.log import get_logger
from daemon.paths import Home
from daemon.records import TurnStatus
from daemon.store.db import Database
from daemon.store.errors import unless_storage_refuses
from daemon.store.kv import KvRepo
from daemon.store.sessions import SessionsRepo

log = get_logger("trunk")

TRUNK_KEY = "trunk_session"
SWITCH_KEY = "trunk_switch"
# How often the trunk looks whether a PostgreSQL server that went away is back (each look is
# free until the store's own probe is due).
STORE_WATCH_S = 1.0


@dataclass(frozen=True, kw_only=True)
class Accepted:
    turn_id: str
    queued: int


@dataclass(frozen=True, kw_only=True)
class Switched:
    previous_id: str
    session_id: str
    reason: str
    held_s: float


class SwitchVetoed(ReverieError):
    """A `session_before_switch` handler vetoed the switch; the trunk stays where it was."""


class Trunk:
    """Owns the trunk session, its inbox and the worker that answers messages.

    Use as `async with Trunk(...) as trunk:` then `await tg.start(trunk.serve)`. Exiting the
    block fires `session_shutdown` (shielded, bounded by the hook's timeout).
    """

    def __init__(
        self,
        *,
        home: Home,
        db: Database,
        loop: AgentLoop,
        clock: Clock,
        turn_timeout_s: float = 600.0,
        retry_base_s: float = 5.0,
        retry_max_s: float = 300.0,
    ) -> None:
        self.home = home
        self.db = db
        self.loop = loop
        self.clock = clock
        self.turn_timeout_s = turn_timeout_s
        self.kv = KvRepo(db)
        self.sessions = SessionsRepo(db)
        self.inbox = Inbox(home.inbox_file, clock)
        self.session: Session | None = None
        self.listeners = Listeners()
        # The model's and the storage's outages, and the backoff of a kept turn.
        self.retry = TurnRetry(
            inbox=self.inbox,
            listeners=self.listeners,
            clock=clock,
            home_root=home.root,
            base_s=retry_base_s,
            max_s=retry_max_s,
        )
        self.ends = TurnEnds(
            inbox=self.inbox,
            listeners=self.listeners,
            retry=self.retry,
            loop=loop,
            clock=clock,
            db=db,
        )
        self._current: tuple[str, anyio.CancelScope] | None = None
        self._cancelled: set[str] = set()
        self.last_result: TurnResult | None = None
        self.turns_answered = 0
        self._shutdown_fired: set[str] = set()
        self._idle = anyio.Event()
        self._idle.set()
        self._holds = 0
        self._released = anyio.Event()
        self._released.set()
        self._switch_lock = anyio.Lock()
        self._last_veto = ""

    async def __aenter__(self) -> Trunk:
        kept = await self.kv.get_json(TRUNK_KEY)
        now = self.clock.now()
        session_id = (
            str(kept)
            if kept is not None
            else (self._newest_transcript() or new_session_id("trunk", now))
        )
        self.session = await self._open(session_id)
        intent = await self.kv.get_json(SWITCH_KEY)
        if (
            isinstance(intent, dict)
            and intent.get("from") == session_id
            and isinstance(intent.get("to"), str)
        ):
            log.info(
                "finishing a session switch interrupted by a restart",
                previous=session_id,
                session=intent["to"],
            )
            reason = str(intent.get("reason") or "switch")
            if await self._switch_gate(reason):
                await self._complete_switch(str(intent["to"]), reason)
        elif intent is not None:
            await self.kv.delete(SWITCH_KEY)  # the switch had finished; only the note was left
        await self.kv.write_json(TRUNK_KEY, self.session.id, at=self.clock.now())
        await self.sessions.reopen(self.session.id)
        pending = self.inbox.load()
        if pending:
            log.info("answering messages left pending before restart", count=len(pending))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown("shutdown")

    def _newest_transcript(self) -> str | None:
        """The newest trunk transcript's session, when the database lost its note of the current one.

        A database rebuilt from the files (`memory reindex` after losing `reverie.db`) keeps no
        record of which trunk session was live; a switch always opens a newer one, so the newest
        transcript is the one to continue.
        """
        names = sorted(p.stem for p in self.home.trunk_dir.glob("trunk-*.jsonl"))
        return names[-1] if names else None

    async def _open(self, session_id: str, *, header: dict[str, Any] | None = None) -> Session:
        return await Session.open(
            db=self.db,
            directory=self.home.trunk_dir,
            session_id=session_id,
            kind="trunk",
            now=self.clock.now(),
            header=header,
        )

    # -- ending a session --------------------------------------------------------------------

    async def shutdown(self, reason: str) -> None:
        """Fire `session_shutdown` for the current session once (shielded; handlers bounded).

        With `reason="shutdown"` (the daemon stopping) this returns once every handler has
        finished or timed out; otherwise the bus delivers it without holding the caller.
        """
        if self.session is None:
            return
        await self._end_session(self.session, reason)

    async def _end_session(self, session: Session, reason: str) -> None:
        if session.id in self._shutdown_fired:
            return
        self._shutdown_fired.add(session.id)
        with anyio.CancelScope(shield=True):
            # An index note (rebuilt from the transcript): never worth a failed shutdown.
            with unless_storage_refuses(log, "session end not indexed", session=session.id):
                await self.sessions.mark_ended(session.id, self.clock.now().isoformat())
            # The daemon's last one is awaited: its handlers (the journal's entry, memory's
            # summary) finish before the process exits. A switch's runs beside the new session.
            await self.loop.bus.publish(
                SessionShutdown(
                    session_id=session.id, transcript_path=str(session.path), reason=reason
                ),
                wait=reason == "shutdown",
            )

    # -- hold, release, switch ---------------------------------------------------------------

    @property
    def held(self) -> bool:
        return self._holds > 0

    async def hold(self) -> None:
        """Pause answering once the turn in progress ends; return when it has.

        Messages keep being accepted and fsynced while held; they are answered after
        `release()`. Holds nest. Cancellation while waiting undoes this hold.
        """
        self._holds += 1
        if self._holds == 1:
            self._released = anyio.Event()
        try:
            await self.wait_idle()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Undo one `hold()`; answering resumes when none is left."""
        if self._holds <= 0:
            raise RuntimeError("release() without a matching hold()")
        self._holds -= 1
        if self._holds == 0:
            self._released.set()

    async def switch(self, reason: str) -> Switched:
        """Move the trunk to a fresh session (see the module docstring); raise `SwitchVetoed`.

        The intent is written first, so a crash while the turn in progress finishes, or at
        any later point, is finished at the next start. Once the gate has let it through,
        the switch itself is shielded from cancellation.
        """
        started = anyio.current_time()
        async with self._switch_lock:
            assert self.session is not None
            old = self.session
            new_id = new_session_id("trunk", self.clock.now())
            await self.kv.write_json(
                SWITCH_KEY,
                {
                    "from": old.id,
                    "to": new_id,
                    "reason": reason,
                    "ts": self.clock.now().isoformat(),
                },
                at=self.clock.now(),
            )
            await self.hold()
            try:
                if not await self._switch_gate(reason):
                    raise SwitchVetoed(f"the switch was vetoed: {self._last_veto}")
                with anyio.CancelScope(shield=True):
                    await self._complete_switch(new_id, reason)
            finally:
                self.release()
        held = round(anyio.current_time() - started, 4)
        log.info(
            "trunk switched session", previous=old.id, session=new_id, reason=reason, held_s=held
        )
        return Switched(previous_id=old.id, session_id=new_id, reason=reason, held_s=held)

    async def _switch_gate(self, reason: str) -> bool:
        """Fire `session_before_switch` for the current session; on a veto drop the intent."""
        assert self.session is not None
        veto = await self.loop.bus.emit_gate(
            SessionBeforeSwitch(
                session_id=self.session.id, transcript_path=str(self.session.path), reason=reason
            )
        )
        if veto is None:
            return True
        self._last_veto = f"{veto.by}: {veto.reason}"
        await self.kv.delete(SWITCH_KEY)
        return False

    async def _complete_switch(self, new_id: str, reason: str) -> None:
        """Open `new_id` linked to the current session, make it the trunk, forget the old one's state."""
        assert self.session is not None
        old = self.session
        new = await self._open(new_id, header={"continues": old.id, "reason": reason})
        await self.sessions.link_previous(new_id, previous_id=old.id, reason=reason)
        await self.kv.write_json(TRUNK_KEY, new_id, at=self.clock.now())
        await self.kv.delete(SWITCH_KEY)
        self.session = new
        self.loop.reset_session(old.id)
        self.last_result = None
        await self._end_session(old, f"switch: {reason}")

    # -- turns -------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._current is not None

    async def wait_idle(self) -> None:
        """Return once no turn is running or finishing (its reply delivered; immediately when
        idle)."""
        await self._idle.wait()

    @property
    def current_turn(self) -> str | None:
        return self._current[0] if self._current else None

    async def submit(
        self,
        text: str,
        *,
        observer: TurnObserver | None = None,
        client_msg_id: str | None = None,
        origin: str = "person",
    ) -> Accepted:
        """Durably queue a message; return once it is on disk (then `accepted` may be sent)."""
        entry = await self.inbox.put(text, origin=origin, client_msg_id=client_msg_id)
        if observer is not None:
            self.listeners.attach(entry.id, observer)
        self.retry.retry_early()
        return Accepted(turn_id=entry.id, queued=len(self.inbox.pending()) - 1)

    def attach(self, turn_id: str, observer: TurnObserver) -> None:
        self.listeners.attach(turn_id, observer)

    def detach(self, observer: TurnObserver) -> None:
        self.listeners.detach(observer)

    async def cancel(self, turn_id: str | None = None) -> bool:
        """Cancel the running turn (or a queued one by id); return whether anything was cancelled."""
        if self._current and (turn_id is None or turn_id == self._current[0]):
            self._cancelled.add(self._current[0])
            self._current[1].cancel()
            return True
        if turn_id and self.inbox.remove(turn_id):
            await self.inbox.done(turn_id, status=TurnStatus.CANCELLED)
            self.listeners.report(
                TurnFailed(
                    turn_id=turn_id, code=ErrorCode.CANCELLED, message="cancelled before it started"
                )
            )
            self.listeners.forget(turn_id)
            self.retry.forget(turn_id)
            return True
        return False

    # -- outages (`TurnRetry`) ---------------------------------------------------------------

    @property
    def waiting_for_model(self) -> WaitingForModel | None:
        """Set while the model stays unreachable; cleared by the next turn that reaches it."""
        return self.retry.waiting_for_model

    @property
    def storage_down(self) -> StorageDown | None:
        """Set while the home's storage refuses writes; cleared by the next turn that lands."""
        return self.retry.storage_down

    def refusal(self) -> str | None:
        """Why a new message cannot be taken now (storage refuses writes), or None."""
        return self.retry.refusal()

    def tell_if_waiting(self, turn_id: str) -> bool:
        """Tell a just-accepted turn's listener that the model is down, if it is (see
        `TurnRetry.tell_if_waiting`); return whether told."""
        return self.retry.tell_if_waiting(turn_id)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Answer inbox messages forever. Cancellation stops after the current turn's cleanup.

        Each answered turn is published as `TurnFinished`; the bus delivers it beside the next
        turn (indexing it for memory), so a message sent right after a reply does not wait.
        """
        async with anyio.create_task_group() as tg:
            if getattr(self.db, "queue", None) is not None:
                tg.start_soon(self._watch_store)
            task_status.started()
            await self._serve()

    async def _watch_store(self) -> None:
        """While the PostgreSQL server is away, probe it (the store's own backoff decides when)
        even with no turn running, and once it is back catch up what was queued meanwhile.

        While the server answers it sleeps until the store's breaker trips: no wake-ups. (The
        first look also catches up a queue the store applied as it opened.)"""
        while True:
            await anyio.sleep(STORE_WATCH_S)
            try:
                await self.db.catch_up()
            except Exception as exc:  # a probe's failure is the store's to report; keep watching
                log.warning("store catch-up failed", error=repr(exc))
                continue
            if self.db.away_since is None:
                await self.db.store_trouble()

    async def _serve(self) -> None:
        while True:
            entry = await self.inbox.next()
            if self._holds:
                # Checked with no await since the head was taken: a hold is never overtaken.
                await self._released.wait()
                continue
            try:
                kept = await self._answer(entry)
            finally:
                # Idle once the turn is wholly finished — the inbox told, the reply delivered —
                # so a hold (the sleep cycle's) never overtakes a reply it waited for.
                self._idle.set()
            if kept is None:
                continue
            delay = self.retry.kept(kept)
            log.warning(
                "turn kept for a retry",
                turn_id=entry.id,
                reason=kept.reason,
                storage=kept.storage,
                retry_in_s=delay,
            )
            await self.retry.wait(delay)

    async def _answer(self, entry: InboxEntry) -> Kept | None:
        """Run one queued message; return why, when it must stay queued and be tried again.

        Kept (never failed): the model unreachable, a reply that broke off or stalled past the
        turn timeout, a provider that raised, storage that refused a write. Failed, with the
        person told and a log line: a request the model rejected, the spend cap, the context,
        a turn timeout outside a model call, a bug.
        """
        assert self.session is not None
        session = self.session
        ended = session.turn_ended(entry.id)
        if ended in (TurnStatus.ANSWERED, TurnStatus.FAILED, TurnStatus.VETOED):
            # Finished before a crash that came before the inbox heard of it: never answer twice.
            log.info(
                "turn already finished before a restart; not answering it again",
                turn_id=entry.id,
                status=ended,
            )
            await self.ends.finish(entry, TurnStatus(ended))
            return None
        scope = anyio.CancelScope()
        self._current = (entry.id, scope)
        self._idle = anyio.Event()
        try:
            result, error, kept = await attempt(
                self.loop,
                entry,
                session,
                scope,
                timeout_s=self.turn_timeout_s,
                observer=self.listeners.report,
            )
        finally:
            self._current = None
        if scope.cancelled_caught or entry.id in self._cancelled:
            self._cancelled.discard(entry.id)
            await self.ends.cancelled(entry)
            return None
        if kept is not None:
            return kept  # `serve` tells every listener waiting on a queued turn, then backs off
        self.retry.storage_back()
        if error is None or error[0] is ErrorCode.MODEL_ERROR:
            self.retry.model_reached()  # the model answered (even with an error): it is reachable
        if error is not None:
            await self.ends.failed(entry, session, error)
            return None
        assert result is not None
        # The inbox hears first, then the person; no await between their word and these two.
        await self.ends.answered(entry, result)
        self.last_result = result
        self.turns_answered += 1
        await self.ends.published(entry, session, result)
        return None
