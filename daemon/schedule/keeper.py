"""Firing schedules: one timer on the daemon's scheduler for the next due one, exactly once each.

The keeper holds a single timer job (`Scheduler.add_timer`) set to the soonest `next_due` of
the active schedules: an idle daemon with a thousand schedules wakes only when one is due (and
on the scheduler's own minute check), and costs no model call. A change to the schedules
(added, cancelled, approved, declined), which the store publishes as `schedules_changed` on the
bus, re-arms the timer.

Firing a **reminder** costs no model call: in one transaction it writes the fire record
(`schedule_fires`, keyed by the due time), posts the notice to the outbox with the key
``fire:<schedule_id>:<due ISO>`` and moves the schedule on (its next occurrence, or `done`).
A crash before the commit leaves nothing (it fires at the next start); after it, everything
(the notice waits in the outbox for the next chat) — the person is told once.

A **task** runs as a fork (the forks' tools and permissions, `Delegator.delegate`) once the
spend cap allows non-essential work; its result becomes a notice and a `schedule_fired`
record in the trunk's transcript, so the trunk knows what happened. A task a restart
interrupted is reported as interrupted (never run twice on its own); a result whose record
did not reach the trunk's transcript before a crash is recorded at the next start.

Missed while the daemon was down: at start the timer is due at once; a one-off fires once,
marked late and by how much; a repeating schedule fires once (a catch-up) and moves to its
next occurrence after now — never a burst. `[schedule] catch_up = false` skips the missed
run of a repeating schedule instead. Each of them is noted in `missed` (how late, how many
occurrences were passed over and why), and `caught_up` is set once the first wake-up is done:
the first greeting after the start tells them (`daemon.schedule.downtime`).

The moment after a firing's commit and before anyone is told is the fault point
`schedule.fire_committed` (`daemon.faults`): the crash tests stop the daemon there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

import anyio

from daemon.background import BackgroundWork
from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.events import JournalNote, SchedulesChanged
from daemon.faults import fault_point
from daemon.log import get_logger
from daemon.records import ScheduleFired
from daemon.schedule.outbox import Outbox, new_notice
from daemon.schedule.store import Fire, Schedule, ScheduleStore, iso, schedule_status
from daemon.scheduler import Scheduler
from daemon.settings import ScheduleSettings
from daemon.store.notices import NewNotice
from daemon.store.schedules import Firing
from daemon.tools.registry import ToolContext, ToolError

if TYPE_CHECKING:
    from daemon.agent.trunk import Trunk
    from daemon.delegate.fork import Delegator
    from daemon.models.ledger import UsageLedger

log = get_logger("schedule")

JOB = "schedules"
# After a failure to read the schedules, the timer tries again this much later.
RETRY_S = 60.0
INTERRUPTED = (
    "interrupted: the daemon stopped while this task ran; it was not run again on its own"
    " (ask for it again if it is still wanted)"
)
TASK_CONTEXT = (
    "This task runs on a schedule the person (or you, for them) set earlier; nobody is watching"
    " it run. Do it with your tools, then finish with task_complete: the summary is what the"
    " person is sent, so write it for them — short, concrete, what you found or did."
)


# A reminder repeating more often than this is not journaled at each firing: it would fill the
# day's entries ([journal] max_entries_per_day) with itself.
JOURNAL_MIN_INTERVAL_S = 3600


def journaled(schedule: Schedule) -> bool:
    """Whether a reminder's firing gets a journal line (tasks always do)."""
    rule = schedule.rule
    return not (
        rule is not None
        and rule.kind == "interval"
        and (rule.every_s or 0) < JOURNAL_MIN_INTERVAL_S
    )


@dataclass(frozen=True, kw_only=True)
class MissedFiring:
    """A schedule that came due before this start, and what the catch-up did with it."""

    schedule_id: str
    kind: str
    text: str
    repeats: str  # how it repeats ("every day at 08:00"); "" for a one-off
    due: datetime  # the occurrence the catch-up answered (the latest missed one)
    late_s: float
    fired: bool  # False: skipped
    skipped: int  # occurrences passed over (before `due`; and `due` itself when not fired)
    reason: str  # why they were passed over; "" when none was


def fire_key(schedule_id: str, due: datetime) -> str:
    return f"fire:{schedule_id}:{iso(due)}"


def lateness(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{max(1, minutes)} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} days {hours % 24} h"


