"""The sleep self-exam's record (`self_exams`, migration 0017): one row a sleep cycle."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database

_COLUMNS = "cycle_id, taken_at, worded_by, items"


@dataclass(frozen=True, kw_only=True)
class ExamRow:
    """One exam as stored: its items are plain JSON objects (daemon.sleep.exam_record reads them)."""

    cycle_id: str
    taken_at: datetime
    worded_by: str
    items: list[dict[str, Any]] = field(default_factory=list)
    # Kept beside the items for readers of the table alone; the items are the truth.
    score: float = 0.0
    hits: int = 0


@dataclass(frozen=True, kw_only=True)
class ExamScore:
    """An exam's stored score and when it was taken (as stored, ISO)."""

    cycle_id: str
    taken_at: str
    score: float


def _row(row: Sequence[Any]) -> ExamRow:
    return ExamRow(
        cycle_id=str(row[0]),
        taken_at=datetime.fromisoformat(str(row[1])),
        worded_by=str(row[2]),
        items=list(json.loads(row[3] or "[]")),
    )


class ExamsRepo:
    """The `self_exams` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def recent(self, limit: int) -> list[ExamRow]:
        """The last `limit` exams, newest first."""
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM self_exams ORDER BY taken_at DESC, cycle_id DESC LIMIT ?",
            (limit,),
        )
        return [_row(r) for r in rows]

    async def get(self, cycle_id: str) -> ExamRow | None:
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM self_exams WHERE cycle_id = ?", (cycle_id,)
        )
        return _row(row) if row is not None else None

    async def score(self, *, after: datetime | None = None) -> ExamScore | None:
        """The newest exam's score, or (`after`) the first exam's taken after that time
        (None: no such exam)."""
        if after is None:
            row = await self.db.fetchone(
                "SELECT cycle_id, taken_at, score FROM self_exams"
                " ORDER BY taken_at DESC, cycle_id DESC LIMIT 1"
            )
        else:
            row = await self.db.fetchone(
                "SELECT cycle_id, taken_at, score FROM self_exams WHERE taken_at > ?"
                " ORDER BY taken_at, cycle_id LIMIT 1",
                (after.isoformat(),),
            )
        if row is None:
            return None
        return ExamScore(cycle_id=str(row[0]), taken_at=str(row[1]), score=float(row[2]))

    async def add(self, exam: ExamRow) -> None:
        """Keep an exam; a cycle's exam is kept once (a resumed cycle's second is dropped)."""
        await self.db.execute(
            "INSERT INTO self_exams(cycle_id, taken_at, score, questions, hits, worded_by, items)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(cycle_id) DO NOTHING",
            (
                exam.cycle_id,
                exam.taken_at.isoformat(),
                exam.score,
                len(exam.items),
                exam.hits,
                exam.worded_by,
                json.dumps(exam.items, ensure_ascii=False),
            ),
        )
