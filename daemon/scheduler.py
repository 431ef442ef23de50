"""Scheduled work, driven by the daemon's injectable clock and run in its own task group.

Features add jobs (`add_interval`, `add_daily`); the scheduler holds no feature logic.
APScheduler 3 supplies the cron arithmetic (days, time zones, DST); the lifecycle is ours:
`async with Scheduler(...) as s: await tg.start(s.run)` — jobs run in the scheduler's task
group, so cancelling the daemon cancels and awaits them.

Policy:
- a job never overlaps itself; a run that comes due while the previous one still runs is
  skipped (recorded), not queued;
- each job's last run is persisted (`schedule_state`), so a restart knows what it missed;
- a *catch-up* job (the daily ones) whose run was missed while the daemon was down (or the
  machine suspended) runs once at start — never once per missed day — and that catch-up
  stands in for the next regular run when that is less than half a period away;
- interval jobs are not caught up: they simply run one interval after start;
- `missed` counts a job's regular runs that fell in a time down, and says whether a catch-up
  stands for them (the first greeting after the start tells them);
- a *timer* job (`add_timer`) runs only when its owner sets it (`set_timer`): one wake-up at
  the instant its owner computed (the schedules keeper's next due schedule), none otherwise;
- the loop wakes at least once a minute of wall time, so a suspend or a clock change is
  noticed within a minute, and an idle daemon costs nothing else.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from apscheduler.triggers.cron import CronTrigger

from daemon.clock import Clock
from daemon.clock import local_zone as local_zone  # where the daemon's modules look for it
from daemon.clock import parse_hhmm as parse_hhmm
from daemon.log import bound_contextvars, get_logger
from daemon.store.db import Database
from daemon.store.job_state import JobState, JobStateRepo

log = get_logger("scheduler")

Job = Callable[[], Awaitable[Any]]
MISSED_MAX = 3660


@dataclass(frozen=True, kw_only=True)
class MissedRuns:
    """A job's regular runs that fell in a time the daemon was down (`Scheduler.missed`)."""

    job: str
    count: int
    first: datetime | None
    last: datetime | None
    caught_up: bool  # one run at this start stood in for them
    catch_up: bool  # the job is one that catches up
    ran_before: bool  # it had run, or been due, in this home before the time down
    every: timedelta | None  # an interval job's period; None for a daily one


@dataclass(kw_only=True)
class _Job:
    name: str
    run: Job
    interval: timedelta | None = None
    cron: CronTrigger | None = None
    jitter_s: float = 0.0
    catch_up: bool = False
    next_run: datetime | None = None
    last_run: datetime | None = None
    last_status: str | None = None
    last_result: str | None = None
    runs: int = 0
    running: bool = False
    catching_up: bool = False
    # A timer job: runs at the instant `set_timer` gave, once; `rearm` notes a setting that
    # came due while it still ran (it runs again as soon as it ends).
    timer: bool = False
    rearm: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def following(self, after: datetime) -> datetime:
        """The first regular run strictly after `after` (jitter added for cron jobs)."""
        if self.interval is not None:
            return after + self.interval
        assert self.cron is not None
        nxt = self.cron.get_next_fire_time(None, after + timedelta(microseconds=1))
        assert nxt is not None
        if self.jitter_s:
            nxt = nxt + timedelta(seconds=random.uniform(0, self.jitter_s))
        return nxt


