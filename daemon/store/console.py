"""The web console's read-only queries: the Now timeline, the Context, Charts, Memory and
Journal pages. Each returns rows as stored (times as their ISO text); the page reads them.

Nothing here writes. The tables belong to other systems (sleep cycles, turn reports, forks,
schedule firings, messages, memories); these are the console's own views across them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class CycleSpan:
    """A sleep cycle, and when its wind-down phase finished (None: not yet, or never ran)."""

    started_at: str
    finished_at: str | None
    wind_down_end: str | None


@dataclass(frozen=True, kw_only=True)
class TurnMark:
    turn_id: str
    ts: str
    context_tokens: int


@dataclass(frozen=True, kw_only=True)
class ForkMark:
    id: str
    started_at: str
    ended_at: str | None
    status: str
    parent_turn_id: str


@dataclass(frozen=True, kw_only=True)
class CycleMark:
    id: str
    started_at: str
    finished_at: str | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class FireMark:
    schedule_id: str
    due_at: str
    status: str


@dataclass(frozen=True, kw_only=True)
class TurnReportRow:
    turn_id: str
    session_id: str
    ts: str
    context_tokens: int
    report: str  # the turn's context report, as its stored JSON text


@dataclass(frozen=True, kw_only=True)
class MemoryDay:
    day: str  # UTC date of creation
    kind: str
    count: int


@dataclass(frozen=True, kw_only=True)
class SummaryRow:
    uid: str
    title: str
    text: str
    created_at: str
    source: str


_REPORT_COLUMNS = "turn_id, session_id, ts, context_tokens, report"


def _report(r: Sequence[Any]) -> TurnReportRow:
    return TurnReportRow(
        turn_id=str(r[0]),
        session_id=str(r[1]),
        ts=str(r[2]),
        context_tokens=int(r[3]),
        report=str(r[4] or ""),
    )


class ConsoleQueries:
    """What the console's pages read from the store."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- Now: the timeline -----------------------------------------------------------------
    async def sleep_spans(self, *, wind_down: str, since: str) -> list[CycleSpan]:
        """Cycles still running or finished at `since` or later, with their wind-down's end."""
        rows = await self.db.fetchall(
            "SELECT c.started_at, c.finished_at, p.finished_at"
            " FROM sleep_cycles c LEFT JOIN sleep_phases p ON p.cycle_id = c.id AND p.phase = ?"
            " WHERE c.finished_at IS NULL OR c.finished_at >= ? ORDER BY c.started_at",
            (wind_down, since),
        )
        return [CycleSpan(started_at=a, finished_at=b, wind_down_end=c) for a, b, c in rows]

    async def turns_since(self, since: str) -> list[TurnMark]:
        rows = await self.db.fetchall(
            "SELECT turn_id, ts, context_tokens FROM turn_reports WHERE ts >= ? ORDER BY ts",
            (since,),
        )
        return [TurnMark(turn_id=t, ts=ts, context_tokens=int(n)) for t, ts, n in rows]

    async def forks_reaching(self, since: str) -> list[ForkMark]:
        """Forks started at `since` or later, still running, or ended at `since` or later."""
        rows = await self.db.fetchall(
            "SELECT id, started_at, ended_at, status, parent_turn_id FROM forks"
            " WHERE started_at >= ? OR ended_at IS NULL OR ended_at >= ? ORDER BY started_at",
            (since, since),
        )
        return [
            ForkMark(id=i, started_at=s, ended_at=e, status=st, parent_turn_id=p)
            for i, s, e, st, p in rows
        ]

    async def cycles_since(self, since: str) -> list[CycleMark]:
        rows = await self.db.fetchall(
            "SELECT id, started_at, finished_at, reason FROM sleep_cycles"
            " WHERE started_at >= ? ORDER BY started_at",
            (since,),
        )
        return [CycleMark(id=i, started_at=s, finished_at=f, reason=r) for i, s, f, r in rows]

    async def fires_since(self, since: str) -> list[FireMark]:
        rows = await self.db.fetchall(
            "SELECT schedule_id, due_at, status FROM schedule_fires WHERE due_at >= ?"
            " ORDER BY due_at",
            (since,),
        )
        return [FireMark(schedule_id=s, due_at=d, status=st) for s, d, st in rows]

    # -- Context: turns and their reports --------------------------------------------------
    async def prompts(self, turn_ids: Sequence[str]) -> dict[str, str]:
        """Each turn's first message from the person."""
        if not turn_ids:
            return {}
        rows = await self.db.fetch_in(
            "SELECT turn_id, content, seq FROM messages WHERE role = 'user' AND turn_id IN ({})",
            list(turn_ids),
        )
        out: dict[str, str] = {}
        for turn_id, content, _ in sorted(rows, key=lambda r: r[2]):
            out.setdefault(turn_id, content)
        return out

    async def recent_turn_reports(self, limit: int) -> list[TurnReportRow]:
        """The last `limit` turn reports, newest first."""
        rows = await self.db.fetchall(
            f"SELECT {_REPORT_COLUMNS} FROM turn_reports ORDER BY ts DESC, turn_id DESC LIMIT ?",
            (limit,),
        )
        return [_report(r) for r in rows]

    async def last_turn_report(self) -> TurnReportRow | None:
        """The newest turn report (None: no turn yet)."""
        row = await self.db.fetchone(
            f"SELECT {_REPORT_COLUMNS} FROM turn_reports ORDER BY ts DESC LIMIT 1"
        )
        return _report(row) if row is not None else None

    async def turn_report(self, turn_id: str) -> TurnReportRow | None:
        row = await self.db.fetchone(
            f"SELECT {_REPORT_COLUMNS} FROM turn_reports WHERE turn_id = ?", (turn_id,)
        )
        return _report(row) if row is not None else None

    async def reply_before(self, session_id: str, turn_id: str) -> str:
        """The agent's last message in the session before the turn began ("" if none)."""
        row = await self.db.fetchone(
            "SELECT content FROM messages WHERE session_id = ? AND role = 'assistant'"
            " AND seq < (SELECT MIN(seq) FROM messages WHERE turn_id = ?)"
            " ORDER BY seq DESC LIMIT 1",
            (session_id, turn_id),
        )
        return str(row[0]) if row else ""

    # -- Charts ----------------------------------------------------------------------------
    async def memories_per_day(self) -> list[MemoryDay]:
        """Memories made per UTC day and kind, oldest day first."""
        rows = await self.db.fetchall(
            "SELECT substr(created_at, 1, 10) AS day, kind, COUNT(*) FROM memories"
            " GROUP BY day, kind ORDER BY day"
        )
        return [MemoryDay(day=str(d), kind=str(k), count=int(n)) for d, k, n in rows]

    async def finished_cycles_since(self, since: str) -> list[tuple[str, str]]:
        """(started_at, finished_at) of the cycles begun at `since` or later that finished."""
        rows = await self.db.fetchall(
            "SELECT started_at, finished_at FROM sleep_cycles"
            " WHERE finished_at IS NOT NULL AND started_at >= ? ORDER BY started_at",
            (since,),
        )
        return [(str(s), str(f)) for s, f in rows]

    # -- Memory ----------------------------------------------------------------------------
    async def memory_kinds(self) -> dict[str, int]:
        """Memories per kind, retired ones too."""
        rows = await self.db.fetchall(
            "SELECT kind, COUNT(*) FROM memories GROUP BY kind ORDER BY kind"
        )
        return {str(k): int(n) for k, n in rows}

    async def newest_memories(self, kind: str, limit: int) -> list[SummaryRow]:
        """The newest memories of `kind` still current."""
        rows = await self.db.fetchall(
            "SELECT uid, title, text, created_at, source FROM memories"
            " WHERE kind = ? AND retired_at IS NULL ORDER BY created_at DESC LIMIT ?",
            (kind, limit),
        )
        return [
            SummaryRow(uid=u, title=t, text=x, created_at=c, source=s) for u, t, x, c, s in rows
        ]

    # -- Journal ---------------------------------------------------------------------------
    async def turns_with_forks(self, limit: int) -> list[tuple[str, int]]:
        """The newest turns that delegated, with how many forks each started directly."""
        rows = await self.db.fetchall(
            "SELECT parent_turn_id, COUNT(*), MAX(started_at) FROM forks WHERE depth = 1"
            " GROUP BY parent_turn_id ORDER BY MAX(started_at) DESC LIMIT ?",
            (limit,),
        )
        return [(str(r[0]), int(r[1])) for r in rows]
