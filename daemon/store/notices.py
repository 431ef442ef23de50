"""The outbox's notices (`notices`, migration 0011): what the agent has to tell its person.

`insert_notice` runs on a synchronous connection inside the caller's transaction (a schedule's
firing writes its fire record and its notice together); `NoticesRepo` is the async rest.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from daemon.store.transactions import begin_write

if TYPE_CHECKING:
    from daemon.store.db import Database

_COLUMNS = (
    "id, key, kind, text, source, created_at, due_at, late_s, schedule_id,"
    " delivered_at, acknowledged_at"
)


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


@dataclass(frozen=True, kw_only=True)
class NewNotice:
    """A notice to post; its `key` makes posting it twice harmless."""

    key: str
    kind: str
    text: str
    source: str
    created_at: datetime
    due_at: datetime | None = None
    late_s: float = 0.0
    schedule_id: str | None = None


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


def insert_notice(conn: sqlite3.Connection, new: NewNotice) -> tuple[Notice, bool]:
    """Insert `new` unless its key exists; return (the key's notice, whether it is new).

    Runs on the caller's connection and transaction.
    """
    cur = conn.execute(
        f"INSERT INTO notices({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)"
        " ON CONFLICT(key) DO NOTHING",
        (
            "n-" + uuid.uuid4().hex[:12],
            new.key,
            new.kind,
            new.text,
            new.source,
            new.created_at.isoformat(),
            new.due_at.isoformat() if new.due_at is not None else None,
            float(new.late_s),
            new.schedule_id,
        ),
    )
    created = cur.rowcount == 1
    row = conn.execute(f"SELECT {_COLUMNS} FROM notices WHERE key = ?", (new.key,)).fetchone()
    return _notice(row), created


def _in_transaction(conn: sqlite3.Connection, new: NewNotice) -> tuple[Notice, bool]:
    begin_write(conn)
    try:
        out = insert_notice(conn, new)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return out


class NoticesRepo:
    """The `notices` table. Every call is one short statement or transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, new: NewNotice) -> tuple[Notice, bool]:
        """Insert `new` in a transaction of its own unless its key exists (see `insert_notice`)."""
        out: tuple[Notice, bool] = await self.db.run(_in_transaction, new)
        return out

    async def get(self, notice_id: str) -> Notice | None:
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM notices WHERE id = ?", (notice_id,))
        return _notice(row) if row is not None else None

    async def by_key(self, key: str) -> Notice | None:
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM notices WHERE key = ?", (key,))
        return _notice(row) if row is not None else None

    async def pending(self) -> list[Notice]:
        """Neither delivered nor acknowledged, oldest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM notices"
            " WHERE delivered_at IS NULL AND acknowledged_at IS NULL ORDER BY created_at, rowid"
        )
        return [_notice(r) for r in rows]

    async def unacknowledged(self) -> list[Notice]:
        """Not acknowledged (delivered or not), oldest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM notices WHERE acknowledged_at IS NULL"
            " ORDER BY created_at, rowid"
        )
        return [_notice(r) for r in rows]

    async def newest(self, limit: int) -> list[Notice]:
        """The newest `limit` notices, whatever their state, oldest of them first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM notices ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (max(0, int(limit)),),
        )
        return [_notice(r) for r in reversed(rows)]

    async def posted_since(self, key_prefix: str, since: datetime) -> bool:
        """Whether a notice whose key starts with `key_prefix` was posted after `since`."""
        row = await self.db.fetchone(
            "SELECT 1 FROM notices WHERE substr(key, 1, ?) = ? AND created_at > ? LIMIT 1",
            (len(key_prefix), key_prefix, since.astimezone(UTC).isoformat()),
        )
        return row is not None

    async def stamp(
        self,
        column: Literal["delivered_at", "acknowledged_at"],
        ids: Iterable[str],
        at: datetime,
    ) -> int:
        """Set `column` to `at` on the notices of `ids` where it is still empty; how many changed."""
        if column not in ("delivered_at", "acknowledged_at"):
            raise ValueError(f"not a notice's stamp: {column!r}")
        wanted = sorted(set(ids))
        if not wanted:
            return 0
        marks = ", ".join("?" for _ in wanted)
        sql = f"UPDATE notices SET {column} = ? WHERE {column} IS NULL AND id IN ({marks})"

        def stamp(conn: sqlite3.Connection) -> int:
            return int(conn.execute(sql, (at.isoformat(), *wanted)).rowcount)

        return int(await self.db.run(stamp))