class ScheduleKeeper(BackgroundWork):
    """Fires due schedules on the scheduler's timer (see the module's docstring).

    `async with` owns the task group the tasks' forks run in; leaving it cancels them (a
    cancelled task's firing is reported as interrupted at the next start).
    """

    def __init__(
        self,
        *,
        store: ScheduleStore,
        outbox: Outbox,
        scheduler: Scheduler,
        bus: EventBus,
        clock: Clock,
        zone: tzinfo,
        settings: ScheduleSettings,
        trunk: Trunk | None = None,
        delegator: Delegator | None = None,
        ledger: UsageLedger | None = None,
    ) -> None:
        self.store = store
        self.outbox = outbox
        self.scheduler = scheduler
        self.bus = bus
        self.clock = clock
        self.zone = zone
        self.settings = settings
        self.trunk = trunk
        self.delegator = delegator
        self.ledger = ledger
        self.fired = 0
        self.wakeups = 0
        self._tasks_running: set[str] = set()
        self._armed = False
        self._unsubscribe: Callable[[], None] = lambda: None
        # What came due before this start and how it was caught up (`MissedFiring`); the
        # first wake-up, which catches up, sets `caught_up` when it is done.
        self.started_at = clock.now()
        self.missed: list[MissedFiring] = []
        self.caught_up = anyio.Event()

    async def start(self) -> None:
        """Finish what a restart interrupted, add the timer, and arm it (due now: catch-up).

        From here on every `schedules_changed` re-arms the timer; the store must publish on
        this keeper's bus, or a schedule added later would wait for a timer set before it.
        """
        if self.store.bus is not self.bus:
            raise ValueError("the schedule store publishes on another bus than the keeper's")
        await self.recover()
        self.scheduler.add_timer(JOB, self._on_timer)
        self._unsubscribe = self.bus.on(
            SchedulesChanged, self._on_change, name="schedule.keeper.rearm"
        )
        self._armed = True
        self.rearm()

    async def __aexit__(self, *exc: object) -> None:
        self._unsubscribe()
        await super().__aexit__(*exc)

    def _on_change(self, event: SchedulesChanged) -> None:
        self.rearm()

    def rearm(self) -> None:
        """The schedules changed: run the timer now, which fires what is due and sets the next."""
        if self._armed:
            self.scheduler.set_timer(JOB, self.clock.now())

    # -- the timer ---------------------------------------------------------------------------

    async def _on_timer(self) -> str:
        # The instant the scheduler woke for it: what "now" is for the firing.
        return await self.fire_due(self.scheduler.last_run(JOB))

    async def fire_due(self, now: datetime | None = None) -> str:
        """Fire every schedule due at `now` (default: the clock's); set the timer to the next.

        A schedule whose firing fails is set aside (`failed`, logged) so that it cannot hold
        the timer at a time already past; a database that cannot be read now is tried again
        in `RETRY_S`.
        """
        self.wakeups += 1
        fired = 0
        nxt: datetime | None = None
        try:
            now = now or self.clock.now()
            for schedule in await self.store.due(now):
                try:
                    if await self.fire(schedule, now):
                        fired += 1
                except Exception as exc:
                    log.error(
                        "schedule could not fire; set aside",
                        schedule=schedule.id,
                        error=repr(exc),
                        exc_info=True,
                    )
                    await self.store.set_aside(schedule.id)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    nxt = await self.store.next_due()
                except Exception as exc:
                    log.error("schedules could not be read; trying again", error=repr(exc))
                    nxt = self.clock.now() + timedelta(seconds=RETRY_S)
            self.scheduler.set_timer(JOB, nxt)
            self.caught_up.set()
        return f"fired={fired} next={iso(nxt) if nxt else None}"

    def _passed_over(self, schedule: Schedule, stored: datetime, due: datetime) -> int:
        """How many occurrences lie from `stored` (the first missed) up to, not including, `due`."""
        rule = schedule.rule
        if rule is None or due <= stored:
            return 0
        if rule.kind == "interval" and rule.every_s:
            return int((due - stored) / timedelta(seconds=rule.every_s))
        n, at = 0, stored
        while at < due and n < 4000:
            n += 1
            at = rule.next_after(at, self.zone)
        return n

    def _note_missed(
        self, schedule: Schedule, stored: datetime, due: datetime, late_s: float, *, fired: bool
    ) -> None:
        if stored >= self.started_at:
            return
        skipped = self._passed_over(schedule, stored, due) + (0 if fired else 1)
        if fired:
            reason = "one catch-up stood for them" if skipped else ""
        else:
            reason = "[schedule] catch_up = false"
        self.missed.append(
            MissedFiring(
                schedule_id=schedule.id,
                kind=schedule.kind,
                text=schedule.text,
                repeats=schedule.rule.describe() if schedule.rule else "",
                due=due,
                late_s=late_s,
                fired=fired,
                skipped=skipped,
                reason=reason,
            )
        )

    def _latest_missed(self, schedule: Schedule, due: datetime, now: datetime) -> datetime:
        """The last occurrence at or before `now`, from `due` on (`due` itself for a one-off)."""
        rule = schedule.rule
        if rule is None:
            return due
        if rule.kind == "interval" and rule.every_s:
            step = timedelta(seconds=rule.every_s)
            return due + ((now - due) // step) * step
        latest = due
        # Bounded: a daily rule missed for a year is 365 steps.
        for _ in range(400):
            nxt = rule.next_after(latest, self.zone)
            if nxt > now:
                break
            latest = nxt
        return latest

    def _following(self, schedule: Schedule, due: datetime, now: datetime) -> datetime | None:
        """The next due time after this firing: never one already past (no burst)."""
        if schedule.rule is None:
            return None
        nxt = schedule.rule.next_after(due, self.zone)
        if nxt <= now:
            nxt = schedule.rule.next_after(now, self.zone)
        return nxt

    async def fire(self, schedule: Schedule, now: datetime) -> bool:
        """Fire one due schedule; return whether it fired (a skipped catch-up does not)."""
        stored = schedule.next_due
        assert stored is not None
        # A repeating schedule missed several times answers the latest missed occurrence.
        due = self._latest_missed(schedule, stored, now)
        late_s = max(0.0, (now - due).total_seconds())
        late = late_s >= self.settings.late_after_s
        following = self._following(schedule, due, now)
        if late and schedule.rule is not None and not self.settings.catch_up:
            await self._advance_only(schedule, stored, following)
            self._note_missed(schedule, stored, due, late_s, fired=False)
            log.info(
                "missed repeating schedule skipped (catch_up = false)",
                schedule=schedule.id,
                due=iso(due),
            )
            return False
        if schedule.kind == "task" and schedule.id in self._tasks_running:
            await self._advance_only(schedule, stored, following)
            log.warning(
                "task still running from its last firing; this one skipped", schedule=schedule.id
            )
            return False
        recorded_late = late_s if late else 0.0
        catch_up = late and schedule.rule is not None
        # The notice's own fields say it is a reminder, when it was due and how late it
        # fired (clients show them as its heading): the text is the person's words alone.
        text = schedule.text if schedule.kind == "reminder" else None

        notice_of: NewNotice | None = None
        if text is not None:
            notice_of = new_notice(
                now=now,
                kind="reminder",
                text=text,
                key=fire_key(schedule.id, due),
                source="person" if schedule.requested_by == "person" else "agent",
                due_at=due,
                late_s=recorded_late,
                schedule_id=schedule.id,
            )
        firing = Firing(
            schedule_id=schedule.id,
            due=due,
            stored=stored,
            now=now,
            following=following,
            late_s=recorded_late,
            catch_up=catch_up,
            status="delivered" if schedule.kind == "reminder" else "running",
            notice=notice_of,
        )
        with anyio.CancelScope(shield=True):
            notice, created = await self.store.rows.commit_fire(firing)
        fault_point("schedule.fire_committed")
        self.fired += 1
        if late:
            self._note_missed(schedule, stored, due, late_s, fired=True)
        log.info(
            "schedule fired",
            schedule=schedule.id,
            kind=schedule.kind,
            due=iso(due),
            late_s=round(late_s, 1),
            catch_up=catch_up,
            next_due=iso(following) if following else None,
        )
        if schedule.kind == "reminder":
            if notice is not None and created:
                await self.outbox.announce(notice)
            if journaled(schedule):
                await self._journal(schedule, due, recorded_late, "fired")
        else:
            assert self._tg is not None
            self._tasks_running.add(schedule.id)
            self._tg.start_soon(
                self._run_task, schedule, due, recorded_late, name=f"schedule-task:{schedule.id}"
            )
        return True

    async def _advance_only(
        self, schedule: Schedule, due: datetime, following: datetime | None
    ) -> None:
        await self.store.rows.advance(
            schedule.id, stored=due, following=following, at=self.clock.now()
        )

    async def _journal(self, schedule: Schedule, due: datetime, late_s: float, how: str) -> None:
        local = due.astimezone(self.zone).strftime("%Y-%m-%d %H:%M")
        late = f", {lateness(late_s)} late" if late_s else ""
        await self.bus.publish(
            JournalNote(
                summary=f"Scheduled {schedule.kind} {schedule.id} {how}: {schedule.text[:200]}"
                f" (due {local}{late})",
                tags=("schedule", schedule.kind),
                session_id=self.trunk.session.id if self.trunk and self.trunk.session else "",
            )
        )

    # -- tasks -------------------------------------------------------------------------------

    async def _run_task(self, schedule: Schedule, due: datetime, late_s: float) -> None:
        try:
            status, result = await self._task_result(schedule, due)
            await self._finish_task(schedule, due, late_s, status, result)
        finally:
            self._tasks_running.discard(schedule.id)

    async def _task_result(self, schedule: Schedule, due: datetime) -> tuple[str, str]:
        if self.ledger is not None:
            allowed, reason = await self.ledger.allows(essential=False)
            if not allowed:
                return "skipped", f"not run: {reason}"
        if self.delegator is None or self.trunk is None or self.trunk.session is None:
            return "failed", "not run: no fork could be started (the trunk is not open)"
        ctx = ToolContext(
            session_id=self.trunk.session.id,
            turn_id=f"schedule-{schedule.id}-{due.strftime('%Y%m%dT%H%M%SZ')}",
            session_kind="trunk",
            depth=0,
            extras={"origin": "agent"},
        )
        try:
            return "done", await self.delegator.delegate(ctx, schedule.text, TASK_CONTEXT)
        except ToolError as exc:
            return "failed", str(exc)
        except Exception as exc:
            log.error("scheduled task failed", schedule=schedule.id, error=repr(exc), exc_info=True)
            return "failed", f"the task could not run: {exc}"

    async def _finish_task(
        self, schedule: Schedule, due: datetime, late_s: float, status: str, result: str
    ) -> None:
        """The task's notice and fire record on one transaction; then the trunk's record."""
        head = {"done": "Task done", "failed": "Task failed", "skipped": "Task skipped"}[status]
        late = f" ({lateness(late_s)} late)" if late_s else ""
        text = f"{head}: {schedule.text}{late}\n{result}"
        now = self.clock.now()

        notice_of = new_notice(
            now=now,
            kind="task",
            text=text,
            key=fire_key(schedule.id, due),
            source="person" if schedule.requested_by == "person" else "agent",
            due_at=due,
            late_s=late_s,
            schedule_id=schedule.id,
        )
        with anyio.CancelScope(shield=True):
            notice, created = await self.store.rows.finish_fire(
                schedule.id, due, status=status, result=result, now=now, notice=notice_of
            )
            if created:
                await self.outbox.announce(notice)
            await self._note_in_trunk(schedule, due, late_s, status, result, notice.id)
        log.info("scheduled task finished", schedule=schedule.id, status=status)
        await self._journal(schedule, due, late_s, status)

    async def _note_in_trunk(
        self,
        schedule: Schedule,
        due: datetime,
        late_s: float,
        status: str,
        result: str,
        notice_id: str | None,
    ) -> None:
        trunk = self.trunk
        if trunk is None or trunk.session is None:
            return
        await trunk.session.record(
            ScheduleFired(
                schedule_id=schedule.id,
                kind=schedule.kind,
                text=schedule.text,
                due_at=iso(due),
                status=status,
                result=result,
                late_s=late_s,
                notice_id=notice_id,
                ts=iso(self.clock.now()),
            )
        )
        await self.store.rows.fire_noted(schedule.id, due, self.clock.now())

    async def recover(self) -> None:
        """Report tasks a restart interrupted; record results the trunk's transcript missed."""
        for fire in await self.store.unfinished_fires():
            schedule = await self.store.get(fire.schedule_id)
            if schedule is None:
                continue
            if fire.status == "running":
                log.warning("scheduled task interrupted by a restart", schedule=schedule.id)
                await self._finish_task(schedule, fire.due_at, fire.late_s, "failed", INTERRUPTED)
            else:
                await self._note_in_trunk(
                    schedule,
                    fire.due_at,
                    fire.late_s,
                    fire.status,
                    fire.result or "",
                    fire.notice_id,
                )

    # -- reading -----------------------------------------------------------------------------

    async def describe(self, limit: int = 5) -> dict[str, Any]:
        """The next scheduled items and the counts, for `status`."""
        return await schedule_status(self.store.rows, self.store.zone, limit)

    async def fires(self, schedule_id: str | None = None) -> list[Fire]:
        return await self.store.fires(schedule_id)
