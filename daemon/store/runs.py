"""The daemon's runs (`daemon_runs`): when each started, was last seen, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database

_COLUMNS = "id, started_at, seen_at, stopped_at, ended"


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


def _run(row: tuple[str, str, str, str | None, str | None]) -> Run:
    run_id, began, seen, stopped, ended = row
    return Run(
        id=str(run_id),
        started_at=datetime.fromisoformat(began),
        seen_at=datetime.fromisoformat(seen),
        stopped_at=datetime.fromisoformat(stopped) if stopped else None,
        ended=ended,
    )


class RunsRepo:
    """The `daemon_runs` table (and the one fact about sessions it needs: the oldest)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def open_runs(self) -> list[Run]:
        """Runs never closed (a crash, a kill), oldest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM daemon_runs WHERE stopped_at IS NULL ORDER BY started_at"
        )
        return [_run(tuple(r)) for r in rows]

    async def any_run(self) -> bool:
        return await self.db.fetchone("SELECT 1 FROM daemon_runs LIMIT 1") is not None

    async def start(self, run_id: str, *, started_at: datetime, seen_at: datetime) -> None:
        await self.db.execute(
            "INSERT INTO daemon_runs(id, started_at, seen_at) VALUES (?, ?, ?)",
            (run_id, started_at.isoformat(), seen_at.isoformat()),
        )

    async def add_closed(
        self, run_id: str, *, started_at: str, stopped_at: str, ended: str
    ) -> None:
        """A run known only afterwards (the `unrecorded` past), closed as `ended`."""
        await self.db.execute(
            "INSERT INTO daemon_runs(id, started_at, seen_at, stopped_at, ended)"
            " VALUES (?, ?, ?, ?, ?)",
            (run_id, started_at, stopped_at, stopped_at, ended),
        )

    async def seen(self, run_id: str, at: datetime) -> None:
        await self.db.execute(
            "UPDATE daemon_runs SET seen_at = ? WHERE id = ?", (at.isoformat(), run_id)
        )

    async def close(self, run_id: str, *, at: str, ended: str, seen: bool = False) -> None:
        """Close a run at `at` as `ended`; `seen` moves its last sign of life there too."""
        if seen:
            await self.db.execute(
                "UPDATE daemon_runs SET seen_at = ?, stopped_at = ?, ended = ? WHERE id = ?",
                (at, at, ended, run_id),
            )
        else:
            await self.db.execute(
                "UPDATE daemon_runs SET stopped_at = ?, ended = ? WHERE id = ?",
                (at, ended, run_id),
            )

    async def reaching(self, since: datetime) -> list[Run]:
        """The runs (and the unrecorded span) that reach into the time from `since` on."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM daemon_runs"
            " WHERE stopped_at IS NULL OR stopped_at >= ? OR seen_at >= ? ORDER BY started_at",
            (since.isoformat(), since.isoformat()),
        )
        return [_run(tuple(r)) for r in rows]

    async def last_closed_before(self, started_at: datetime) -> Run | None:
        """The latest closed run that started before `started_at`."""
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM daemon_runs"
            " WHERE started_at < ? AND stopped_at IS NOT NULL ORDER BY started_at DESC LIMIT 1",
            (started_at.isoformat(),),
        )
        return _run(tuple(row)) if row is not None else None

    async def oldest_trunk_session_before(self, when: datetime) -> str | None:
        """When the oldest trunk session that began before `when` began (ISO), if any."""
        row = await self.db.fetchone(
            "SELECT MIN(started_at) FROM sessions WHERE kind = 'trunk' AND started_at < ?",
            (when.isoformat(),),
        )
        return str(row[0]) if row and row[0] else None
