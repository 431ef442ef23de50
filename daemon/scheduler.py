"""Scheduled work: the heartbeat, WAL checkpoints, and the nightly job other systems hook.

APScheduler 3 (`AsyncIOScheduler`) runs the jobs on the daemon's event loop. Jobs are
coalesced and never overlap; a job that fails is logged with one summary line. Features
add their work with `add_interval` / `add_daily`; the scheduler holds no feature logic.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from daemon.log import bound_contextvars, get_logger

log = get_logger("scheduler")

Job = Callable[[], Awaitable[Any]]


class Scheduler:
    """Owns an APScheduler instance; `async with Scheduler() as s:` starts and stops it."""

    def __init__(self, timezone: str | None = None) -> None:
        kwargs: dict[str, Any] = {"job_defaults": {"coalesce": True, "max_instances": 1, "misfire_grace_time": 300}}
        if timezone:
            kwargs["timezone"] = timezone
        self._scheduler = AsyncIOScheduler(**kwargs)
        self.last_run: dict[str, datetime] = {}

    async def __aenter__(self) -> Scheduler:
        self._scheduler.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def _wrap(self, name: str, job: Job) -> Job:
        async def run() -> None:
            started = time.perf_counter()
            with bound_contextvars(job=name):
                try:
                    result = await job()
                    log.info("job finished", duration_ms=round((time.perf_counter() - started) * 1000, 1), result=result)
                except Exception as exc:
                    log.error("job failed", error=repr(exc), exc_info=True)
                finally:
                    self.last_run[name] = datetime.now().astimezone()

        return run

    def add_interval(self, name: str, job: Job, *, seconds: float) -> None:
        self._scheduler.add_job(self._wrap(name, job), IntervalTrigger(seconds=seconds), id=name, name=name, replace_existing=True)

    def add_daily(self, name: str, job: Job, *, at: str) -> None:
        """Run `job` every day at `at` ("HH:MM", the scheduler's timezone)."""
        hour, minute = parse_hhmm(at)
        self._scheduler.add_job(self._wrap(name, job), CronTrigger(hour=hour, minute=minute), id=name, name=name, replace_existing=True)

    def next_run(self, name: str) -> datetime | None:
        job = self._scheduler.get_job(name)
        return job.next_run_time if job is not None else None

    def jobs(self) -> list[str]:
        return [j.id for j in self._scheduler.get_jobs()]


def parse_hhmm(text: str) -> tuple[int, int]:
    try:
        hour_s, minute_s = text.split(":")
        hour, minute = int(hour_s), int(minute_s)
    except ValueError:
        raise ValueError(f"expected a time of day as HH:MM, got {text!r}") from None
    if not (0 <= hour < 24 and 0 <= minute < 60):
        raise ValueError(f"expected a time of day as HH:MM, got {text!r}")
    return hour, minute
