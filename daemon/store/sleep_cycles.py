"""The sleep cycle's checkpoints (`sleep_cycles`, `sleep_phases`): a cycle's row, a row per phase.

A phase's report is kept as its JSON object here; `daemon.sleep.checkpoints` reads it as the
sleep cycle's `PhaseReport`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(kw_only=True)
class CycleRecord:
    id: str
    reason: str
    session_id: str
    started_at: datetime
    status: str
    finished_at: datetime | None = None
    new_session_id: str | None = None
    woke_early: bool = False
    deferred: list[str] = field(default_factory=list)
    resumed: int = 0


@dataclass(kw_only=True)
class PhaseRow:
    phase: str
    seq: int
    status: str
    attempts: int
    started_at: str | None
    finished_at: str | None
    report: dict[str, Any] | None  # the phase's report, as its JSON object
    error: str | None


def _cycle(row: Any) -> CycleRecord:
    return CycleRecord(
        id=row[0],
        reason=row[1],
        session_id=row[2],
        started_at=datetime.fromisoformat(row[3]),
        finished_at=datetime.fromisoformat(row[4]) if row[4] else None,
        status=row[5],
        new_session_id=row[6],
        woke_early=bool(row[7]),
        deferred=list(json.loads(row[8])) if row[8] else [],
        resumed=int(row[9]),
    )


_CYCLE_COLS = "id, reason, session_id, started_at, finished_at, status, new_session_id, woke_early, deferred, resumed"


class SleepCyclesRepo:
    """The `sleep_cycles` and `sleep_phases` tables."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def unfinished(self) -> CycleRecord | None:
        row = await self.db.fetchone(
            f"SELECT {_CYCLE_COLS} FROM sleep_cycles WHERE status = 'running' ORDER BY started_at DESC LIMIT 1"
        )
        return _cycle(row) if row else None

    async def last_finished(self) -> CycleRecord | None:
        row = await self.db.fetchone(
            f"SELECT {_CYCLE_COLS} FROM sleep_cycles WHERE status = 'done' ORDER BY finished_at DESC LIMIT 1"
        )
        return _cycle(row) if row else None

    async def completed_since(self, phase: str, *, before: str) -> datetime | None:
        """When the last cycle (other than `before`) in which `phase` ran to completion finished.

        A cycle that deferred or skipped the phase does not count, so the phase's next run
        reaches back over it; None when the phase never completed.
        """
        row = await self.db.fetchone(
            "SELECT c.finished_at FROM sleep_cycles c JOIN sleep_phases p ON p.cycle_id = c.id"
            " WHERE p.phase = ? AND p.status = 'done' AND c.finished_at IS NOT NULL AND c.id != ?"
            " ORDER BY c.finished_at DESC LIMIT 1",
            (phase, before),
        )
        return datetime.fromisoformat(row[0]) if row else None

    async def get(self, cycle_id: str) -> CycleRecord | None:
        row = await self.db.fetchone(
            f"SELECT {_CYCLE_COLS} FROM sleep_cycles WHERE id = ?", (cycle_id,)
        )
        return _cycle(row) if row else None

    async def cycles(self, limit: int = 20) -> list[CycleRecord]:
        rows = await self.db.fetchall(
            f"SELECT {_CYCLE_COLS} FROM sleep_cycles ORDER BY started_at DESC LIMIT ?", (limit,)
        )
        return [_cycle(r) for r in rows]

    async def begin(
        self, *, cycle_id: str, reason: str, session_id: str, at: datetime
    ) -> CycleRecord:
        await self.db.execute(
            "INSERT INTO sleep_cycles(id, reason, session_id, started_at, status) VALUES (?,?,?,?, 'running')",
            (cycle_id, reason, session_id, at.isoformat()),
        )
        return CycleRecord(
            id=cycle_id, reason=reason, session_id=session_id, started_at=at, status="running"
        )

    async def mark_resumed(self, cycle_id: str) -> None:
        await self.db.execute(
            "UPDATE sleep_cycles SET resumed = resumed + 1 WHERE id = ?", (cycle_id,)
        )

    async def finish(
        self,
        cycle_id: str,
        *,
        at: datetime,
        status: str,
        new_session_id: str | None,
        woke_early: bool,
        deferred: list[str],
    ) -> None:
        await self.db.execute(
            "UPDATE sleep_cycles SET finished_at = ?, status = ?, new_session_id = COALESCE(?, new_session_id),"
            " woke_early = ?, deferred = ? WHERE id = ?",
            (
                at.isoformat(),
                status,
                new_session_id,
                int(woke_early),
                json.dumps(deferred),
                cycle_id,
            ),
        )

    async def set_new_session(self, cycle_id: str, session_id: str) -> None:
        await self.db.execute(
            "UPDATE sleep_cycles SET new_session_id = ? WHERE id = ?", (session_id, cycle_id)
        )

    async def phase_rows(self, cycle_id: str) -> dict[str, PhaseRow]:
        """The cycle's phases by name, in order."""
        rows = await self.db.fetchall(
            "SELECT phase, seq, status, attempts, started_at, finished_at, report, error FROM sleep_phases"
            " WHERE cycle_id = ? ORDER BY seq",
            (cycle_id,),
        )
        return {
            r[0]: PhaseRow(
                phase=r[0],
                seq=r[1],
                status=r[2],
                attempts=r[3],
                started_at=r[4],
                finished_at=r[5],
                report=dict(json.loads(r[6])) if r[6] else None,
                error=r[7],
            )
            for r in rows
        }

    async def phase_started(self, cycle_id: str, phase: str, seq: int, at: datetime) -> int:
        """Record an attempt of `phase`; return the number of attempts so far (this one included)."""
        await self.db.execute(
            "INSERT INTO sleep_phases(cycle_id, phase, seq, status, attempts, started_at) VALUES (?,?,?, 'running', 1, ?)"
            " ON CONFLICT(cycle_id, phase) DO UPDATE SET attempts = sleep_phases.attempts + 1,"
            " status = 'running'",
            (cycle_id, phase, seq, at.isoformat()),
        )
        row = await self.db.fetchone(
            "SELECT attempts FROM sleep_phases WHERE cycle_id = ? AND phase = ?", (cycle_id, phase)
        )
        return int(row[0]) if row else 1

    async def phase_error(self, cycle_id: str, phase: str, error: str) -> None:
        await self.db.execute(
            "UPDATE sleep_phases SET error = ? WHERE cycle_id = ? AND phase = ?",
            (error[:2000], cycle_id, phase),
        )

    async def phase_ended(
        self,
        cycle_id: str,
        phase: str,
        seq: int,
        *,
        status: str,
        at: datetime,
        report: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """A phase's end, in one statement (after the phase's own writes); an error already
        noted is kept when this one has none."""
        await self.db.execute(
            "INSERT INTO sleep_phases(cycle_id, phase, seq, status, attempts, started_at, finished_at, report, error)"
            " VALUES (?,?,?,?,0,?,?,?,?) ON CONFLICT(cycle_id, phase) DO UPDATE SET status = excluded.status,"
            " finished_at = excluded.finished_at, report = excluded.report, error = COALESCE(excluded.error, sleep_phases.error)",
            (
                cycle_id,
                phase,
                seq,
                status,
                at.isoformat(),
                at.isoformat(),
                json.dumps(report, ensure_ascii=False) if report is not None else None,
                error[:2000] if error else None,
            ),
        )
