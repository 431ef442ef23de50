"""The schedules the agent keeps (`schedules`, migration 0012) and their firings (`schedule_fires`).

Times are stored as `iso()` gives them: UTC, whole seconds, so keys and ordering are stable. A
schedule's row comes back as `ScheduleRow`, its times in that stored form: the schedule system
reads them (`daemon.schedule.store.schedule_from_row`), and a row it cannot read is set aside
there rather than holding the timer in the past. A firing's writes — the fire record, its
notice, the schedule's next due time — go in one transaction (`commit_fire`, `finish_fire`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemon.store.notices import NewNotice, Notice, insert_notice
from daemon.store.transactions import begin_write

if TYPE_CHECKING:
    from daemon.store.db import Database

_COLUMNS = (
    "id, kind, text, phrase, rule, next_due, status, requested_by, session_id, created_at,"
    " updated_at, fired_count, last_fired_at"
)
_FIRE_COLUMNS = (
    "schedule_id, due_at, fired_at, late_s, catch_up, status, notice_id, result, finished_at,"
    " noted_at"
)


def iso(when: datetime) -> str:
    """The stored form of an instant: UTC, whole seconds (so keys and ordering are stable)."""
    return when.astimezone(UTC).replace(microsecond=0).isoformat()


def _iso_or_none(when: datetime | None) -> str | None:
    return iso(when) if when is not None else None


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@dataclass(frozen=True, kw_only=True)
class ScheduleRow:
    """A `schedules` row as stored (times in `iso()` form, the rule as its JSON)."""

    id: str
    kind: str
    text: str
    phrase: str
    rule: str | None
    next_due: str | None
    status: str
    requested_by: str
    session_id: str | None
    created_at: str
    updated_at: str
    fired_count: int = 0
    last_fired_at: str | None = None


def _schedule(row: Any) -> ScheduleRow:
    return ScheduleRow(
        id=row["id"],
        kind=row["kind"],
        text=row["text"],
        phrase=row["phrase"],
        rule=row["rule"] or None,
        next_due=row["next_due"],
        status=row["status"],
        requested_by=row["requested_by"],
        session_id=row["session_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        fired_count=int(row["fired_count"] or 0),
        last_fired_at=row["last_fired_at"],
    )


@dataclass(frozen=True, kw_only=True)
class Fire:
    """One firing of a schedule, for the due time it answered."""

    schedule_id: str
    due_at: datetime
    fired_at: datetime
    late_s: float
    catch_up: bool
    status: str
    notice_id: str | None = None
    result: str | None = None
    finished_at: datetime | None = None
    noted_at: datetime | None = None


def _fire(row: Any) -> Fire:
    due, fired = _when(row["due_at"]), _when(row["fired_at"])
    assert due is not None and fired is not None
    return Fire(
        schedule_id=row["schedule_id"],
        due_at=due,
        fired_at=fired,
        late_s=float(row["late_s"] or 0.0),
        catch_up=bool(row["catch_up"]),
        status=row["status"],
        notice_id=row["notice_id"],
        result=row["result"],
        finished_at=_when(row["finished_at"]),
        noted_at=_when(row["noted_at"]),
    )


@dataclass(frozen=True, kw_only=True)
class Firing:
    """What one firing writes: its record, its notice (if any), the schedule's move.

    `stored` is the schedule's `next_due` as read: the move is conditional on it, so a firing
    repeated after a crash moves nothing twice. `following` is the next occurrence (None: a
    one-off, which becomes `done`).
    """

    schedule_id: str
    due: datetime
    stored: datetime
    now: datetime
    following: datetime | None
    late_s: float
    catch_up: bool
    status: str  # the fire record's: delivered (a reminder) | running (a task)
    notice: NewNotice | None = None


def _in_transaction(conn: sqlite3.Connection, fn: Any, *args: Any) -> Any:
    begin_write(conn)
    try:
        out = fn(conn, *args)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return out


def _commit_fire(conn: sqlite3.Connection, f: Firing) -> tuple[Notice | None, bool]:
    exists = conn.execute(
        "SELECT 1 FROM schedule_fires WHERE schedule_id = ? AND due_at = ?",
        (f.schedule_id, iso(f.due)),
    ).fetchone()
    if exists is None:
        conn.execute(
            "INSERT INTO schedule_fires(schedule_id, due_at, fired_at, late_s, catch_up, status)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (f.schedule_id, iso(f.due), iso(f.now), f.late_s, int(f.catch_up), f.status),
        )
    notice: Notice | None = None
    created = False
    if f.notice is not None:
        notice, created = insert_notice(conn, f.notice)
        conn.execute(
            "UPDATE schedule_fires SET notice_id = ? WHERE schedule_id = ? AND due_at = ?",
            (notice.id, f.schedule_id, iso(f.due)),
        )
    conn.execute(
        "UPDATE schedules SET next_due = ?, status = ?, updated_at = ?,"
        " fired_count = fired_count + ?, last_fired_at = ? WHERE id = ? AND next_due = ?",
        (
            _iso_or_none(f.following),
            "active" if f.following else "done",
            iso(f.now),
            0 if exists else 1,
            iso(f.now),
            f.schedule_id,
            iso(f.stored),
        ),
    )
    return notice, created


def _finish_fire(
    conn: sqlite3.Connection,
    schedule_id: str,
    due: datetime,
    status: str,
    result: str,
    now: datetime,
    new: NewNotice,
) -> tuple[Notice, bool]:
    notice, created = insert_notice(conn, new)
    conn.execute(
        "UPDATE schedule_fires SET status = ?, result = ?, finished_at = ?,"
        " notice_id = ? WHERE schedule_id = ? AND due_at = ?",
        (status, result, iso(now), notice.id, schedule_id, iso(due)),
    )
    return notice, created


class SchedulesRepo:
    """The `schedules` and `schedule_fires` tables."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- schedules -------------------------------------------------------------------------
    async def live_count(self) -> int:
        """How many schedules are active or pending."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) FROM schedules WHERE status IN ('active', 'pending')"
        )
        return int(row[0])

    async def add(self, row: ScheduleRow) -> None:
        await self.db.execute(
            f"INSERT INTO schedules({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                row.id,
                row.kind,
                row.text,
                row.phrase,
                row.rule,
                row.next_due,
                row.status,
                row.requested_by,
                row.session_id,
                row.created_at,
                row.updated_at,
                row.fired_count,
                row.last_fired_at,
            ),
        )

    async def get(self, schedule_id: str) -> ScheduleRow | None:
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM schedules WHERE id = ?", (schedule_id,)
        )
        return _schedule(row) if row is not None else None

    async def listing(self, *, include_ended: bool) -> list[ScheduleRow]:
        """The live schedules (active and pending), soonest first; ended ones too if asked."""
        where = "" if include_ended else " WHERE status IN ('active', 'pending')"
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM schedules{where}"
            " ORDER BY next_due IS NULL, next_due, created_at"
        )
        return [_schedule(r) for r in rows]

    async def upcoming(self, limit: int) -> list[ScheduleRow]:
        """The active schedules with a due time, soonest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM schedules WHERE status = 'active' AND next_due IS NOT NULL"
            " ORDER BY next_due LIMIT ?",
            (max(0, int(limit)),),
        )
        return [_schedule(r) for r in rows]

    async def counts(self) -> dict[str, int]:
        """Schedules per status."""
        rows = await self.db.fetchall("SELECT status, COUNT(*) FROM schedules GROUP BY status")
        return {str(r[0]): int(r[1]) for r in rows}

    async def set_status(
        self, schedule_id: str, status: str, *, next_due: datetime | None, at: datetime
    ) -> None:
        await self.db.execute(
            "UPDATE schedules SET status = ?, next_due = ?, updated_at = ? WHERE id = ?",
            (status, _iso_or_none(next_due), iso(at), schedule_id),
        )

    async def advance(
        self, schedule_id: str, *, stored: datetime, following: datetime | None, at: datetime
    ) -> None:
        """Move the schedule past `stored` (only if it is still due then) without a firing."""
        await self.db.execute(
            "UPDATE schedules SET next_due = ?, status = ?, updated_at = ?"
            " WHERE id = ? AND next_due = ?",
            (
                _iso_or_none(following),
                "active" if following else "done",
                iso(at),
                schedule_id,
                iso(stored),
            ),
        )

    async def next_due(self) -> datetime | None:
        """The soonest due time of an active schedule."""
        row = await self.db.fetchone(
            "SELECT MIN(next_due) FROM schedules WHERE status = 'active' AND next_due IS NOT NULL"
        )
        return _when(row[0]) if row is not None else None

    async def due(self, now: datetime) -> list[ScheduleRow]:
        """Active schedules due at or before `now`, soonest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM schedules WHERE status = 'active' AND next_due IS NOT NULL"
            " AND next_due <= ? ORDER BY next_due",
            (iso(now),),
        )
        return [_schedule(r) for r in rows]

    async def exists(self) -> bool:
        """Whether the store has the schedules table (a database from before it has none).

        PostgreSQL answers through the `sqlite_master` view its first migration makes."""
        found = await self.db.fetchone(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schedules'"
        )
        return found is not None

    async def active_from(self, when: datetime, *, limit: int) -> list[ScheduleRow]:
        """Active schedules due at `when` or later, soonest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM schedules"
            " WHERE status = 'active' AND next_due IS NOT NULL AND next_due >= ?"
            " ORDER BY next_due LIMIT ?",
            (iso(when), max(0, int(limit))),
        )
        return [_schedule(r) for r in rows]

    # -- firings ---------------------------------------------------------------------------
    async def fires(self, schedule_id: str | None = None) -> list[Fire]:
        """Every firing (of one schedule, if named), by due time."""
        where, params = ("WHERE schedule_id = ?", (schedule_id,)) if schedule_id else ("", ())
        rows = await self.db.fetchall(
            f"SELECT {_FIRE_COLUMNS} FROM schedule_fires {where} ORDER BY due_at", params
        )
        return [_fire(r) for r in rows]

    async def unfinished_fires(self) -> list[Fire]:
        """Task firings still running, or ended but not yet noted in the trunk's transcript."""
        rows = await self.db.fetchall(
            f"SELECT {_FIRE_COLUMNS} FROM schedule_fires"
            " WHERE status = 'running' OR (noted_at IS NULL AND status IN ('done', 'failed'))"
            " ORDER BY due_at"
        )
        return [_fire(r) for r in rows]

    async def commit_fire(self, firing: Firing) -> tuple[Notice | None, bool]:
        """A firing's record, notice and move, in one transaction; (its notice, whether new)."""
        out: tuple[Notice | None, bool] = await self.db.run(_in_transaction, _commit_fire, firing)
        return out

    async def finish_fire(
        self,
        schedule_id: str,
        due: datetime,
        *,
        status: str,
        result: str,
        now: datetime,
        notice: NewNotice,
    ) -> tuple[Notice, bool]:
        """A task firing's end and its notice, in one transaction; (the notice, whether new)."""
        out: tuple[Notice, bool] = await self.db.run(
            _in_transaction, _finish_fire, schedule_id, due, status, result, now, notice
        )
        return out

    async def fire_noted(self, schedule_id: str, due: datetime, at: datetime) -> None:
        """The firing's end is in the trunk's transcript."""
        await self.db.execute(
            "UPDATE schedule_fires SET noted_at = ? WHERE schedule_id = ? AND due_at = ?",
            (iso(at), schedule_id, iso(due)),
        )
