"""The schedules the agent keeps, stored durably: what, when, how it repeats, and who asked.

A schedule is a row of `schedules` (migration 0012); each firing is a row of
`schedule_fires`, keyed by the due time it answered. The store resolves time phrases
(`when.resolve`) in the person's zone, enforces the limits of `[schedule]`, and publishes
`schedules_changed` on the bus (`daemon.events.SchedulesChanged`) when the next due time may
have changed: the keeper subscribes to it and re-arms its timer.

Who asked is kept with every schedule: "person" (the command line, or the person's own turn),
"agent" (the agent on its own), "tool" (proposed while the turn had read text a tool brought
in). A "tool" schedule is created `pending`: it never fires until the person approves it.

Statuses: `active` (waits for `next_due`), `pending` (waits for the person's approval),
`done` (a one-off that fired), `cancelled`, `declined` (the person said no), `failed` (its
firing raised an error; logged).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, time, tzinfo
from typing import TYPE_CHECKING, Any

from daemon.bus import EventBus
from daemon.clock import Clock, parse_hhmm
from daemon.errors import ReverieError
from daemon.events import SchedulesChanged
from daemon.log import get_logger
from daemon.schedule.reading import Hint, Reading, quote_hint, read_apart, read_words
from daemon.store.db import Database
from daemon.store.schedules import Fire, ScheduleRow, SchedulesRepo, iso
from daemon.when import Recurrence, Resolved, WhenError, resolve

if TYPE_CHECKING:
    from daemon.settings import ScheduleSettings

log = get_logger("schedule")

KINDS = ("reminder", "task")
REQUESTERS = ("person", "agent", "tool")
LIVE = ("active", "pending")
TEXT_MAX_CHARS = 2000


class ScheduleError(ReverieError, ValueError):
    """A schedule cannot be made or changed as asked; the message says why."""


class NoSuchSchedule(ScheduleError):
    """No schedule has the id asked for; callers add where the ids are listed."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"no schedule {schedule_id.strip()!r}")
        self.schedule_id = schedule_id


def _when(value: str | None) -> datetime | None:
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


def schedule_from_row(row: ScheduleRow) -> Schedule:
    """A stored row read as a schedule (raises ValueError, KeyError or TypeError on one this
    build cannot read)."""
    created = _when(row.created_at)
    assert created is not None
    return Schedule(
        id=row.id,
        kind=row.kind,
        text=row.text,
        phrase=row.phrase,
        rule=Recurrence.from_json(row.rule) if row.rule else None,
        next_due=_when(row.next_due),
        status=row.status,
        requested_by=row.requested_by,
        session_id=row.session_id,
        created_at=created,
        fired_count=row.fired_count,
        last_fired_at=_when(row.last_fired_at),
    )


