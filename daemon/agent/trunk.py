"""The trunk: the one long-lived session a person talks to, fed by the durable inbox.

Messages are answered one at a time, in arrival order. A turn can be cancelled; a turn
whose model stays unreachable is left pending and retried with backoff (the person is told,
nothing is lost); a message that arrives mid-turn waits its turn. Who is listening to a
turn (a chat connection) is a *sink* registered per turn; with no listener the turn still
runs and lands on disk.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from daemon.agent.inbox import Inbox, InboxEntry
from daemon.agent.loop import AgentLoop, Sink, TurnResult
from daemon.agent.session import Session, new_session_id
from daemon.clock import Clock
from daemon.events import SessionShutdown
from daemon.log import get_logger
from daemon.models.base import ModelError, ModelUnavailable, SpendCapReached
from daemon.paths import Home
from daemon.store.db import Database

log = get_logger("trunk")

TRUNK_KEY = "trunk_session"


def _noop(_frame: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class Accepted:
    turn_id: str
    queued: int


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
        after_turn: list[Callable[[str], Awaitable[Any]]] | None = None,
    ) -> None:
        self.home = home
        self.db = db
        self.loop = loop
        self.clock = clock
        self.turn_timeout_s = turn_timeout_s
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.after_turn = after_turn if after_turn is not None else []
        self.inbox = Inbox(home.inbox_file, clock)
        self.session: Session | None = None
        self._sinks: dict[str, Sink] = {}
        self._current: tuple[str, anyio.CancelScope] | None = None
        self._cancelled: set[str] = set()
        self.last_result: TurnResult | None = None
        self.turns_answered = 0
        self._shutdown_fired = False
        self._idle = anyio.Event()
        self._idle.set()
        self._background: TaskGroup | None = None

    async def __aenter__(self) -> Trunk:
        row = await self.db.fetchone("SELECT value FROM kv WHERE key = ?", (TRUNK_KEY,))
        now = self.clock.now()
        session_id = json.loads(row[0]) if row else new_session_id("trunk", now)
        self.session = await Session.open(db=self.db, directory=self.home.trunk_dir, session_id=session_id, kind="trunk", now=now)
        await self.db.execute(
            "INSERT INTO kv(key, value, updated_at) VALUES (?,?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value, updated_at=excluded.updated_at",
            (TRUNK_KEY, json.dumps(session_id), now.isoformat()),
        )
        await self.db.execute("UPDATE sessions SET ended_at = NULL WHERE id = ?", (session_id,))
        pending = self.inbox.load()
        if pending:
            log.info("answering messages left pending before restart", count=len(pending))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown("shutdown")

    async def shutdown(self, reason: str) -> None:
        """Fire `session_shutdown` once (shielded; each handler is bounded by its timeout)."""
        if self._shutdown_fired or self.session is None:
            return
        self._shutdown_fired = True
        with anyio.CancelScope(shield=True):
            await self.db.execute(
                "UPDATE sessions SET ended_at = ? WHERE id = ?", (self.clock.now().isoformat(), self.session.id)
            )
            await self.loop.bus.publish(
                SessionShutdown(session_id=self.session.id, transcript_path=str(self.session.path), reason=reason)
            )

    @property
    def busy(self) -> bool:
        return self._current is not None

    async def wait_idle(self) -> None:
        """Return once no turn is running (immediately when idle)."""
        await self._idle.wait()

    @property
    def current_turn(self) -> str | None:
        return self._current[0] if self._current else None

    async def submit(self, text: str, *, sink: Sink | None = None, client_msg_id: str | None = None, origin: str = "person") -> Accepted:
        """Durably queue a message; return once it is on disk (then `accepted` may be sent)."""
        entry = await self.inbox.put(text, origin=origin, client_msg_id=client_msg_id)
        if sink is not None:
            self._sinks[entry.id] = sink
        return Accepted(turn_id=entry.id, queued=len(self.inbox.pending()) - 1)

    def attach(self, turn_id: str, sink: Sink) -> None:
        self._sinks[turn_id] = sink

    def detach_sink(self, sink: Sink) -> None:
        for key in [k for k, v in self._sinks.items() if v is sink]:
            del self._sinks[key]

    async def cancel(self, turn_id: str | None = None) -> bool:
        """Cancel the running turn (or a queued one by id); return whether anything was cancelled."""
        if self._current and (turn_id is None or turn_id == self._current[0]):
            self._cancelled.add(self._current[0])
            self._current[1].cancel()
            return True
        if turn_id and self.inbox.remove(turn_id):
            await self.inbox.done(turn_id, status="cancelled")
            self._sink(turn_id)({"type": "error", "code": "cancelled", "message": "cancelled before it started", "turn_id": turn_id})
            self._sinks.pop(turn_id, None)
            return True
        return False

    def _sink(self, turn_id: str) -> Sink:
        sink = self._sinks.get(turn_id)
        return sink if sink is not None else _noop

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Answer inbox messages forever. Cancellation stops after the current turn's cleanup.

        After-turn work (indexing the turn for memory) runs beside the next turn, in this
        service's own task group, so a message sent right after a reply does not wait for it.
        """
        async with anyio.create_task_group() as background:
            self._background = background
            task_status.started()
            attempt = 0
            while True:
                entry = await self.inbox.next()
                ok = await self._answer(entry)
                if ok:
                    attempt = 0
                    continue
                attempt += 1
                delay = min(self.retry_max_s, self.retry_base_s * (2 ** (attempt - 1)))
                log.warning("model unavailable; message stays queued", turn_id=entry.id, retry_in_s=delay)
                await self.clock.sleep(delay)

    async def _after_turn(self, session_id: str) -> None:
        for hook in self.after_turn:
            try:
                await hook(session_id)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.warning("after-turn hook failed", error=repr(exc))

    async def _answer(self, entry: InboxEntry) -> bool:
        """Run one queued message; False when it must be retried later."""
        assert self.session is not None
        sink = self._sink(entry.id)
        scope = anyio.CancelScope()
        self._current = (entry.id, scope)
        self._idle = anyio.Event()
        result: TurnResult | None = None
        error: tuple[str, str] | None = None
        retry = False
        try:
            with scope:
                with anyio.fail_after(self.turn_timeout_s):
                    result = await self.loop.run_turn(
                        self.session, turn_id=entry.id, prompt=entry.text, sink=lambda f: self._sink(entry.id)(f), ts=entry.ts.isoformat()
                    )
        except TimeoutError:
            error = ("timeout", f"the turn took longer than {self.turn_timeout_s:.0f}s and was stopped")
        except SpendCapReached as exc:
            error = ("spend_cap", str(exc))
        except ModelUnavailable as exc:
            error = ("model_unavailable", f"{exc} — your message is saved and will be answered when the model is reachable")
            retry = True
        except ModelError as exc:
            error = ("model_error", str(exc))
        finally:
            self._current = None
            self._idle.set()
        sink = self._sink(entry.id)
        if scope.cancelled_caught or entry.id in self._cancelled:
            self._cancelled.discard(entry.id)
            sink({"type": "error", "code": "cancelled", "message": "turn cancelled", "turn_id": entry.id})
            await self._finish(entry, "cancelled")
            return True
        if error is not None:
            sink({"type": "error", "code": error[0], "message": error[1], "turn_id": entry.id})
            if retry:
                return False
            await self.session.record({"type": "turn_end", "turn_id": entry.id, "status": "failed", "error": error[1], "ts": self.clock.now().isoformat()})
            await self._finish(entry, "failed")
            return True
        assert result is not None
        if result.vetoed:
            sink({"type": "error", "code": "vetoed", "message": result.vetoed, "turn_id": entry.id})
        else:
            sink(
                {
                    "type": "done",
                    "turn_id": entry.id,
                    "text": result.text,
                    "stop_reason": result.stop_reason,
                    "usage": result.usage.__dict__,
                }
            )
        self.last_result = result
        self.turns_answered += 1
        if result.report:
            await self.db.execute(
                "INSERT OR REPLACE INTO turn_reports(turn_id, session_id, ts, context_tokens, report) VALUES (?,?,?,?,?)",
                (entry.id, self.session.id, self.clock.now().isoformat(), int(result.report.get("total_tokens", 0)), json.dumps(result.report)),
            )
        await self._finish(entry, "answered")
        if self._background is not None:
            self._background.start_soon(self._after_turn, self.session.id)
        else:
            await self._after_turn(self.session.id)
        return True

    async def _finish(self, entry: InboxEntry, status: str) -> None:
        await self.inbox.done(entry.id, status)
        self.inbox.pop(entry.id)
        self._sinks.pop(entry.id, None)
