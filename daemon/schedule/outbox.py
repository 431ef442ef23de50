"""The outbox: what the agent has to tell its person, kept durably until it reaches them.

A notice is a row of the `notices` table (migration 0011). `post` is idempotent by `key`:
posting a key twice returns the first notice and creates nothing, which is what makes a
schedule's firing tell the person once across a crash (the firing posts with
``fire:<schedule_id>:<due ISO>``; a retry after the crash finds that notice).

A new notice publishes `NoticePosted`; the chat side pushes it to the person's connected
clients at once and marks it delivered only once a client that shows notices answers `seen`
(`daemon.schedule.courier`). What nobody was shown stays pending and opens the next chat. `acknowledge` is the person saying they saw it
(`reverie notices --ack`); an acknowledged notice is never pushed again.

`new_notice` checks a notice for a caller that writes it in a transaction of its own (a
schedule's firing, through `daemon.store.schedules`); `Outbox.announce` then publishes what it
created.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.errors import ReverieError
from daemon.events import NoticePosted
from daemon.log import get_logger
from daemon.store.db import Database
from daemon.store.notices import NewNotice, Notice, NoticesRepo

log = get_logger("outbox")

NOTICE_KINDS = frozenset({"reminder", "task", "greeting", "checklist", "system"})
SOURCES = frozenset({"agent", "person", "system"})
# A notice is read by a person on a terminal or a desktop pop-up: long text is cut, not lost
# (the task's full result stays in its transcript).
TEXT_MAX_CHARS = 4000


class NoticeError(ReverieError, ValueError):
    """A notice cannot be posted as asked; the message says why."""


def _checked(kind: str, text: str, key: str, source: str, late_s: float) -> str:
    if kind not in NOTICE_KINDS:
        raise NoticeError(
            f"unknown notice kind {kind!r} (one of {', '.join(sorted(NOTICE_KINDS))})"
        )
    if source not in SOURCES:
        raise NoticeError(f"unknown notice source {source!r} (one of {', '.join(sorted(SOURCES))})")
    if not key.strip():
        raise NoticeError("a notice needs a key (what makes posting it twice harmless)")
    text = text.strip()
    if not text:
        raise NoticeError("a notice needs text")
    if late_s < 0:
        raise NoticeError(f"late_s must be >= 0, not {late_s}")
    if len(text) > TEXT_MAX_CHARS:
        text = text[: TEXT_MAX_CHARS - 1].rstrip() + "…"
    return text


def new_notice(
    *,
    now: datetime,
    kind: str,
    text: str,
    key: str,
    source: str = "agent",
    due_at: datetime | None = None,
    late_s: float = 0.0,
    schedule_id: str | None = None,
) -> NewNotice:
    """A notice to post, checked (raises `NoticeError`) and its text cut to `TEXT_MAX_CHARS`."""
    return NewNotice(
        key=key,
        kind=kind,
        text=_checked(kind, text, key, source, late_s),
        source=source,
        created_at=now,
        due_at=due_at,
        late_s=late_s,
        schedule_id=schedule_id,
    )


class Outbox:
    """The durable outbox of notices for the person (see the module's docstring).

    Every call is one short statement or transaction on the database thread; cancelling a
    caller leaves the table as the last committed statement left it.
    """

    def __init__(self, db: Database, *, bus: EventBus, clock: Clock) -> None:
        self.db = db
        self.rows = NoticesRepo(db)
        self.bus = bus
        self.clock = clock

    async def post(
        self,
        *,
        kind: str,
        text: str,
        key: str,
        source: str = "agent",
        due_at: datetime | None = None,
        late_s: float = 0.0,
        schedule_id: str | None = None,
    ) -> Notice:
        """Post a notice (idempotent by `key`); a new one is announced with `NoticePosted`."""
        new = new_notice(
            now=self.clock.now(),
            kind=kind,
            text=text,
            key=key,
            source=source,
            due_at=due_at,
            late_s=late_s,
            schedule_id=schedule_id,
        )
        notice, created = await self.rows.add(new)
        if created:
            log.info("notice posted", notice=notice.id, kind=kind, key=key)
            await self.announce(notice)
        return notice

    async def announce(self, notice: Notice) -> None:
        """Publish `NoticePosted` for a notice written elsewhere (a firing's, with `new_notice`)."""
        await self.bus.publish(
            NoticePosted(
                notice_id=notice.id,
                kind=notice.kind,
                text=notice.text,
                created_at=notice.created_at,
            )
        )

    async def get(self, notice_id: str) -> Notice | None:
        return await self.rows.get(notice_id)

    async def by_key(self, key: str) -> Notice | None:
        return await self.rows.by_key(key)

    async def pending(self) -> list[Notice]:
        """Notices no client has received yet (and the person has not acknowledged), oldest first."""
        return await self.rows.pending()

    async def unacknowledged(self) -> list[Notice]:
        """Notices the person has not acknowledged (delivered or not), oldest first."""
        return await self.rows.unacknowledged()

    async def recent(self, limit: int = 50) -> list[Notice]:
        """The newest `limit` notices, whatever their state, oldest of them first."""
        return await self.rows.newest(limit)

    async def delivered(self, ids: Iterable[str]) -> int:
        """Mark notices delivered (a client showed them); return how many changed."""
        return await self.rows.stamp("delivered_at", ids, self.clock.now())

    async def acknowledge(self, ids: Iterable[str]) -> int:
        """Mark notices acknowledged by the person; return how many changed."""
        return await self.rows.stamp("acknowledged_at", ids, self.clock.now())
