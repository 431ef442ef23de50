"""The usage ledger: every model call's tokens and cost, and the daily spend cap.

Costs come from the configurable price table (US dollars per million tokens). A model
missing from the table costs 0 and is logged once, so a local model never trips the cap.
"""

from __future__ import annotations

from datetime import datetime

from daemon.clock import Clock, SystemClock
from daemon.log import get_logger
from daemon.models.base import Usage
from daemon.settings import Price, SpendSettings
from daemon.store.db import Database
from daemon.store.postgres import StoreAway
from daemon.store.usage import DaySpend, UsageEntry, UsageRepo

log = get_logger("ledger")


def cost_of(usage: Usage, price: Price | None) -> float:
    if price is None:
        return 0.0
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / 1_000_000


def price_for(model: str, prices: dict[str, Price]) -> Price | None:
    if model in prices:
        return prices[model]
    # Dated snapshots ("claude-haiku-4-5-20251001") price like their family name.
    best = ""
    for name in prices:
        if model.startswith(name) and len(name) > len(best):
            best = name
    return prices.get(best) if best else None


class UsageLedger:
    """Records usage rows and answers spend questions. Safe to share between roles."""

    def __init__(self, db: Database, spend: SpendSettings, clock: Clock | None = None) -> None:
        self.db = db
        self.rows = UsageRepo(db)
        self.spend = spend
        self.clock = clock or SystemClock()
        self._unpriced: set[str] = set()
        # Today's spend as last read, and what was queued since (the server away): the cap
        # still holds while the ledger cannot be read.
        self._known: DaySpend | None = None
        self._away_spend: dict[str, float] = {}

    def _day(self, when: datetime | None = None) -> str:
        return (when or self.clock.now()).astimezone().date().isoformat()

    async def record(
        self,
        *,
        role: str,
        provider: str,
        model: str,
        usage: Usage,
        session_id: str | None = None,
        turn_id: str | None = None,
    ) -> float:
        price = price_for(model, self.spend.prices)
        if (
            price is None
            and provider not in ("offline", "scripted")
            and model not in self._unpriced
        ):
            self._unpriced.add(model)
            log.info(
                "model has no price in [spend.prices]; its calls are counted as free", model=model
            )
        cost = cost_of(usage, price)
        now = self.clock.now()
        # Spend is never lost: while a PostgreSQL server is away the row is queued in the home
        # and applied when it is back; the cap meanwhile counts it from `_away_spend`.
        applied = await self.rows.add(
            UsageEntry(
                ts=now.isoformat(),
                day=self._day(now),
                role=role,
                provider=provider,
                model=model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost_usd=cost,
                session_id=session_id,
                turn_id=turn_id,
            )
        )
        if not applied:
            day = self._day(now)
            self._away_spend[day] = self._away_spend.get(day, 0.0) + cost
        return cost

    async def today(self) -> DaySpend:
        return await self.rows.day(self._day())

    async def days(self, since: str) -> list[DaySpend]:
        """Spend per day from `since` (a local date, ISO) on, oldest first; days with no calls left out."""
        return await self.rows.days_since(since)

    async def allows(self, *, essential: bool) -> tuple[bool, str]:
        """May a call of this kind run now? Returns (allowed, reason when not)."""
        cap = self.spend.daily_cap_usd
        if cap <= 0:
            return True, ""
        try:
            today = await self.today()
            self._known, self._away_spend = today, {}
            spent = today.cost_usd
        except StoreAway:
            # The server is away: what was spent when last read, and every call queued since.
            day = self._day()
            known = self._known.cost_usd if self._known and self._known.day == day else 0.0
            spent = known + self._away_spend.get(day, 0.0)
        limit = cap if essential else cap * self.spend.non_essential_fraction
        if spent >= limit:
            kind = "essential" if essential else "non-essential"
            return (
                False,
                f"daily spend cap reached: ${spent:.2f} of ${cap:.2f} spent today ({kind} work stopped)",
            )
        return True, ""