class Scheduler:
    """Runs jobs on the clock; persists their state in the store."""

    def __init__(
        self,
        *,
        clock: Clock,
        db: Database | None,
        timezone: str | None = None,
        max_nap_s: float = 60.0,
    ) -> None:
        self.clock = clock
        self.db = db
        self.zone = local_zone(timezone)
        self.max_nap_s = max_nap_s
        self._jobs: dict[str, _Job] = {}
        self._tg: TaskGroup | None = None
        self._nap: anyio.CancelScope | None = None
        self._persisted: dict[str, JobState] = {}

    async def __aenter__(self) -> Scheduler:
        if self.db is not None:
            self._persisted = {s.job: s for s in await JobStateRepo(self.db).all()}
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._tg = None

    # -- adding jobs -------------------------------------------------------------------------

    def add_interval(self, name: str, job: Job, *, seconds: float) -> None:
        """Run `job` every `seconds` (first run one interval after start; no catch-up)."""
        if seconds <= 0:
            raise ValueError(f"job {name!r}: the interval must be positive, got {seconds}")
        self._add(_Job(name=name, run=job, interval=timedelta(seconds=seconds)))

    def add_daily(
        self, name: str, job: Job, *, at: str, jitter_s: float = 0.0, catch_up: bool = True
    ) -> None:
        """Run `job` every day at `at` ("HH:MM" in the scheduler's time zone), plus up to `jitter_s`."""
        hour, minute = parse_hhmm(at)
        cron = CronTrigger(hour=hour, minute=minute, timezone=self.zone)
        self._add(
            _Job(name=name, run=job, cron=cron, jitter_s=max(0.0, jitter_s), catch_up=catch_up)
        )

    def add_timer(self, name: str, job: Job) -> None:
        """Add a job that runs when `set_timer(name, at)` says, once per setting."""
        self._add(_Job(name=name, run=job, timer=True))

    def set_timer(self, name: str, at: datetime | None) -> None:
        """Run timer job `name` at `at` (None: not at all until set again)."""
        job = self._jobs.get(name)
        if job is None or not job.timer:
            raise ValueError(f"no timer job named {name!r}")
        job.next_run = at
        self._poke()

    def _add(self, job: _Job) -> None:
        if job.name in self._jobs:
            raise ValueError(f"a job named {job.name!r} is already scheduled")
        saved = self._persisted.get(job.name)
        if saved is not None:
            job.last_status, job.last_result, job.runs = (
                saved.last_status,
                saved.last_result,
                saved.runs,
            )
            job.last_run = datetime.fromisoformat(saved.last_run) if saved.last_run else None
            due = saved.next_run
            job.extra["due_when_stopped"] = datetime.fromisoformat(due) if due else None
        now = self.clock.now()
        job.next_run = self._first_run(job, now)
        self._jobs[job.name] = job
        self._poke()

    def _first_run(self, job: _Job, now: datetime) -> datetime | None:
        if job.timer:
            return None
        regular = (
            job.following(now - timedelta(microseconds=1))
            if job.cron is not None
            else job.following(now)
        )
        # What the job last did before this start: `missed` counts from it.
        job.extra["last_run_at_start"] = job.last_run
        # A job that never ran still missed its run when an earlier start had it due before now
        # (a daemon up only by day never ran its nightly job, and never would catch it up).
        due: datetime | None = job.extra.get("due_when_stopped")
        if not job.catch_up or (job.last_run is None and due is None):
            return regular
        missed = job.following(job.last_run) if job.last_run is not None else due
        assert missed is not None
        # The jitter of the missed run does not matter: it was due before now or it was not.
        if missed < now and regular > now:
            job.catching_up = True
            job.extra["caught_up"] = True
            log.info(
                "a scheduled run was missed while the daemon was down; catching up once",
                job=job.name,
                missed=missed.isoformat(),
            )
            return now
        return regular

    # -- running -----------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run due jobs until cancelled; cancellation cancels and awaits running jobs."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for job in list(self._jobs.values()):
                if job.catch_up and job.name not in self._persisted and job.next_run is not None:
                    # Its first due time is kept, so a start after it knows the run was missed.
                    await self._persist(job, status_only="scheduled")
            task_status.started()
            while True:
                now = self.clock.now()
                for job in list(self._jobs.values()):
                    if job.next_run is not None and job.next_run <= now:
                        await self._due(job, now)
                wake = min(
                    (j.next_run for j in self._jobs.values() if j.next_run is not None),
                    default=None,
                )
                nap = (
                    self.max_nap_s
                    if wake is None
                    else min(self.max_nap_s, max(0.0, (wake - self.clock.now()).total_seconds()))
                )
                with anyio.CancelScope() as self._nap:
                    await self.clock.sleep(nap)
                self._nap = None

    def _poke(self) -> None:
        if self._nap is not None:
            self._nap.cancel()

    async def _due(self, job: _Job, now: datetime) -> None:
        assert self._tg is not None
        if job.timer:
            job.next_run = None
            if job.running:
                job.rearm = True
                return
            job.running = True
            job.last_run = now
            job.runs += 1
            self._tg.start_soon(self._execute, job, name=f"job:{job.name}")
            return
        scheduled = job.next_run
        following = job.following(now)
        if job.catching_up and job.cron is not None and scheduled is not None:
            # The catch-up stands in for a regular run that would come too soon after it.
            period = job.following(following) - following
            if following - now < period / 2:
                following = job.following(following)
        job.catching_up = False
        job.next_run = following
        if job.running:
            log.info("job still running; this run is skipped", job=job.name)
            await self._persist(job, status_only="skipped")
            return
        job.running = True
        job.last_run = now
        job.runs += 1
        await self._persist(job)
        self._tg.start_soon(self._execute, job, name=f"job:{job.name}")

    async def _execute(self, job: _Job) -> None:
        started = time.perf_counter()
        with bound_contextvars(job=job.name):
            try:
                result = await job.run()
                job.last_status, job.last_result = (
                    "ok",
                    None if result is None else str(result)[:500],
                )
                log.info(
                    "job finished",
                    duration_ms=round((time.perf_counter() - started) * 1000, 1),
                    result=job.last_result,
                )
            except anyio.get_cancelled_exc_class():
                job.last_status, job.last_result = "cancelled", None
                raise
            except Exception as exc:
                job.last_status, job.last_result = "failed", repr(exc)[:500]
                log.error("job failed", error=repr(exc), exc_info=True)
            finally:
                job.running = False
                if job.rearm:
                    job.rearm = False
                    job.next_run = self.clock.now()
                    self._poke()
                with anyio.CancelScope(shield=True):
                    await self._persist(job)

    async def _persist(self, job: _Job, *, status_only: str | None = None) -> None:
        if self.db is None or self.db.readonly:
            return
        status = status_only or job.last_status
        await JobStateRepo(self.db).save(
            JobState(
                job=job.name,
                last_run=job.last_run.isoformat() if job.last_run else None,
                last_status=status,
                last_result=job.last_result,
                next_run=job.next_run.isoformat() if job.next_run else None,
                runs=job.runs,
            ),
            at=self.clock.now().isoformat(),
        )

    # -- reading -----------------------------------------------------------------------------

    def next_run(self, name: str) -> datetime | None:
        job = self._jobs.get(name)
        return job.next_run if job is not None else None

    def last_run(self, name: str) -> datetime | None:
        job = self._jobs.get(name)
        return job.last_run if job is not None else None

    def jobs(self) -> list[str]:
        return sorted(self._jobs)

    def missed(self, name: str, since: datetime, until: datetime) -> MissedRuns | None:
        """The regular runs of job `name` that fell in (`since`, `until`) — a time the daemon
        was not running — and whether one run at start stood in for them (None: no such job).

        Counted from the job's rule, jitter left out: a daily job's times of day, an interval
        job's steps from its last run before this start (else from `since`).
        """
        job = self._jobs.get(name)
        if job is None or job.timer or until <= since:
            return None
        first: datetime | None = None
        last: datetime | None = None
        count = 0
        if job.interval is not None:
            anchor = job.extra.get("last_run_at_start") or since
            step = job.interval
            if anchor > since:
                anchor = since
            # The steps anchor + k·step inside (since, until), counted without walking them.
            lo = int((since - anchor) / step) + 1
            hi = int((until - anchor) / step)
            if (until - anchor) % step == timedelta(0):
                hi -= 1
            count = max(0, hi - lo + 1)
            if count:
                first, last = anchor + lo * step, anchor + hi * step
        else:
            assert job.cron is not None
            at = job.cron.get_next_fire_time(None, since + timedelta(microseconds=1))
            # Bounded: ten years of a daily job.
            while at is not None and at < until and count < MISSED_MAX:
                first = first or at
                last = at
                count += 1
                at = job.cron.get_next_fire_time(None, at + timedelta(microseconds=1))
        return MissedRuns(
            job=name,
            count=count,
            first=first,
            last=last,
            caught_up=bool(job.extra.get("caught_up")) and count > 0,
            catch_up=job.catch_up,
            ran_before=job.extra.get("last_run_at_start") is not None
            or job.extra.get("due_when_stopped") is not None,
            every=job.interval,
        )

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every job's schedule and last outcome, for `status`."""
        return {
            j.name: {
                "next_run": j.next_run.isoformat() if j.next_run else None,
                "last_run": j.last_run.isoformat() if j.last_run else None,
                "last_status": j.last_status,
                "last_result": j.last_result,
                "runs": j.runs,
                "running": j.running,
            }
            for j in sorted(self._jobs.values(), key=lambda j: j.name)
        }
