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
from dataclasses import dataclass
from datetime import datetime

import anyio
from anyio.abc import TaskStatus

from daemon.clock import Clock
from daemon.log import get_logger
from daemon.store.db import Database

log = get_logger("run_log")

# How often a running daemon writes that it is still running (what a crash loses at most).
SEEN_EVERY_S = 60.0
# The longest a clean stop waits to record itself.
STOP_BUDGET_S = 5.0


@dataclass(frozen=True, kw_only=True)
class Run:
    id: str
    started_at: datetime
    seen_at: datetime
    stopped_at: datetime | None
    ended: str | None  # None while it runs | stopped | lost | unrecorded

    @property
    def until(self) -> datetime:
        """When it stopped, or the last time it was seen running."""
        return self.stopped_at or self.seen_at


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
        self.clock = clock
        self.seen_every_s = seen_every_s
        # When the services began to start: trunk sessions older than this are an earlier life.
        self.started_at = started_at
        self.current: str | None = None

    async def begin(self) -> str:
        """Close the runs a crash left open, account for an unrecorded past, open this run."""
        now = self.clock.now().isoformat()
        lost = await self.db.fetchall(
            "SELECT id, seen_at FROM daemon_runs WHERE stopped_at IS NULL ORDER BY started_at"
        )
        for run_id, seen in lost:
            await self.db.execute(
                "UPDATE daemon_runs SET stopped_at = ?, ended = 'lost' WHERE id = ?",
                (seen, run_id),
            )
            log.warning("the last run ended without a clean stop", run=run_id, last_seen=seen)
        if await self.db.fetchone("SELECT 1 FROM daemon_runs LIMIT 1") is None:
            await self._unrecorded_past()
        run_id = "run-" + uuid.uuid4().hex[:12]
        await self.db.execute(
            "INSERT INTO daemon_runs(id, started_at, seen_at) VALUES (?, ?, ?)",
            (run_id, self.started_at.isoformat(), now),
        )
        self.current = run_id
        return run_id

    async def _unrecorded_past(self) -> None:
        row = await self.db.fetchone(
            "SELECT MIN(started_at) FROM sessions WHERE kind = 'trunk' AND started_at < ?",
            (self.started_at.isoformat(),),
        )
        oldest = row[0] if row else None
        if oldest:
            end = self.started_at.isoformat()
            await self.db.execute(
                "INSERT INTO daemon_runs(id, started_at, seen_at, stopped_at, ended)"
                " VALUES (?, ?, ?, ?, 'unrecorded')",
                ("run-unrecorded", oldest, end, end),
            )

    async def seen(self) -> None:
        """Write that this run is still running, now."""
        if self.current is not None:
            await self.db.execute(
                "UPDATE daemon_runs SET seen_at = ? WHERE id = ?",
                (self.clock.now().isoformat(), self.current),
            )

    async def end(self) -> None:
        """Close this run as a clean stop."""
        if self.current is None:
            return
        now = self.clock.now().isoformat()
        await self.db.execute(
            "UPDATE daemon_runs SET seen_at = ?, stopped_at = ?, ended = 'stopped' WHERE id = ?",
            (now, now, self.current),
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
        rows = await self.db.fetchall(
            "SELECT id, started_at, seen_at, stopped_at, ended FROM daemon_runs"
            " WHERE stopped_at IS NULL OR stopped_at >= ? OR seen_at >= ? ORDER BY started_at",
            (since.isoformat(), since.isoformat()),
        )
        out = []
        for run_id, began, seen, stopped, ended in rows:
            out.append(
                Run(
                    id=str(run_id),
                    started_at=datetime.fromisoformat(began),
                    seen_at=datetime.fromisoformat(seen),
                    stopped_at=datetime.fromisoformat(stopped) if stopped else None,
                    ended=ended,
                )
            )
        return out
