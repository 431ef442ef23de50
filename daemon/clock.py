"""Time from an injectable clock, so days of schedule run in a test in seconds; time zones and
times of day as the settings name them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import anyio

from daemon.seams import Clock as Clock


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; `sleep` advances it instantly."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float = 0, **kwargs: float) -> datetime:
        self._now += timedelta(seconds=seconds, **kwargs)
        return self._now

    def set(self, when: datetime) -> None:
        self._now = when

    async def sleep(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        await anyio.lowlevel.checkpoint()


def local_zone(name: str | None) -> tzinfo:
    """The named IANA time zone, or the machine's own when `name` is empty."""
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {name!r} (expected an IANA name such as 'Europe/Lisbon')"
            ) from None
    zone = datetime.now().astimezone().tzinfo
    assert zone is not None
    return zone


def parse_hhmm(text: str) -> tuple[int, int]:
    try:
        hour_s, minute_s = text.split(":")
        hour, minute = int(hour_s), int(minute_s)
    except ValueError:
        raise ValueError(f"expected a time of day as HH:MM, got {text!r}") from None
    if not (0 <= hour < 24 and 0 <= minute < 60):
        raise ValueError(f"expected a time of day as HH:MM, got {text!r}")
    return hour, minute


def next_time_of_day(hhmm: str, zone: tzinfo, after: datetime) -> datetime:
    """The first `hhmm` (HH:MM) in `zone` after `after`; a time the clocks skip that day
    (spring forward) comes as late as the skip makes it (02:30 → 03:30), as cron has it."""
    hour, minute = parse_hhmm(hhmm)
    day = after.astimezone(zone).date()
    while True:
        wall = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
        candidate = wall.astimezone(UTC).astimezone(zone)  # a skipped time moves on
        if candidate > after:
            return candidate
        day += timedelta(days=1)
