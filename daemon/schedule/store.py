"""The schedules the agent keeps, stored durably: what, when, how it repeats, and who asked.

A schedule is a row of `schedules` (migration 0012); each firing is a row of
`schedule_fires`, keyed by the due time it answered. The store resolves time phrases
(`when.resolve`) in the person's zone, enforces the limits of `[schedule]`, and tells its
listeners (the keeper) when the next due time may have changed.

Who asked is kept with every schedule: "person" (the command line, or the person's own turn),
"agent" (the agent on its own), "tool" (proposed while the turn had read text a tool brought
in). A "tool" schedule is created `pending`: it never fires until the person approves it.

Statuses: `active` (waits for `next_due`), `pending` (waits for the person's approval),
`done` (a one-off that fired), `cancelled`, `declined` (the person said no), `failed` (its
firing raised an error; logged).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, tzinfo
from typing import Any

from daemon.clock import Clock
from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.schedule.reading import Hint, Reading, quote_hint, read_apart, read_words
from daemon.scheduler import parse_hhmm
from daemon.settings import ScheduleSettings
from daemon.store.db import Database
from daemon.when import Recurrence, Resolved, WhenError, resolve

log = get_logger("schedule")

KINDS = ("reminder", "task")
REQUESTERS = ("person", "agent", "tool")
LIVE = ("active", "pending")
TEXT_MAX_CHARS = 2000

_COLUMNS = (
    "id, kind, text, phrase, rule, next_due, status, requested_by, session_id, created_at,"
    " updated_at, fired_count, last_fired_at"
)
_FIRE_COLUMNS = (
    "schedule_id, due_at, fired_at, late_s, catch_up, status, notice_id, result, finished_at,"
    " noted_at"
)


class ScheduleError(ReverieError, ValueError):
    """A schedule cannot be made or changed as asked; the message says why."""


class NoSuchSchedule(ScheduleError):
    """No schedule has the id asked for; callers add where the ids are listed."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"no schedule {schedule_id.strip()!r}")
        self.schedule_id = schedule_id


def iso(when: datetime) -> str:
    """The stored form of an instant: UTC, whole seconds (so keys and ordering are stable)."""
    from datetime import UTC

    return when.astimezone(UTC).replace(microsecond=0).isoformat()


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@dataclass(frozen=True, kw_only=True)
class Schedule:
    id: str
    kind: str
    text: str
    phrase: str
    rule: Recurrence | None
    next_due: datetime | None
    status: str
    requested_by: str
    session_id: str | None
    created_at: datetime
    fired_count: int = 0
    last_fired_at: datetime | None = None
    # How its time phrase was read, for the answer to whoever just made it (not stored).
    read_as: str = ""

    @property
    def repeats(self) -> bool:
        return self.rule is not None

    def when_text(self, zone: tzinfo) -> str:
        """When it fires next, in the person's zone, and how it repeats."""
        nxt = (
            self.next_due.astimezone(zone).strftime("%a %Y-%m-%d %H:%M %Z")
            if self.next_due
            else "—"
        )
        return nxt if self.rule is None else f"{nxt} ({self.rule.describe()})"

    def line(self, zone: tzinfo) -> str:
        """One readable line: id, status, kind, when, what."""
        state = "" if self.status == "active" else f" [{self.status}]"
        return f"{self.id}  {self.when_text(zone)}  {self.kind}{state}: {self.text}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "text": self.text,
            "phrase": self.phrase,
            "repeats": self.rule.describe() if self.rule else None,
            "next_due": iso(self.next_due) if self.next_due else None,
            "status": self.status,
            "requested_by": self.requested_by,
            "created_at": iso(self.created_at),
            "fired_count": self.fired_count,
            "last_fired_at": iso(self.last_fired_at) if self.last_fired_at else None,
        } | ({"read_as": self.read_as} if self.read_as else {})


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


def schedule_from_row(row: Any) -> Schedule:
    created = _when(row["created_at"])
    assert created is not None
    return Schedule(
        id=row["id"],
        kind=row["kind"],
        text=row["text"],
        phrase=row["phrase"],
        rule=Recurrence.from_json(row["rule"]) if row["rule"] else None,
        next_due=_when(row["next_due"]),
        status=row["status"],
        requested_by=row["requested_by"],
        session_id=row["session_id"],
        created_at=created,
        fired_count=int(row["fired_count"] or 0),
        last_fired_at=_when(row["last_fired_at"]),
    )


def fire_from_row(row: Any) -> Fire:
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


