"""The daemon's own jobs' state (`schedule_state`): when each last ran, how, and when next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database

_COLUMNS = "job, last_run, last_status, last_result, next_run, runs"


@dataclass(frozen=True, kw_only=True)
class JobState:
    """One job's row; times as stored (ISO text)."""

    job: str
    last_run: str | None
    last_status: str | None
    last_result: str | None
    next_run: str | None
    runs: int


class JobStateRepo:
    """The `schedule_state` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def all(self) -> list[JobState]:
        """Every job's state, by name."""
        rows = await self.db.fetchall(f"SELECT {_COLUMNS} FROM schedule_state ORDER BY job")
        return [
            JobState(job=j, last_run=lr, last_status=ls, last_result=res, next_run=nr, runs=int(n))
            for j, lr, ls, res, nr, n in rows
        ]

    async def save(self, state: JobState, *, at: str) -> None:
        """Write a job's state (inserted, or replacing the one kept)."""
        await self.db.execute(
            f"INSERT INTO schedule_state({_COLUMNS}, updated_at) VALUES (?,?,?,?,?,?,?)"
            " ON CONFLICT(job) DO UPDATE SET last_run = excluded.last_run,"
            " last_status = excluded.last_status, last_result = excluded.last_result,"
            " next_run = excluded.next_run, runs = excluded.runs, updated_at = excluded.updated_at",
            (
                state.job,
                state.last_run,
                state.last_status,
                state.last_result,
                state.next_run,
                state.runs,
                at,
            ),
        )
