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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import anyio
from anyio.abc import TaskStatus

from daemon.agent.inbox import Inbox, InboxEntry
from daemon.agent.loop import AgentLoop, ContextFailed, TurnResult
from daemon.agent.session import Session, new_session_id
from daemon.agent.turns import TurnDone, TurnEvent, TurnFailed, TurnObserver, ignore
from daemon.chat.protocol import ErrorCode
from daemon.clock import Clock
from daemon.errors import ReverieError
from daemon.events import SessionBeforeSwitch, SessionShutdown, TurnFinished
from daemon.log import get_logger
from daemon.models.base import ModelError, ModelUnavailable, SpendCapReached
from daemon.paths import Home
from daemon.records import TurnEnd, TurnStatus
from daemon.store.db import Database
from daemon.store.errors import free_bytes, storage_failure, unless_storage_refuses

log = get_logger("trunk")

TRUNK_KEY = "trunk_session"
# Space comes back when a person frees it: a kept turn tries the disk again this often at
# most, however long the model's backoff has grown.
STORAGE_RETRY_MAX_S = 30.0
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


@dataclass(frozen=True, kw_only=True)
class WaitingForModel:
    """The trunk's model is unreachable: queued messages are kept and retried on a backoff."""

    since: datetime
    error: str
    attempts: int
    last_attempt: datetime
    next_retry: datetime

    def describe(self, *, queued: int) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "error": self.error,
            "attempts": self.attempts,
            "last_attempt": self.last_attempt.isoformat(),
            "next_retry": self.next_retry.isoformat(),
            "queued": queued,
        }


@dataclass(frozen=True, kw_only=True)
class StorageDown:
    """The home's storage refuses writes (disk full, read-only): new messages are refused and
    the kept ones are retried until a turn gets through."""

    since: datetime
    error: str
    attempts: int
    next_retry: datetime

    def describe(self, *, queued: int, free: int | None) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "error": self.error,
            "attempts": self.attempts,
            "next_retry": self.next_retry.isoformat(),
            "queued": queued,
            "free_bytes": free,
        }


