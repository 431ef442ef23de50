"""The usage ledger's rows: one per model call, and spend summed per local day."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database

_INSERT = (
    "INSERT INTO usage_ledger(ts, day, role, provider, model, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens, cost_usd, session_id, turn_id)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)
_SUMS = (
    "COALESCE(SUM(cost_usd),0), COUNT(*), COALESCE(SUM(input_tokens),0),"
    " COALESCE(SUM(output_tokens),0), COALESCE(SUM(cache_read_tokens),0),"
    " COALESCE(SUM(cache_write_tokens),0)"
)


@dataclass(frozen=True, kw_only=True)
class UsageEntry:
    """One model call, as the ledger keeps it."""

    ts: str  # ISO time of the call
    day: str  # its local date, ISO
    role: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float
    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class DaySpend:
    day: str
    cost_usd: float
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int

    @property
    def cache_hit_rate(self) -> float:
        """Share of prompt tokens served from the provider's cache."""
        total = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return self.cache_read_tokens / total if total else 0.0


def _spend(day: str, row: Sequence[Any]) -> DaySpend:
    return DaySpend(
        day=day,
        cost_usd=float(row[0]),
        calls=int(row[1]),
        input_tokens=int(row[2]),
        output_tokens=int(row[3]),
        cache_read_tokens=int(row[4]),
        cache_write_tokens=int(row[5]),
    )


class UsageRepo:
    """The `usage_ledger` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, entry: UsageEntry) -> bool:
        """Record one call; False when the store was away and the row was queued in the home
        (applied when the server is back, daemon.store.outage)."""
        return await self.db.write(
            _INSERT,
            (
                entry.ts,
                entry.day,
                entry.role,
                entry.provider,
                entry.model,
                entry.input_tokens,
                entry.output_tokens,
                entry.cache_read_tokens,
                entry.cache_write_tokens,
                entry.cost_usd,
                entry.session_id,
                entry.turn_id,
            ),
        )

    async def day(self, day: str) -> DaySpend:
        """The spend of one local day (all zero when it had no call)."""
        row = await self.db.fetchone(f"SELECT {_SUMS} FROM usage_ledger WHERE day = ?", (day,))
        return _spend(day, row)

    async def calls(self) -> int:
        """How many model calls the ledger holds in all (one row each)."""
        row = await self.db.fetchone("SELECT COUNT(*) FROM usage_ledger")
        return int(row[0]) if row else 0

    async def days_since(self, since: str) -> list[DaySpend]:
        """Spend per day from `since` (a local date, ISO) on, oldest first; days with no calls
        left out."""
        rows = await self.db.fetchall(
            f"SELECT day, {_SUMS} FROM usage_ledger WHERE day >= ? GROUP BY day ORDER BY day",
            (since,),
        )
        return [_spend(str(r[0]), r[1:]) for r in rows]

    async def last_call(self, role: str) -> UsageEntry | None:
        """The call of `role` recorded last (None: the ledger has none of that role)."""
        row = await self.db.fetchone(
            "SELECT ts, day, role, provider, model, input_tokens, output_tokens,"
            " cache_read_tokens, cache_write_tokens, cost_usd, session_id, turn_id"
            " FROM usage_ledger WHERE role = ? ORDER BY id DESC LIMIT 1",
            (role,),
        )
        if row is None:
            return None
        return UsageEntry(
            ts=str(row[0]),
            day=str(row[1]),
            role=str(row[2]),
            provider=str(row[3]),
            model=str(row[4]),
            input_tokens=int(row[5]),
            output_tokens=int(row[6]),
            cache_read_tokens=int(row[7]),
            cache_write_tokens=int(row[8]),
            cost_usd=float(row[9]),
            session_id=row[10],
            turn_id=row[11],
        )
