"""The open threads kept in the store: opened and closed at each turn's end, expired at night.

`ThreadBook` reads a finished turn's messages (the person's prompt, the agent's replies) from
the messages table, closes the open threads the person's message says are done, and opens the
threads the turn started (`daemon.threads.detect`). Each thread keeps the message that opened
it and the one that closed it. During sleep's housekeeping it reads the person's messages
again for closings a turn's end missed (a crash between the reply and the hook), and expires
threads open longer than `[threads] expire_days` with a note saying so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo

from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.events import SleepHousekeeping, TurnFinished
from daemon.log import get_logger
from daemon.store.db import Database
from daemon.store.threads import Thread, ThreadsRepo
from daemon.threads.detect import (
    Found,
    answers_again,
    closed_by,
    mentions,
    only_done,
    plans,
    promises,
    unanswered,
)

log = get_logger("threads")


def thread_id(opened_by: str, kind: str, text: str) -> str:
    """A thread's id: the same message opening the same thread is the same thread."""
    digest = hashlib.sha256(f"{opened_by}\x1f{kind}\x1f{text}".encode()).hexdigest()
    return f"t-{digest[:12]}"


def _when(text: str) -> datetime:
    at = datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


class ThreadBook:
    """Open, close, list and expire threads (see the module docstring); one per daemon."""

    def __init__(self, db: Database, *, clock: Clock, zone: tzinfo, expire_days: int) -> None:
        self.db = db
        self.rows = ThreadsRepo(db)
        self.clock = clock
        self.zone = zone
        self.expire_days = expire_days

    # -- reading ---------------------------------------------------------------------------

    async def open_threads(self) -> list[Thread]:
        """The open threads, oldest first (those past their expiry excluded: the night expires them)."""
        cutoff = self.clock.now() - timedelta(days=self.expire_days)
        return [t for t in await self.rows.open_threads() if t.opened_at > cutoff]

    async def due(self) -> list[Thread]:
        """The open threads due today or before, in the person's zone, soonest first."""
        today = self.clock.now().astimezone(self.zone).date()
        found = [t for t in await self.open_threads() if t.is_due(today)]
        return sorted(found, key=lambda t: (t.due or today, t.opened_at))

    async def get(self, thread_id: str) -> Thread | None:
        return await self.rows.get(thread_id)

    # -- a turn's end ----------------------------------------------------------------------

    async def note_turn(self, session_id: str, turn_id: str) -> tuple[list[Thread], list[str]]:
        """Close what the turn's person's message says is done, then open what the turn started.

        Returns (opened, closed ids). A turn with no message of the person's changes nothing.
        """
        said = await self.rows.turn_messages(session_id, turn_id)
        asked = [(m.msg_id, m.ts, m.content) for m in said if m.role == "user"]
        replies = [(m.msg_id, m.ts, m.content) for m in said if m.role == "assistant"]
        if not asked:
            return [], []
        msg_id, ts, prompt = asked[-1]
        closed = await self.close_from(prompt, msg_id=msg_id, at=_when(ts), session_id=session_id)
        now = _when(ts)
        found: list[tuple[Found, str, str]] = []
        found += [(f, msg_id, ts) for f in plans(prompt, now, self.zone)]
        if replies:
            reply = "\n".join(c for _, _, c in replies)
            r_id, r_ts, _ = replies[-1]
            closed += await self._answered(prompt, reply, by=r_id, at=_when(r_ts))
            found += [(f, msg_id, ts) for f in unanswered(prompt, reply)]
            promised = promises(reply, _when(r_ts), self.zone, about=prompt)
            found += [(f, r_id, r_ts) for f in promised]
        opened = []
        for f, by, at in found:
            thread = await self.open(f, session_id=session_id, opened_by=by, at=_when(at))
            if thread is not None:
                opened.append(thread)
        if opened or closed:
            log.info("threads noted", turn=turn_id, opened=len(opened), closed=len(closed))
        return opened, closed

    async def open(
        self, found: Found, *, session_id: str, opened_by: str, at: datetime
    ) -> Thread | None:
        """Keep `found` as an open thread; None when an open one of its kind already says it."""
        for t in await self.open_threads():
            if (
                t.kind == found.kind
                and mentions(found.text, t.text)
                and mentions(t.text, found.text)
            ):
                return None
        thread = Thread(
            id=thread_id(opened_by, found.kind, found.text),
            kind=found.kind,
            text=found.text,
            session_id=session_id,
            opened_by=opened_by,
            opened_at=at,
            due=found.due,
        )
        await self.rows.add(thread)
        return thread

    async def close_from(
        self, message: str, *, msg_id: str, at: datetime, session_id: str
    ) -> list[str]:
        """Resolve the open threads opened before `at` that the person's `message` closes."""
        before = [t for t in await self.open_threads() if t.opened_at < at]
        if only_done(message):
            # A bare "done" closes the newest thread of this conversation, never another's.
            before = [t for t in before if t.session_id == session_id]
        ids = closed_by(message, [(t.id, t.text) for t in before])
        for tid in ids:
            await self.resolve(tid, by=msg_id, at=at, note="the person said it is done")
        return ids

    async def _answered(self, prompt: str, reply: str, *, by: str, at: datetime) -> list[str]:
        """Resolve the open questions asked again in `prompt` that `reply` answered."""
        asked = [t for t in await self.open_threads() if t.kind == "question" and t.opened_at < at]
        ids = [t.id for t in asked if answers_again(prompt, reply, t.text)]
        for tid in ids:
            await self.resolve(tid, by=by, at=at, note="answered when asked again")
        return ids

    async def resolve(self, thread_id: str, *, by: str | None, at: datetime, note: str) -> bool:
        """Mark an open thread resolved by message `by`; False when it was not open."""
        return await self.rows.close(thread_id, status="resolved", at=at, by=by, note=note)

    # -- the night -------------------------------------------------------------------------

    async def sweep(self) -> str | None:
        """Close what the person's later messages said is done, expire the old; say what changed."""
        closed = 0
        for thread in await self.rows.open_threads():
            for said in await self.rows.person_said_after(thread.opened_at):
                if closed_by(said.content, [(thread.id, thread.text)]) and mentions(
                    said.content, thread.text
                ):
                    if await self.resolve(
                        thread.id, by=said.msg_id, at=said.at, note="found done at night"
                    ):
                        closed += 1
                    break
        expired = await self.expire()
        if not closed and not expired:
            return None
        return f"threads: {closed} found done, {expired} expired after {self.expire_days} days"

    async def expire(self) -> int:
        """Expire the threads open longer than `expire_days`, each with a note; return how many."""
        now = self.clock.now()
        cutoff = now - timedelta(days=self.expire_days)
        old = [t for t in await self.rows.open_threads() if t.opened_at <= cutoff]
        for t in old:
            await self.rows.close(
                t.id,
                status="expired",
                at=now,
                by=None,
                note=f"expired: open {self.expire_days} days without being resolved"
                f" (opened {t.opened_at.date().isoformat()})",
            )
        return len(old)

    # -- the hooks -------------------------------------------------------------------------

    def register(self, bus: EventBus) -> Callable[[], None]:
        """Note each finished turn, and sweep during sleep's housekeeping; returns the undo."""

        async def on_turn(event: TurnFinished) -> None:
            if not event.vetoed:
                await self.note_turn(event.session_id, event.turn_id)

        async def on_housekeeping(event: SleepHousekeeping) -> str | None:
            return await self.sweep()

        undo = [
            bus.on(TurnFinished, on_turn, name="threads.note_turn"),
            bus.on(SleepHousekeeping, on_housekeeping, name="threads.sweep"),
        ]

        def unsubscribe() -> None:
            for u in undo:
                u()

        return unsubscribe
