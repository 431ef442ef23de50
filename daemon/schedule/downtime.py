"""What fell while the daemon was down, told once in the first greeting after it starts again.

The run log (`daemon.run_log`) says when the daemon last ran: from the end of the previous run
(its clean stop, or its last sign of life when it was lost) to this start, nothing ran. Once the
start's catch-up is done — the keeper's first wake-up fired what came due meanwhile
(`ScheduleKeeper.missed`) and the scheduler decided what its daily jobs catch up
(`Scheduler.missed`) — every one of them is accounted for in one notice:

- a reminder or task that fired late, and how late (a task's result follows as its own notice);
- occurrences of a repeating one passed over (one catch-up stands for them, or
  `[schedule] catch_up = false` skipped them);
- the nightly sleep: the nights missed, caught up once now, or why not;
- heartbeats: how many fell in the time down — skipped, as nothing happened to record.

The notice (kind `greeting`, key ``downtime:<previous run id>``) opens with the gap since the
person last wrote when it is two days or more ("It's been three weeks since we last talked —
welcome back."). Keyed by the run that ended the time down, it is posted once: a restart after
it finds the key, and its own time down is a new, shorter one. A time down in which only
heartbeats fell — they had nothing to do — and shorter than two days posts nothing (the log
says what was skipped).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

import anyio

from daemon.log import get_logger
from daemon.memory.last_word import GREET_AWAY, away_phrase, last_person_word
from daemon.schedule.keeper import MissedFiring, ScheduleKeeper, lateness
from daemon.schedule.outbox import Notice, Outbox
from daemon.scheduler import MissedRuns, Scheduler
from daemon.store.db import Database
from daemon.store.runs import RunsRepo

log = get_logger("downtime")

# How long the account waits for the start's catch-up before telling what it knows.
CATCH_UP_WAIT_S = 60.0
NIGHTLY_JOB = "nightly_sleep"
HEARTBEAT_JOB = "heartbeat"
TEXT_CHARS = 80


@dataclass(frozen=True, kw_only=True)
class Downtime:
    """The time the daemon was not running: from the previous run's end to this start."""

    run_id: str  # the previous run: the key of the account
    since: datetime
    until: datetime
    ended: str  # how the previous run ended: stopped | lost


async def last_downtime(db: Database, started_at: datetime) -> Downtime | None:
    """The time down before the run that started at `started_at` (None: no run before it)."""
    run = await RunsRepo(db).last_closed_before(started_at)
    if run is None or run.ended == "unrecorded":
        return None
    since = _aware(run.until)
    if since >= started_at:
        return None
    return Downtime(run_id=run.id, since=since, until=started_at, ended=run.ended or "")


def _day(when: datetime, zone: tzinfo) -> str:
    local = when.astimezone(zone)
    return f"{local.strftime('%a')} {local.day} {local.strftime('%b %H:%M')}"


