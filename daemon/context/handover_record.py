"""A trunk model handover as the store keeps it, and what `reverie status` says of it.

The record alone, without the desk that notices a switch and writes the letter
(`daemon.context.handover`): reading it needs the store's repositories and nothing else, so
a status read with the daemon down does not load the context's layers or the settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemon.store.exams import ExamsRepo
from daemon.store.kv import KvRepo

if TYPE_CHECKING:
    from daemon.store.db import Database

MODEL_KEY = "handover.trunk_model"
PENDING_KEY = "handover.pending"
LAST_KEY = "handover.last"


@dataclass(frozen=True, kw_only=True)
class Handover:
    """One switch of the trunk's model."""

    from_model: str
    to_model: str
    at: datetime  # when the daemon noticed it (its start)
    until: datetime | None = None  # the old model's last answered turn
    exam_before: dict[str, Any] | None = None  # the last self-exam on the old model
    delivered_at: datetime | None = None
    turn_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.from_model,
            "to": self.to_model,
            "at": self.at.isoformat(),
            "until": self.until.isoformat() if self.until else None,
            "exam_before": self.exam_before,
            "delivered_at": self.delivered_at.isoformat() if self.delivered_at else None,
            "turn_id": self.turn_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Handover:
        def when(v: object) -> datetime | None:
            return datetime.fromisoformat(v) if isinstance(v, str) and v else None

        at = when(data.get("at"))
        return cls(
            from_model=str(data["from"]),
            to_model=str(data["to"]),
            at=at or datetime.now(UTC),
            until=when(data.get("until")),
            exam_before=data.get("exam_before"),
            delivered_at=when(data.get("delivered_at")),
            turn_id=str(data.get("turn_id") or ""),
        )


async def read_record(db: Database, key: str) -> dict[str, Any] | None:
    """The JSON object kept under `key`, or None (absent, or not an object)."""
    raw = await KvRepo(db).get(key)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


async def last_exam(db: Database, *, after: datetime | None = None) -> dict[str, Any] | None:
    """The newest self-exam (or the first after `after`), when the home keeps them."""
    try:
        exam = await ExamsRepo(db).score(after=after)
    except Exception:  # a store from before the self-exam
        return None
    if exam is None:
        return None
    return {"score": exam.score, "taken_at": exam.taken_at, "cycle_id": exam.cycle_id}


async def handover_status(db: Database) -> dict[str, Any] | None:
    """For `reverie status`: the pending handover, else the last one, with the exam scores."""
    pending = await read_record(db, PENDING_KEY)
    data = pending or await read_record(db, LAST_KEY)
    if not data:
        return None
    h = Handover.from_json(data)
    out = h.to_json()
    out["pending"] = pending is not None
    out["exam_after"] = data.get("exam_after") or await last_exam(db, after=h.at)
    return out
