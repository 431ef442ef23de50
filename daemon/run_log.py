"""The daemon's runs, kept in the store: when it started, when it was last seen, how it ended.

What the console's timeline draws as running comes from here, and only from here: a time
no run covers is time the daemon was not running. A run is opened as the services start
(`serve`), its `seen_at` moves every minute while it runs, and a clean stop closes it. A run
the next start finds still open ended without saying so — killed, crashed, the machine off —
and is closed as `lost` at its last sign of life, the last `seen_at` (at most a minute short).

A home that ran before the run log existed has no record of those days: the first start
that finds trunk sessions older than itself writes one `unrecorded` span for them, from the
oldest session's start to this start, so that time reads as unknown rather than off.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import anyio
from anyio.abc import TaskStatus

from daemon.clock import Clock
from daemon.log import get_logger
from daemon.store.db import Database
from daemon.store.runs import Run, RunsRepo

__all__ = ["Run", "RunLog"]

log = get_logger("run_log")

# How often a running daemon writes that it is still running (what a crash loses at most).
SEEN_EVERY_S = 60.0
# The longest a clean stop waits to record itself.
STOP_BUDGET_S = 5.0


class RunLog:
    """Reads and writes the `daemon_runs` table; `serve` records this daemon's run."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        started_at: datetime,
        seen_every_s: float = SEEN_EVERY_S,
    ) -> None:
        self.db = db
        self.rows = RunsRepo(db)
        self.clock = clock
        self.seen_every_s = seen_every_s
        # When the services began to start: trunk sessions older than this are an earlier life.
        self.started_at = started_at
        self.current: str | None = None

    async def begin(self) -> str:
        """Close the runs a crash left open, account for an unrecorded past, open this run."""
        now = self.clock.now()
        for run in await self.rows.open_runs():
            seen = run.seen_at.isoformat()
            await self.rows.close(run.id, at=seen, ended="lost")
            log.warning("the last run ended without a clean stop", run=run.id, last_seen=seen)
        if not await self.rows.any_run():
            await self._unrecorded_past()
        run_id = "run-" + uuid.uuid4().hex[:12]
        await self.rows.start(run_id, started_at=self.started_at, seen_at=now)
        self.current = run_id
        return run_id

    async def _unrecorded_past(self) -> None:
        oldest = await self.rows.oldest_trunk_session_before(self.started_at)
        if oldest:
            end = self.started_at.isoformat()
            await self.rows.add_closed(
                "run-unrecorded", started_at=oldest, stopped_at=end, ended="unrecorded"
            )

    async def seen(self) -> None:
        """Write that this run is still running, now."""
        if self.current is not None:
            await self.rows.seen(self.current, self.clock.now())

    async def end(self) -> None:
        """Close this run as a clean stop."""
        if self.current is None:
            return
        await self.rows.close(
            self.current, at=self.clock.now().isoformat(), ended="stopped", seen=True
        )
        self.current = None

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open this run, mark it seen every minute, close it when cancelled (shielded).

        A store that cannot take the record (a PostgreSQL server away) is logged and the
        daemon runs on: the record is for the console, nothing else waits on it.
        """
        try:
            await self.begin()
        except Exception as exc:  # the record is for display; never stop the daemon for it
            log.warning("could not record the daemon's start", error=str(exc))
        task_status.started()
        failing = False
        try:
            while True:
                await anyio.sleep(self.seen_every_s)
                try:
                    await self.seen()
                except Exception as exc:
                    if not failing:  # once per outage, not once a minute
                        log.warning("could not record that the daemon runs", error=str(exc))
                    failing = True
                else:
                    if failing:
                        log.info("recording that the daemon runs again")
                    failing = False
        finally:
            # Bounded like a busy SQLite store's wait, so a store that hangs cannot hold the
            # shutdown past systemd's stop timeout (the write itself takes a few ms).
            with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_BUDGET_S):
                try:
                    await self.end()
                except Exception as exc:
                    log.warning("could not record the daemon's stop", error=str(exc))

    async def runs(self, since: datetime) -> list[Run]:
        """The runs (and the unrecorded span) that reach into the time from `since` on."""
        return await self.rows.reaching(since)
