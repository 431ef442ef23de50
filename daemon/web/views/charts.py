"""The Charts page's series: memory growth by kind, tokens per turn by layer, spend per day,
sleep per night — each a query over what the daemon already records."""

from __future__ import annotations

from datetime import UTC, date, timedelta
from typing import TYPE_CHECKING

from daemon.memory.rows import parse_iso
from daemon.scheduler import local_zone
from daemon.store.console import ConsoleQueries

if TYPE_CHECKING:
    from daemon.services import Services


async def memory_growth(services: Services) -> tuple[list[str], dict[str, list[int]]]:
    """Every day (UTC) from the first memory's to today, and, per kind, how many memories of
    it there were by each day's end (days nothing was made on hold the day before's count)."""
    rows = await ConsoleQueries(services.db).memories_per_day()
    made = sorted({r.day for r in rows})
    if not made:
        return [], {}
    first = date.fromisoformat(made[0])
    last = max(date.fromisoformat(made[-1]), services.clock.now().astimezone(UTC).date())
    days = [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
    at = {d: i for i, d in enumerate(days)}
    added: dict[str, list[int]] = {}
    for r in rows:
        added.setdefault(r.kind, [0] * len(days))[at[r.day]] += r.count
    cumulative: dict[str, list[int]] = {}
    for kind, per_day in sorted(added.items()):
        total, series = 0, []
        for n in per_day:
            total += n
            series.append(total)
        cumulative[kind] = series
    return days, cumulative


async def sleep_per_night(services: Services, *, nights: int = 30) -> list[tuple[str, float]]:
    """(local date a cycle began, seconds asleep) for the finished cycles of the last nights."""
    since = (services.clock.now() - timedelta(days=nights)).isoformat()
    rows = await ConsoleQueries(services.db).finished_cycles_since(since)
    zone = local_zone(services.settings.scheduler.timezone)
    per_night: dict[str, float] = {}
    for began, finished in rows:
        start, end = parse_iso(began), parse_iso(finished)
        if start is None or end is None:
            continue
        night = start.astimezone(zone).date().isoformat()
        per_night[night] = per_night.get(night, 0.0) + (end - start).total_seconds()
    return sorted(per_night.items())