@dataclass(frozen=True, kw_only=True)
class Kept:
    """Why a turn did not finish and its message stays queued: the model gave no whole reply
    (`storage` False) or the home's storage refused a write (`storage` True)."""

    reason: str
    storage: bool = False


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
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.inbox = Inbox(home.inbox_file, clock)
        self.session: Session | None = None
        self._observers: dict[str, TurnObserver] = {}
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
        # Set while the model stays unreachable; cleared by the next turn that reaches it.
        self.waiting_for_model: WaitingForModel | None = None
        # Turns whose listener has been told about the current outage (told once each).
        self._told_waiting: set[str] = set()
        # The backoff being slept out: a message arriving during an outage cancels it, to try
        # the model now rather than at the end of a backoff that may have grown to minutes.
        self._backoff: anyio.CancelScope | None = None
        # Set while the home's storage refuses writes; cleared by the next turn that lands.
        self.storage_down: StorageDown | None = None
        self._told_storage: set[str] = set()

    async def __aenter__(self) -> Trunk:
        row = await self.db.fetchone("SELECT value FROM kv WHERE key = ?", (TRUNK_KEY,))
        now = self.clock.now()
        session_id = (
            json.loads(row[0])
            if row
            else (self._newest_transcript() or new_session_id("trunk", now))
        )
        self.session = await self._open(session_id)
        intent = await self._kv_get(SWITCH_KEY)
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
            await self._kv_delete(SWITCH_KEY)  # the switch had finished; only the note was left
        await self._kv_set(TRUNK_KEY, self.session.id)
        await self.db.execute(
            "UPDATE sessions SET ended_at = NULL WHERE id = ?", (self.session.id,)
        )
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

    # -- small persistent notes --------------------------------------------------------------

    async def _kv_get(self, key: str) -> Any:
        row = await self.db.fetchone("SELECT value FROM kv WHERE key = ?", (key,))
        return json.loads(row[0]) if row else None

    async def _kv_set(self, key: str, value: Any) -> None:
        await self.db.write(
            "INSERT INTO kv(key, value, updated_at) VALUES (?,?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value, updated_at=excluded.updated_at",
            (key, json.dumps(value), self.clock.now().isoformat()),
        )

    async def _kv_delete(self, key: str) -> None:
        await self.db.execute("DELETE FROM kv WHERE key = ?", (key,))

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
                await self.db.write(
                    "UPDATE sessions SET ended_at = ? WHERE id = ?",
                    (self.clock.now().isoformat(), session.id),
                )
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
            await self._kv_set(
                SWITCH_KEY,
                {
                    "from": old.id,
                    "to": new_id,
                    "reason": reason,
                    "ts": self.clock.now().isoformat(),
                },
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
        await self._kv_delete(SWITCH_KEY)
        return False

    async def _complete_switch(self, new_id: str, reason: str) -> None:
        """Open `new_id` linked to the current session, make it the trunk, forget the old one's state."""
        assert self.session is not None
        old = self.session
        new = await self._open(new_id, header={"continues": old.id, "reason": reason})
        await self.db.execute(
            "UPDATE sessions SET previous_id = ?, switch_reason = ? WHERE id = ?",
            (old.id, reason, new_id),
        )
        await self._kv_set(TRUNK_KEY, new_id)
        await self._kv_delete(SWITCH_KEY)
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
            self._observers[entry.id] = observer
        self._retry_early()
        return Accepted(turn_id=entry.id, queued=len(self.inbox.pending()) - 1)

    def attach(self, turn_id: str, observer: TurnObserver) -> None:
        self._observers[turn_id] = observer

    def detach(self, observer: TurnObserver) -> None:
        for key in [k for k, v in self._observers.items() if v is observer]:
            del self._observers[key]

    async def cancel(self, turn_id: str | None = None) -> bool:
        """Cancel the running turn (or a queued one by id); return whether anything was cancelled."""
        if self._current and (turn_id is None or turn_id == self._current[0]):
            self._cancelled.add(self._current[0])
            self._current[1].cancel()
            return True
        if turn_id and self.inbox.remove(turn_id):
            await self.inbox.done(turn_id, status=TurnStatus.CANCELLED)
            self._report(
                TurnFailed(
                    turn_id=turn_id, code=ErrorCode.CANCELLED, message="cancelled before it started"
                )
            )
            self._observers.pop(turn_id, None)
            self._told_waiting.discard(turn_id)
            self._told_storage.discard(turn_id)
            return True
        return False

    def _report(self, event: TurnEvent) -> None:
        self._observers.get(event.turn_id, ignore)(event)

    def tell_if_waiting(self, turn_id: str) -> bool:
        """Tell a just-accepted turn's listener that the model is down, if it is; return whether told.

        Called once `accepted` has gone out, so the listener hears the outage right after it:
        the message stays queued (and on disk) and is answered once the model is back.
        """
        if self.waiting_for_model is None or turn_id in self._told_waiting:
            return False
        if turn_id not in self._observers or all(e.id != turn_id for e in self.inbox.pending()):
            return False
        self._told_waiting.add(turn_id)
        self._report(
            TurnFailed(
                turn_id=turn_id,
                code=ErrorCode.MODEL_UNAVAILABLE,
                message=self._waiting_message(turn_id),
            )
        )
        return True

    def _waiting_message(self, turn_id: str) -> str:
        waiting = self.waiting_for_model
        assert waiting is not None
        pending = [e.id for e in self.inbox.pending()]
        ahead = pending.index(turn_id) if turn_id in pending else 0
        place = f"; {ahead} message{'s' if ahead != 1 else ''} ahead of it" if ahead else ""
        if waiting.next_retry <= self.clock.now() + timedelta(seconds=self.retry_base_s):
            retry = "; trying it again now"
        else:
            retry = f"; next try at {waiting.next_retry:%H:%M:%S %Z}"
        return (
            f"the model is not answering ({waiting.error}) since {waiting.since:%H:%M:%S %Z}, "
            f"{waiting.attempts} attempt{'s' if waiting.attempts != 1 else ''} so far — your message is saved "
            f"and will be answered when the model is back{place}{retry}"
        )

    def _tell_all_waiting(self) -> None:
        """Tell every queued turn's listener not yet told about this outage."""
        for entry in self.inbox.pending():
            self.tell_if_waiting(entry.id)

    def _backoff_s(self, attempts: int, ceiling: float | None = None) -> float:
        """The wait after failed attempt `attempts` of a kept turn: doubling, up to a ceiling."""
        top = self.retry_max_s if ceiling is None else min(self.retry_max_s, ceiling)
        return min(top, self.retry_base_s * (2 ** (attempts - 1)))

    def _model_unreachable(self, error: str) -> float:
        """Record a failed attempt; return the backoff before the next (doubling per attempt)."""
        now = self.clock.now()
        previous = self.waiting_for_model
        attempts = previous.attempts + 1 if previous is not None else 1
        retry_in_s = self._backoff_s(attempts)
        next_retry = now + timedelta(seconds=retry_in_s)
        if previous is None:
            self.waiting_for_model = WaitingForModel(
                since=now, error=error, attempts=1, last_attempt=now, next_retry=next_retry
            )
            log.warning(
                "trunk waiting for the model; messages stay queued",
                error=error,
                retry_in_s=retry_in_s,
            )
        else:
            self.waiting_for_model = replace(
                previous,
                error=error,
                attempts=previous.attempts + 1,
                last_attempt=now,
                next_retry=next_retry,
            )
        self._tell_all_waiting()
        return retry_in_s

    def _storage_refused(self, error: str) -> float:
        """Record a turn stopped by storage; tell every queued listener once; return the wait."""
        now = self.clock.now()
        previous = self.storage_down
        attempts = previous.attempts + 1 if previous is not None else 1
        retry_in_s = self._backoff_s(attempts, ceiling=STORAGE_RETRY_MAX_S)
        self.storage_down = StorageDown(
            since=previous.since if previous is not None else now,
            error=error,
            attempts=attempts,
            next_retry=now + timedelta(seconds=retry_in_s),
        )
        if previous is None:
            log.error(
                "storage refuses writes; new messages are refused, kept ones wait",
                error=error,
                free_bytes=free_bytes(self.home.root),
            )
        for entry in self.inbox.pending():
            if entry.id in self._observers and entry.id not in self._told_storage:
                self._told_storage.add(entry.id)
                self._report(
                    TurnFailed(
                        turn_id=entry.id,
                        code=ErrorCode.STORAGE,
                        message=(
                            f"storage refuses writes ({error}) — your message is saved and will "
                            "be answered when space is back"
                        ),
                    )
                )
        return retry_in_s

    def refusal(self) -> str | None:
        """Why a new message cannot be taken now (storage refuses writes), or None."""
        down = self.storage_down
        if down is None:
            return None
        if not self.inbox.pending():
            # No kept message is left to try the disk again (the person cancelled it): let the
            # next message's own write be the test, refused there if the disk is still full.
            self.storage_down = None
            return None
        return (
            f"storage refuses writes since {down.since:%H:%M:%S %Z} ({down.error}); "
            "not taking new messages until space is back — nothing already accepted is lost"
        )

    def _storage_back(self) -> None:
        if self.storage_down is not None:
            log.info(
                "storage accepts writes again; answering kept messages",
                since=self.storage_down.since.isoformat(),
                attempts=self.storage_down.attempts,
            )
        self.storage_down = None
        self._told_storage.clear()

    def _retry_early(self) -> None:
        """Cut the backoff short for a new message: try again now, or `retry_base_s` after the
        last attempt when that was only just now (a burst of messages never hammers the API,
        and a message sent right after a failed try is not left behind the whole backoff)."""
        waiting = self.waiting_for_model
        if waiting is None or self._backoff is None or self._backoff.cancel_called:
            return
        at = max(self.clock.now(), waiting.last_attempt + timedelta(seconds=self.retry_base_s))
        if waiting.next_retry <= at:
            return
        self.waiting_for_model = replace(waiting, next_retry=at)
        self._backoff.cancel()

    async def _wait_to_retry(self, delay: float) -> None:
        """Sleep out the backoff, or less when `_retry_early` asks (cancellable)."""
        with anyio.CancelScope() as self._backoff:
            await self.clock.sleep(delay)
        self._backoff = None
        waiting = self.waiting_for_model
        if waiting is not None:
            # Cut short right after an attempt: the rest of `retry_base_s`, then the try.
            left = (waiting.next_retry - self.clock.now()).total_seconds()
            if 0 < left <= self.retry_base_s:
                await self.clock.sleep(left)

    def _model_reached(self) -> None:
        if self.waiting_for_model is not None:
            w = self.waiting_for_model
            log.info(
                "the model is reachable again; answering queued messages",
                since=w.since.isoformat(),
                attempts=w.attempts,
            )
        self.waiting_for_model = None
        self._told_waiting.clear()

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
            # The backoff follows the outage's own attempt count, so a turn cancelled during
            # it does not restart the doubling while status still counts on.
            if kept.storage:
                delay = self._storage_refused(kept.reason)
            else:
                delay = self._model_unreachable(kept.reason)
            log.warning(
                "turn kept for a retry",
                turn_id=entry.id,
                reason=kept.reason,
                storage=kept.storage,
                retry_in_s=delay,
            )
            await self._wait_to_retry(delay)

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
            await self._finish(entry, TurnStatus(ended))
            return None
        scope = anyio.CancelScope()
        self._current = (entry.id, scope)
        self._idle = anyio.Event()
        try:
            result, error, kept = await self._attempt(entry, session, scope)
        finally:
            self._current = None
        if scope.cancelled_caught or entry.id in self._cancelled:
            self._cancelled.discard(entry.id)
            observer = self._observers.get(entry.id, ignore)
            await self._finish(entry, TurnStatus.CANCELLED)
            observer(
                TurnFailed(turn_id=entry.id, code=ErrorCode.CANCELLED, message="turn cancelled")
            )
            return None
        if kept is not None:
            return kept  # `serve` tells every listener waiting on a queued turn, then backs off
        self._storage_back()
        if error is None or error[0] is ErrorCode.MODEL_ERROR:
            self._model_reached()  # the model answered (even with an error): it is reachable
        if error is not None:
            await self._failed(entry, session, error)
            return None
        assert result is not None
        await self._answered(entry, session, result)
        return None

    async def _attempt(
        self, entry: InboxEntry, session: Session, scope: anyio.CancelScope
    ) -> tuple[TurnResult | None, tuple[ErrorCode, str] | None, Kept | None]:
        """Run the turn once: its result, or the error that failed it, or why it is kept."""
        try:
            with scope:
                with anyio.fail_after(self.turn_timeout_s):
                    result = await self.loop.run_turn(
                        session,
                        turn_id=entry.id,
                        prompt=entry.text,
                        observer=self._report,
                        ts=entry.ts.isoformat(),
                    )
                    return result, None, None
        except TimeoutError:
            if self.loop.cut_in_model_call:
                limit = f"no whole reply within the {self.turn_timeout_s:.0f}s turn limit"
                return None, None, Kept(reason=limit)
            stopped = f"the turn took longer than {self.turn_timeout_s:.0f}s and was stopped"
            return None, (ErrorCode.TIMEOUT, stopped), None
        except ContextFailed as exc:
            return None, (ErrorCode.CONTEXT_FAILED, str(exc)), None
        except SpendCapReached as exc:
            return None, (ErrorCode.SPEND_CAP, str(exc)), None
        except ModelUnavailable as exc:
            return None, None, Kept(reason=str(exc) or type(exc).__name__)
        except ModelError as exc:
            if exc.retryable:
                return None, None, Kept(reason=str(exc))
            return None, (ErrorCode.MODEL_ERROR, str(exc)), None
        except Exception as exc:
            storage = storage_failure(exc)
            if storage is not None:
                return None, None, Kept(reason=storage, storage=True)
            log.exception("turn stopped by an internal error", turn_id=entry.id)
            return (
                None,
                (ErrorCode.INTERNAL, f"an internal error stopped this turn ({exc!r})"),
                None,
            )
        # The scope was cancelled (the person's cancel): nothing ran to an end.
        return None, None, None

    async def _failed(
        self, entry: InboxEntry, session: Session, error: tuple[ErrorCode, str]
    ) -> None:
        """Record a failed turn (the loop recorded a context failure itself) and tell the person."""
        log.warning("turn failed", turn_id=entry.id, code=str(error[0]), error=error[1])
        failed = TurnFailed(turn_id=entry.id, code=error[0], message=error[1])
        observer = self._observers.get(entry.id, ignore)
        if error[0] is not ErrorCode.CONTEXT_FAILED:
            with unless_storage_refuses(log, "turn end not recorded", turn_id=entry.id):
                await session.record(
                    TurnEnd(
                        turn_id=entry.id,
                        status=TurnStatus.FAILED,
                        error=error[1],
                        ts=self.clock.now().isoformat(),
                    )
                )
        await self._finish(entry, TurnStatus.FAILED)
        observer(failed)

    async def _answered(self, entry: InboxEntry, session: Session, result: TurnResult) -> None:
        """An answered turn: the inbox hears first, then the person, the report, the bus."""
        # The inbox hears first, so a listener told "done" never sees the message answered again.
        observer = self._observers.get(entry.id, ignore)
        await self._finish(entry, TurnStatus.ANSWERED)
        if result.vetoed:
            observer(TurnFailed(turn_id=entry.id, code=ErrorCode.VETOED, message=result.vetoed))
        else:
            observer(
                TurnDone(
                    turn_id=entry.id,
                    text=result.text,
                    stop_reason=result.stop_reason,
                    usage=result.usage.__dict__,
                )
            )
        self.last_result = result
        self.turns_answered += 1
        if result.report:
            # An explanation of the turn, not the turn: the reply stands without it.
            with unless_storage_refuses(log, "turn report not stored", turn_id=entry.id):
                await self.db.write(
                    "INSERT OR REPLACE INTO turn_reports(turn_id, session_id, ts, context_tokens, report) VALUES (?,?,?,?,?)",
                    (
                        entry.id,
                        session.id,
                        self.clock.now().isoformat(),
                        int(result.report.get("total_tokens", 0)),
                        json.dumps(result.report),
                    ),
                )
        # Delivered beside the next turn, so a message sent right after a reply does not wait.
        await self.loop.bus.publish(
            TurnFinished(
                session_id=session.id,
                turn_id=entry.id,
                stop_reason=result.stop_reason,
                context_tokens=result.context_tokens,
                vetoed=bool(result.vetoed),
            )
        )

    async def _finish(self, entry: InboxEntry, status: TurnStatus) -> None:
        """Mark the entry handled in the inbox (shielded: it is on disk before anyone is told).

        When storage refuses the `done` record the turn's own end in the transcript still
        stands, and a restart reads it there rather than answering the message twice.
        """
        with unless_storage_refuses(
            log, "inbox could not record a finished turn", turn_id=entry.id
        ):
            await self.inbox.done(entry.id, status)
        self.inbox.pop(entry.id)
        self._observers.pop(entry.id, None)
        self._told_waiting.discard(entry.id)
        self._told_storage.discard(entry.id)
