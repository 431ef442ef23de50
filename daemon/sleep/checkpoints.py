"""The sleep cycle's checkpoints in the database (`sleep_cycles`, `sleep_phases`).

A phase's `done` row (with its report) is written in one statement after the phase's own
writes, so after a crash the cycle knows exactly which phases completed: it resumes at the
first one without a `done` (or `skipped`/`deferred`) row and never runs a completed one again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from daemon.sleep.phases import PhaseReport
from daemon.store.sleep_cycles import CycleRecord, SleepCyclesRepo

__all__ = ["FINAL", "Checkpoints", "CycleRecord", "PhaseRecord", "PhaseStatus"]


class PhaseStatus(enum.StrEnum):
    """How a sleep phase's row stands (the strings are what `sleep_phases.status` holds)."""

    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"
    DEFERRED = "deferred"
    FAILED = "failed"


# A phase in one of these never runs again in its cycle.
FINAL = frozenset({PhaseStatus.DONE, PhaseStatus.SKIPPED, PhaseStatus.DEFERRED})


@dataclass(kw_only=True)
class PhaseRecord:
    phase: str
    seq: int
    status: str
    attempts: int
    started_at: str | None
    finished_at: str | None
    report: PhaseReport | None
    error: str | None


class Checkpoints(SleepCyclesRepo):
    """Reads and writes one home's sleep checkpoints: the repository, with each phase's report
    read and written as the sleep cycle's `PhaseReport`."""

    async def phases(self, cycle_id: str) -> dict[str, PhaseRecord]:
        return {
            name: PhaseRecord(
                phase=r.phase,
                seq=r.seq,
                status=r.status,
                attempts=r.attempts,
                started_at=r.started_at,
                finished_at=r.finished_at,
                report=PhaseReport.from_json(r.report) if r.report is not None else None,
                error=r.error,
            )
            for name, r in (await self.phase_rows(cycle_id)).items()
        }

    async def phase_finished(
        self,
        cycle_id: str,
        phase: str,
        seq: int,
        *,
        status: str,
        at: datetime,
        report: PhaseReport | None = None,
        error: str | None = None,
    ) -> None:
        if status not in FINAL:
            raise ValueError(f"a phase ends as one of {sorted(FINAL)}, not {status!r}")
        await self.phase_ended(
            cycle_id,
            phase,
            seq,
            status=status,
            at=at,
            report=report.to_json() if report else None,
            error=error,
        )


def cycle_json(record: CycleRecord) -> dict[str, Any]:
    """A sleep cycle as `status` shows it (the running daemon's and a stopped one's)."""
    return {
        "cycle_id": record.id,
        "reason": record.reason,
        "started_at": record.started_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
        "old_session_id": record.session_id,
        "new_session_id": record.new_session_id,
        "woke_early": record.woke_early,
        "deferred": record.deferred,
    }
