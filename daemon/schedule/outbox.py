"""The outbox: what the agent has to tell its person, kept durably until it reaches them.

A notice is a row of the `notices` table (migration 0011). `post` is idempotent by `key`:
posting a key twice returns the first notice and creates nothing, which is what makes a
schedule's firing tell the person once across a crash (the firing posts with
``fire:<schedule_id>:<due ISO>``; a retry after the crash finds that notice).

A new notice publishes `NoticePosted`; the chat side pushes it to the person's connected
clients at once and marks it delivered only once a client that shows notices answers `seen`
(`daemon.schedule.courier`). What nobody was shown stays pending and opens the next chat. `acknowledge` is the person saying they saw it
(`reverie notices --ack`); an acknowledged notice is never pushed again.

`write_notice` is the same insert on a synchronous connection, for a caller that writes its
own record in the same transaction (then `Outbox.announce` publishes what it created).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.events import NoticePosted
from daemon.log import get_logger
from daemon.store.db import Database

log = get_logger("outbox")

NOTICE_KINDS = frozenset({"reminder", "task", "greeting", "checklist", "system"})
SOURCES = frozenset({"agent", "person", "system"})
# A notice is read by a person on a terminal or a desktop pop-up: long text is cut, not lost
# (the task's full result stays in its transcript).
TEXT_MAX_CHARS = 4000

_COLUMNS = (
    "id, key, kind, text, source, created_at, due_at, late_s, schedule_id,"
    " delivered_at, acknowledged_at"
)


class NoticeError(ValueError):
    """A notice cannot be posted as asked; the message says why."""


@dataclass(frozen=True, kw_only=True)
class Notice:
    id: str
    key: str
    kind: str
    text: str
    source: str
    created_at: datetime
    due_at: datetime | None = None
    late_s: float = 0.0
    schedule_id: str | None = None
    delivered_at: datetime | None = None
    acknowledged_at: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.delivered_at is None and self.acknowledged_at is None


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _notice(row: Any) -> Notice:
    created = _when(row["created_at"])
    assert created is not None
    return Notice(
        id=row["id"],
        key=row["key"],
        kind=row["kind"],
        text=row["text"],
        source=row["source"],
        created_at=created,
        due_at=_when(row["due_at"]),
        late_s=float(row["late_s"] or 0.0),
        schedule_id=row["schedule_id"],
        delivered_at=_when(row["delivered_at"]),
        acknowledged_at=_when(row["acknowledged_at"]),
    )


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


def write_notice(
    conn: sqlite3.Connection,
    *,
    now: datetime,
    kind: str,
    text: str,
    key: str,
    source: str = "agent",
    due_at: datetime | None = None,
    late_s: float = 0.0,
    schedule_id: str | None = None,
) -> tuple[Notice, bool]:
    """Insert a notice unless its key exists; return (the key's notice, whether it is new).

    Runs on the caller's connection and transaction: a firing writes its fire record and its
    notice together, so a crash leaves both or neither.
    """
    text = _checked(kind, text, key, source, late_s)
    cur = conn.execute(
        f"INSERT INTO notices({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)"
        " ON CONFLICT(key) DO NOTHING",
        (
            "n-" + uuid.uuid4().hex[:12],
            key,
            kind,
            text,
            source,
            now.isoformat(),
            due_at.isoformat() if due_at is not None else None,
            float(late_s),
            schedule_id,
        ),
    )
    created = cur.rowcount == 1
    row = conn.execute(f"SELECT {_COLUMNS} FROM notices WHERE key = ?", (key,)).fetchone()
    return _notice(row), created


class Outbox:
    """The durable outbox of notices for the person (see the module's docstring).

    Every call is one short statement or transaction on the database thread; cancelling a
    caller leaves the table as the last committed statement left it.
    """

    def __init__(self, db: Database, *, bus: EventBus, clock: Clock) -> None:
        self.db = db
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
        now = self.clock.now()

        def insert(conn: sqlite3.Connection) -> tuple[Notice, bool]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = write_notice(
                    conn,
                    now=now,
                    kind=kind,
                    text=text,
                    key=key,
                    source=source,
                    due_at=due_at,
                    late_s=late_s,
                    schedule_id=schedule_id,
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return out

        notice, created = await self.db.run(insert)
        if created:
            log.info("notice posted", notice=notice.id, kind=kind, key=key)
            await self.announce(notice)
        return notice

    async def announce(self, notice: Notice) -> None:
        """Publish `NoticePosted` for a notice written with `write_notice`."""
        await self.bus.publish(
            NoticePosted(
                notice_id=notice.id,
                kind=notice.kind,
                text=notice.text,
                created_at=notice.created_at,
            )
        )

    async def get(self, notice_id: str) -> Notice | None:
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM notices WHERE id = ?", (notice_id,))
        return _notice(row) if row is not None else None

    async def by_key(self, key: str) -> Notice | None:
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM notices WHERE key = ?", (key,))
        return _notice(row) if row is not None else None

    async def pending(self) -> list[Notice]:
        """Notices no client has received yet (and the person has not acknowledged), oldest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM notices"
            " WHERE delivered_at IS NULL AND acknowledged_at IS NULL ORDER BY created_at, rowid"
        )
        return [_notice(r) for r in rows]

    async def unacknowledged(self) -> list[Notice]:
        """Notices the person has not acknowledged (delivered or not), oldest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM notices WHERE acknowledged_at IS NULL"
            " ORDER BY created_at, rowid"
        )
        return [_notice(r) for r in rows]

    async def recent(self, limit: int = 50) -> list[Notice]:
        """The newest `limit` notices, whatever their state, oldest of them first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM notices ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (max(0, int(limit)),),
        )
        return [_notice(r) for r in reversed(rows)]

    async def delivered(self, ids: Iterable[str]) -> int:
        """Mark notices delivered (a client showed them); return how many changed."""
        return await self._stamp("delivered_at", ids)

    async def acknowledge(self, ids: Iterable[str]) -> int:
        """Mark notices acknowledged by the person; return how many changed."""
        return await self._stamp("acknowledged_at", ids)

    async def _stamp(self, column: str, ids: Iterable[str]) -> int:
        wanted = sorted(set(ids))
        if not wanted:
            return 0
        now = self.clock.now().isoformat()
        marks = ", ".join("?" for _ in wanted)

        def stamp(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                f"UPDATE notices SET {column} = ? WHERE {column} IS NULL AND id IN ({marks})",
                (now, *wanted),
            )
            return int(cur.rowcount)

        return int(await self.db.run(stamp))