def _quote(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TEXT_CHARS else line[: TEXT_CHARS - 1].rstrip() + "…"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def firing_line(f: MissedFiring, zone: tzinfo) -> str:
    """One schedule's account: "reminder “…” (due Mon 2 Nov 10:00): delivered 20 days 23 h late"."""
    how = f", {f.repeats}" if f.repeats else ""
    head = f"{f.kind} “{_quote(f.text)}” (due {_day(f.due, zone)}{how})"
    parts: list[str] = []
    if f.skipped:
        parts.append(f"{_plural(f.skipped, 'occurrence', 'occurrences')} skipped ({f.reason})")
    if f.fired:
        late = lateness(f.late_s)
        parts.append(
            f"delivered {late} late"
            if f.kind == "reminder"
            else f"started {late} late; its result comes as its own notice"
        )
    return f"{head}: " + "; ".join(parts)


def nightly_line(m: MissedRuns, zone: tzinfo) -> str:
    nights = _plural(m.count, "night", "nights")
    if m.caught_up:
        return f"the nightly sleep: {nights} missed; caught up once, now, in place of " + (
            "it" if m.count == 1 else "them all"
        )
    why = (
        "it was not yet scheduled here"
        if not m.ran_before
        else "it is not caught up"
        if not m.catch_up
        else "the next one is due soon"
    )
    return f"the nightly sleep: {nights} missed; not caught up ({why})"


def heartbeat_line(m: MissedRuns) -> str:
    every = ""
    if m.every is not None:
        every = f" (every {round(m.every.total_seconds() / 60):g} min)"
    return (
        f"heartbeats{every}: {m.count:,} skipped — nothing happened while I was off, "
        "so there was nothing to record"
    )


def compose_account(
    down: Downtime,
    *,
    firings: list[MissedFiring],
    nightly: MissedRuns | None,
    heartbeats: MissedRuns | None,
    away: str,
    local_now: datetime,
    zone: tzinfo,
) -> str:
    """The greeting after a time down: the gap (when long), the time off, and what fell in it."""
    if away:
        opening = f"It's been {away} since we last talked — welcome back."
    else:
        hour = local_now.hour
        salute = "Good morning" if hour < 12 else "Good afternoon" if hour < 18 else "Good evening"
        opening = f"{salute} — I'm back."
    span = away_phrase(down.until - down.since)
    lines = [
        opening,
        f"I was off for {span} (from {_day(down.since, zone)} to {_day(down.until, zone)}).",
    ]
    items = [firing_line(f, zone) for f in firings]
    if nightly is not None and nightly.count:
        items.append(nightly_line(nightly, zone))
    if heartbeats is not None and heartbeats.count:
        items.append(heartbeat_line(heartbeats))
    if items:
        lines.append("While I was off:")
        lines += [f"- {item}" for item in items]
    else:
        lines.append("Nothing was due while I was off.")
    return "\n".join(lines)


class DowntimeAccount:
    """Posts the account of the last time down once the start's catch-up is done."""

    def __init__(
        self,
        *,
        db: Database,
        outbox: Outbox,
        keeper: ScheduleKeeper,
        scheduler: Scheduler,
        zone: tzinfo,
        now: Callable[[], datetime],
        started_at: datetime,
        greeting: bool = True,
    ) -> None:
        self.db = db
        self.outbox = outbox
        self.keeper = keeper
        self.scheduler = scheduler
        self.zone = zone
        self.now = now
        self.started_at = started_at
        self.greeting = greeting

    async def serve(self) -> Notice | None:
        """Wait for the catch-up (at most `CATCH_UP_WAIT_S`), then `account` (errors logged)."""
        with anyio.move_on_after(CATCH_UP_WAIT_S):
            await self.keeper.caught_up.wait()
        try:
            return await self.account()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # the account is a courtesy: never take the daemon down
            log.error("the time down could not be accounted for", error=repr(exc), exc_info=True)
            return None

    async def account(self) -> Notice | None:
        """Post the account of the time down before this start (once; None when none is due)."""
        down = await last_downtime(self.db, self.started_at)
        if down is None:
            return None
        key = f"downtime:{down.run_id}"
        existing = await self.outbox.by_key(key)
        if existing is not None:
            return existing
        firings = sorted(
            (f for f in self.keeper.missed if f.due < down.until),
            key=lambda f: (f.due, f.schedule_id),
        )
        nightly = self.scheduler.missed(NIGHTLY_JOB, down.since, down.until)
        beats = self.scheduler.missed(HEARTBEAT_JOB, down.since, down.until)
        now = self.now()
        last = await last_person_word(self.db, now)
        gap = now - last.ts if last is not None else None
        long_down = down.until - down.since >= GREET_AWAY
        if not firings and not (nightly and nightly.count) and not long_down:
            log.info(
                "down briefly; nothing due fell in it",
                since=down.since.isoformat(),
                until=down.until.isoformat(),
                heartbeats_skipped=beats.count if beats else 0,
            )
            return None
        away = away_phrase(gap) if gap is not None and gap >= GREET_AWAY else ""
        text = compose_account(
            down,
            firings=firings,
            nightly=nightly,
            heartbeats=beats,
            away=away if self.greeting else "",
            local_now=now.astimezone(self.zone),
            zone=self.zone,
        )
        if not self.greeting:
            text = "\n".join(text.splitlines()[1:])
        notice = await self.outbox.post(
            kind="greeting" if self.greeting else "system", text=text, key=key, source="system"
        )
        log.info(
            "time down accounted for",
            notice=notice.id,
            since=down.since.isoformat(),
            until=down.until.isoformat(),
            firings=len(firings),
            nights=nightly.count if nightly else 0,
            heartbeats=beats.count if beats else 0,
        )
        return notice


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