class ScheduleStore:
    """Schedules in the database: add, list, cancel, approve; what is due and when next.

    Every call is one statement or one short transaction on the database thread. Listeners
    added with `on_change` are called (synchronously) after anything that may move the next
    due time.
    """

    def __init__(
        self, db: Database, *, clock: Clock, zone: tzinfo, settings: ScheduleSettings
    ) -> None:
        self.db = db
        self.clock = clock
        self.zone = zone
        self.settings = settings
        hour, minute = parse_hhmm(settings.default_time)
        self.default_time = time(hour, minute)
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    def resolve(self, when: str) -> Resolved:
        """The phrase resolved now in the person's zone (raises `WhenError`)."""
        return resolve(when, self.clock.now(), self.zone, **self._limits())

    def _limits(self) -> dict[str, Any]:
        return {
            "default_time": self.default_time,
            "min_interval_s": self.settings.min_interval_minutes * 60,
        }

    async def add(
        self,
        when: str,
        text: str,
        *,
        kind: str = "reminder",
        requested_by: str = "person",
        session_id: str | None = None,
        hint: Hint = quote_hint,
    ) -> Schedule:
        """Resolve `when` and store a schedule for `text`; a "tool" request is stored `pending`.

        The time is taken as given, unless the text's first words continue it into a longer
        time phrase (refused as unclear; `hint` says how to give them apart). Raises
        `ScheduleError` for an unreadable time, empty text, an unknown kind or requester, or
        too many schedules.
        """
        self._check(kind, requested_by)
        try:
            reading = read_apart(
                when, text, self.clock.now(), self.zone, hint=hint, **self._limits()
            )
        except WhenError as exc:
            raise ScheduleError(str(exc)) from None
        return await self._keep(reading, kind, requested_by, session_id)

    async def add_words(
        self,
        words: list[str],
        *,
        kind: str = "reminder",
        requested_by: str = "person",
        session_id: str | None = None,
    ) -> Schedule:
        """Store a schedule from the command line's words: the longest time phrase they start
        with, the rest its text (`reading.read_words`); refused when the split is unclear."""
        self._check(kind, requested_by)
        try:
            reading = read_words(words, self.clock.now(), self.zone, **self._limits())
        except WhenError as exc:
            raise ScheduleError(str(exc)) from None
        return await self._keep(reading, kind, requested_by, session_id)

    @staticmethod
    def _check(kind: str, requested_by: str) -> None:
        if kind not in KINDS:
            raise ScheduleError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
        if requested_by not in REQUESTERS:
            raise ScheduleError(f"unknown requester {requested_by!r}")

    async def _keep(
        self, reading: Reading, kind: str, requested_by: str, session_id: str | None
    ) -> Schedule:
        resolved = reading.resolved
        text = " ".join(reading.text.split()) if kind == "reminder" else reading.text.strip()
        if not text:
            raise ScheduleError(
                "say what to remind of" if kind == "reminder" else "say what the task is"
            )
        if len(text) > TEXT_MAX_CHARS:
            raise ScheduleError(f"the text is {len(text)} characters; at most {TEXT_MAX_CHARS}")
        live = await self.db.fetchone(
            "SELECT COUNT(*) FROM schedules WHERE status IN ('active', 'pending')"
        )
        if int(live[0]) >= self.settings.max_schedules:
            raise ScheduleError(
                f"{live[0]} schedules are already kept (the limit is [schedule] max_schedules ="
                f" {self.settings.max_schedules}); cancel some first"
            )
        now = self.clock.now()
        schedule = Schedule(
            id="s-" + uuid.uuid4().hex[:8],
            kind=kind,
            text=text,
            phrase=resolved.phrase,
            rule=resolved.recurrence,
            next_due=resolved.first,
            status="pending" if requested_by == "tool" else "active",
            requested_by=requested_by,
            session_id=session_id,
            created_at=now,
            read_as=resolved.echo(self.zone, now),
        )
        await self.db.execute(
            f"INSERT INTO schedules({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,0,NULL)",
            (
                schedule.id,
                schedule.kind,
                schedule.text,
                schedule.phrase,
                schedule.rule.to_json() if schedule.rule else None,
                iso(resolved.first),
                schedule.status,
                requested_by,
                session_id,
                iso(now),
                iso(now),
            ),
        )
        self._changed()
        return schedule

    async def get(self, schedule_id: str) -> Schedule | None:
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM schedules WHERE id = ?", (schedule_id.strip(),)
        )
        return schedule_from_row(row) if row is not None else None

    async def _require(self, schedule_id: str) -> Schedule:
        found = await self.get(schedule_id)
        if found is None:
            raise NoSuchSchedule(schedule_id)
        return found

    async def listing(self, *, include_ended: bool = False) -> list[Schedule]:
        """The live schedules (active and pending), soonest first; ended ones too if asked."""
        where = "" if include_ended else " WHERE status IN ('active', 'pending')"
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM schedules{where}"
            " ORDER BY next_due IS NULL, next_due, created_at"
        )
        return [schedule_from_row(r) for r in rows]

    async def upcoming(self, limit: int = 5) -> list[Schedule]:
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM schedules WHERE status = 'active' AND next_due IS NOT NULL"
            " ORDER BY next_due LIMIT ?",
            (max(0, int(limit)),),
        )
        return [schedule_from_row(r) for r in rows]

    async def counts(self) -> dict[str, int]:
        rows = await self.db.fetchall("SELECT status, COUNT(*) FROM schedules GROUP BY status")
        return {str(r[0]): int(r[1]) for r in rows}

    async def cancel(self, schedule_id: str) -> Schedule:
        """Cancel a live schedule (it never fires again); raises `ScheduleError` otherwise."""
        found = await self._require(schedule_id)
        if found.status not in LIVE:
            raise ScheduleError(f"schedule {found.id} is already {found.status}")
        await self._set_status(found.id, "cancelled", next_due=None)
        self._changed()
        return await self._require(found.id)

    async def approve(self, schedule_id: str) -> Schedule:
        """The person approves a pending schedule: it becomes active (a passed one-off fires late)."""
        found = await self._require(schedule_id)
        if found.status != "pending":
            raise ScheduleError(f"schedule {found.id} is {found.status}, not waiting for approval")
        await self._set_status(found.id, "active", next_due=found.next_due)
        self._changed()
        return await self._require(found.id)

    async def decline(self, schedule_id: str) -> Schedule:
        found = await self._require(schedule_id)
        if found.status != "pending":
            raise ScheduleError(f"schedule {found.id} is {found.status}, not waiting for approval")
        await self._set_status(found.id, "declined", next_due=None)
        self._changed()
        return await self._require(found.id)

    async def set_aside(self, schedule_id: str) -> None:
        """A schedule that could not fire: `failed`, so it cannot hold the timer in the past."""
        await self._set_status(schedule_id, "failed", next_due=None)

    async def _set_status(
        self, schedule_id: str, status: str, *, next_due: datetime | None
    ) -> None:
        await self.db.execute(
            "UPDATE schedules SET status = ?, next_due = ?, updated_at = ? WHERE id = ?",
            (
                status,
                iso(next_due) if next_due else None,
                iso(self.clock.now()),
                schedule_id,
            ),
        )

    async def next_due(self) -> datetime | None:
        """The soonest due time of an active schedule (what the keeper's one timer waits for)."""
        row = await self.db.fetchone(
            "SELECT MIN(next_due) FROM schedules WHERE status = 'active' AND next_due IS NOT NULL"
        )
        return _when(row[0]) if row is not None else None

    async def due(self, now: datetime) -> list[Schedule]:
        """Active schedules due at or before `now`, soonest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM schedules WHERE status = 'active' AND next_due IS NOT NULL"
            " AND next_due <= ? ORDER BY next_due",
            (iso(now),),
        )
        out: list[Schedule] = []
        for row in rows:
            try:
                out.append(schedule_from_row(row))
            except (ValueError, KeyError, TypeError) as exc:
                # A row this build cannot read would otherwise hold the timer in the past.
                log.error("schedule unreadable; set aside", schedule=row["id"], error=repr(exc))
                await self.set_aside(row["id"])
        return out

    async def fires(self, schedule_id: str | None = None) -> list[Fire]:
        where, params = ("WHERE schedule_id = ?", (schedule_id,)) if schedule_id else ("", ())
        rows = await self.db.fetchall(
            f"SELECT {_FIRE_COLUMNS} FROM schedule_fires {where} ORDER BY due_at", params
        )
        return [fire_from_row(r) for r in rows]

    async def unfinished_fires(self) -> list[Fire]:
        """Task firings a restart interrupted, or whose end is not yet in the trunk's transcript."""
        rows = await self.db.fetchall(
            f"SELECT {_FIRE_COLUMNS} FROM schedule_fires"
            " WHERE status = 'running' OR (noted_at IS NULL AND status IN ('done', 'failed'))"
            " ORDER BY due_at"
        )
        return [fire_from_row(r) for r in rows]


async def schedule_status(store: ScheduleStore, limit: int = 5) -> dict[str, Any]:
    """The next scheduled items and the counts of live ones, for `status`."""
    counts = await store.counts()
    return {
        "next": [
            {**s.to_json(), "when": s.when_text(store.zone)} for s in await store.upcoming(limit)
        ],
        "active": counts.get("active", 0),
        "pending": counts.get("pending", 0),
    }
