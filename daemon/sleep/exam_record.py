"""The self-exam's record: what an exam asked and found, kept one row a sleep cycle.

`self_exams` (migration 0017) holds each exam: the score, who worded the questions, and every
item as JSON. `recent_exams` reads the last ones newest first; `exam_status` is the `self_exam`
block of `reverie status` (the score, the one before, the trend over `TREND` exams, the
misses), which `reverie exam` and the console's Now page show too. The exam itself is taken by
the sleep cycle's last step (`daemon.sleep.exam`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from daemon.store.exams import ExamRow, ExamsRepo

if TYPE_CHECKING:
    from daemon.store.db import Database

# How many exams `status` and `reverie exam` draw the trend over.
TREND = 14


@dataclass(kw_only=True)
class ExamItem:
    """One question, what answers it, and (once taken) what the context held."""

    key: str  # what it asks about: `fact:N` or `open:<n>`
    stratum: str  # week | year | older | change | open
    question: str
    expected: list[str]  # the current value's key words (stems)
    stale: list[list[str]] = field(default_factory=list)  # superseded values' key words
    about: str = ""  # the subject and attribute, or the topic words (for the misses' list)
    answer: str = ""  # the current value as the memory holds it (for the misses' list)
    need: int = 0  # how many of `expected` one line must hold (all when 0)
    result: str = ""  # hit | stale | miss
    found_in: str = ""  # the layer the answer was found in

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExamItem:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(kw_only=True)
class Exam:
    cycle_id: str
    taken_at: datetime
    worded_by: str  # offline | the dreams model | offline: … (why the model did not)
    items: list[ExamItem]

    @property
    def hits(self) -> int:
        return sum(i.result == "hit" for i in self.items)

    @property
    def score(self) -> float:
        return round(100.0 * self.hits / len(self.items), 1) if self.items else 0.0

    @property
    def misses(self) -> list[ExamItem]:
        return [i for i in self.items if i.result != "hit"]

    def to_json(self) -> dict[str, Any]:
        return {
            "cycle_id": self.cycle_id,
            "at": self.taken_at.isoformat(),
            "score": self.score,
            "questions": len(self.items),
            "hits": self.hits,
            "worded_by": self.worded_by,
            "items": [i.to_json() for i in self.items],
        }


def _exam(row: ExamRow) -> Exam:
    return Exam(
        cycle_id=row.cycle_id,
        taken_at=row.taken_at,
        worded_by=row.worded_by,
        items=[ExamItem.from_json(i) for i in row.items],
    )


async def recent_exams(db: Database, limit: int = TREND) -> list[Exam]:
    """The last `limit` exams, newest first."""
    return [_exam(r) for r in await ExamsRepo(db).recent(limit)]


async def exam_of(db: Database, cycle_id: str) -> Exam | None:
    row = await ExamsRepo(db).get(cycle_id)
    return _exam(row) if row is not None else None


async def save_exam(db: Database, exam: Exam) -> None:
    await ExamsRepo(db).add(
        ExamRow(
            cycle_id=exam.cycle_id,
            taken_at=exam.taken_at,
            worded_by=exam.worded_by,
            items=[i.to_json() for i in exam.items],
            score=exam.score,
            hits=exam.hits,
        )
    )


def miss_line(item: ExamItem) -> str:
    """`my dentist → "Dr Okafor" (stale: an older value was there)`."""
    what = f'{item.about} → "{item.answer}"'
    if item.result == "stale":
        return what + f" (only a superseded value was there, in {item.found_in})"
    return what + " (not in the context)"


def lost_items(exam: Exam, previous: Exam | None) -> list[ExamItem]:
    """What this exam missed that the previous one found (or every miss, when none overlap)."""
    if previous is None:
        return exam.misses
    found_before = {i.key for i in previous.items if i.result == "hit"}
    lost = [i for i in exam.misses if i.key in found_before]
    return lost or exam.misses


def trend_json(exams: Sequence[Exam]) -> dict[str, Any] | None:
    """`status`'s `self_exam` block from the exams newest first (None before the first)."""
    if not exams:
        return None
    last = exams[0]
    return {
        "score": last.score,
        "previous": exams[1].score if len(exams) > 1 else None,
        "trend": [e.score for e in reversed(exams)],
        "spark": sparkline([e.score for e in reversed(exams)]),
        "at": last.taken_at.isoformat(),
        "cycle_id": last.cycle_id,
        "questions": len(last.items),
        "misses": [miss_line(i) for i in last.misses],
    }


_SPARK = "▁▂▃▄▅▆▇█"


def sparkline(scores: Sequence[float]) -> str:
    """One block per exam, as high as its score (0–100): the trend in a line of text."""
    top = len(_SPARK) - 1
    return "".join(_SPARK[max(0, min(top, round(s / 100 * top)))] for s in scores)


async def exam_status(db: Database) -> dict[str, Any] | None:
    """The latest score, the one before and the trend, for `reverie status`."""
    try:
        return trend_json(await recent_exams(db))
    except Exception as exc:  # a database from before the self-exam was kept
        if "self_exams" in str(exc):
            return None
        raise