class ScheduleStore:
    """Schedules in the database: add, list, cancel, approve; what is due and when next.

    Every call is one statement or one short transaction on the database thread. After
    anything that may move the next due time, `SchedulesChanged` is published on `bus` and
    its handlers (the keeper's re-arm) have run when the call returns. Without a bus (the
    command line's direct path, when no daemon runs) nothing is told: there is no timer.
    """

    def __init__(
        self,
        db: Database,
        *,
        clock: Clock,
        zone: tzinfo,
        settings: ScheduleSettings,
        bus: EventBus | None = None,
    ) -> None:
        self.db = db
        self.rows = SchedulesRepo(db)
        self.clock = clock
        self.zone = zone
        self.settings = settings
        hour, minute = parse_hhmm(settings.default_time)
        self.default_time = time(hour, minute)
        self.bus = bus

    async def _changed(self, schedule_id: str, change: str) -> None:
        if self.bus is not None:
            await self.bus.publish(SchedulesChanged(schedule_id=schedule_id, change=change))

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
        live = await self.rows.live_count()
        if live >= self.settings.max_schedules:
            raise ScheduleError(
                f"{live} schedules are already kept (the limit is [schedule] max_schedules ="
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
        await self.rows.add(
            ScheduleRow(
                id=schedule.id,
                kind=schedule.kind,
                text=schedule.text,
                phrase=schedule.phrase,
                rule=schedule.rule.to_json() if schedule.rule else None,
                next_due=iso(resolved.first),
                status=schedule.status,
                requested_by=requested_by,
                session_id=session_id,
                created_at=iso(now),
                updated_at=iso(now),
            )
        )
        await self._changed(schedule.id, "added")
        return schedule

    async def get(self, schedule_id: str) -> Schedule | None:
        row = await self.rows.get(schedule_id.strip())
        return schedule_from_row(row) if row is not None else None

    async def _require(self, schedule_id: str) -> Schedule:
        found = await self.get(schedule_id)
        if found is None:
            raise NoSuchSchedule(schedule_id)
        return found

    async def listing(self, *, include_ended: bool = False) -> list[Schedule]:
        """The live schedules (active and pending), soonest first; ended ones too if asked."""
        rows = await self.rows.listing(include_ended=include_ended)
        return [schedule_from_row(r) for r in rows]

    async def upcoming(self, limit: int = 5) -> list[Schedule]:
        return [schedule_from_row(r) for r in await self.rows.upcoming(limit)]

    async def counts(self) -> dict[str, int]:
        return await self.rows.counts()

    async def cancel(self, schedule_id: str) -> Schedule:
        """Cancel a live schedule (it never fires again); raises `ScheduleError` otherwise."""
        found = await self._require(schedule_id)
        if found.status not in LIVE:
            raise ScheduleError(f"schedule {found.id} is already {found.status}")
        await self._set_status(found.id, "cancelled", next_due=None)
        await self._changed(found.id, "cancelled")
        return await self._require(found.id)

    async def approve(self, schedule_id: str) -> Schedule:
        """The person approves a pending schedule: it becomes active (a passed one-off fires late)."""
        found = await self._require(schedule_id)
        if found.status != "pending":
            raise ScheduleError(f"schedule {found.id} is {found.status}, not waiting for approval")
        await self._set_status(found.id, "active", next_due=found.next_due)
        await self._changed(found.id, "approved")
        return await self._require(found.id)

    async def decline(self, schedule_id: str) -> Schedule:
        found = await self._require(schedule_id)
        if found.status != "pending":
            raise ScheduleError(f"schedule {found.id} is {found.status}, not waiting for approval")
        await self._set_status(found.id, "declined", next_due=None)
        await self._changed(found.id, "declined")
        return await self._require(found.id)

    async def set_aside(self, schedule_id: str) -> None:
        """A schedule that could not fire: `failed`, so it cannot hold the timer in the past."""
        await self._set_status(schedule_id, "failed", next_due=None)

    async def _set_status(
        self, schedule_id: str, status: str, *, next_due: datetime | None
    ) -> None:
        await self.rows.set_status(schedule_id, status, next_due=next_due, at=self.clock.now())

    async def next_due(self) -> datetime | None:
        """The soonest due time of an active schedule (what the keeper's one timer waits for)."""
        return await self.rows.next_due()

    async def due(self, now: datetime) -> list[Schedule]:
        """Active schedules due at or before `now`, soonest first."""
        out: list[Schedule] = []
        for row in await self.rows.due(now):
            try:
                out.append(schedule_from_row(row))
            except (ValueError, KeyError, TypeError) as exc:
                # A row this build cannot read would otherwise hold the timer in the past.
                log.error("schedule unreadable; set aside", schedule=row.id, error=repr(exc))
                await self.set_aside(row.id)
        return out

    async def fires(self, schedule_id: str | None = None) -> list[Fire]:
        return await self.rows.fires(schedule_id)

    async def unfinished_fires(self) -> list[Fire]:
        """Task firings a restart interrupted, or whose end is not yet in the trunk's transcript."""
        return await self.rows.unfinished_fires()


async def schedule_status(rows: SchedulesRepo, zone: tzinfo, limit: int = 5) -> dict[str, Any]:
    """The next scheduled items (when, in `zone`) and the counts of live ones, for `status`."""
    counts = await rows.counts()
    return {
        "next": [
            {**s.to_json(), "when": s.when_text(zone)}
            for s in map(schedule_from_row, await rows.upcoming(limit))
        ],
        "active": counts.get("active", 0),
        "pending": counts.get("pending", 0),
    }
