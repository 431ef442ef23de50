"""Time phrases resolved in the person's zone: when a schedule first fires, and how it repeats.

A small deterministic parser, no model and no network. `resolve(phrase, now, zone)` turns
"tomorrow at 9", "in 20 minutes", "every weekday at 8:00", "on the first of each month", an
ISO time… into the first due instant (UTC, whole seconds) and, for a repeating phrase, a
`Recurrence`. A phrase it cannot read is a `WhenError` that says what it understands — never
a guess.

Conventions (documented in docs/schedule.md):
- a bare hour is on the 24-hour clock ("at 9" is 09:00, "at 21" 21:00); "am"/"pm" say otherwise;
- a phrase that names a day but no time ("tomorrow", "every monday") means `default_time`
  (`[schedule] default_time`, 09:00 unless configured);
- "at 18:30" alone is the next 18:30: today if still ahead, else tomorrow;
- "next monday" / "monday" is the first Monday after today;
- a day of the month a month lacks (the 31st in April) is that month's last day.

Repeating rules keep the wall clock of the zone: 09:00 stays 09:00 local across a
daylight-saving change. A local time that does not exist that day (the hour skipped when
clocks go forward) fires at the first valid instant after it; one that happens twice (the
hour repeated when clocks go back) fires once, at the first. `every N hours` is a fixed
interval from when it was set, not a wall-clock rule.

Every number a phrase carries is bounded (a one-off at most `MAX_AHEAD` ahead, an interval
at least one unit and at most a year), and what cannot be kept says why: in the past, too far
ahead, too often, or the exact text that was not understood.

The phrase grammar, its bounds and its refusals read in one place.
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any

from daemon.errors import ReverieError

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_ABBR = {name[:3]: i for i, name in enumerate(WEEKDAYS)}
_WEEKDAY_INDEX = (
    {name: i for i, name in enumerate(WEEKDAYS)}
    | _WEEKDAY_ABBR
    | {
        "tues": 1,
        "wed": 2,
        "thur": 3,
        "thurs": 3,
    }
)
_ORDINAL_WORDS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "last": -1,
}
_UNITS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "week": 604800,
    "weeks": 604800,
}
_COUNT_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "half an": 0.5, "half a": 0.5}
# Far enough ahead for any rule here (monthly on the 31st skips at most a few months).
_SEARCH_DAYS = 400

UNDERSTOOD = (
    'an ISO time ("2026-12-24T18:00", "2026-12-24 18:00"), "in 20 minutes", "at 18:30", '
    '"today at 17:00", "tomorrow at 9", "next monday at 10", "every day at 7", '
    '"every weekday at 8:00", "every monday", "every monday and thursday at 9", '
    '"on the first of each month", "every 2 hours"'
)


# How far ahead a one-off may lie, and how far apart an interval's firings: every number a
# phrase carries is bounded, so "in 99999999999 days" is an answer, not an overflow.
MAX_AHEAD = timedelta(days=3653)
MAX_AHEAD_TEXT = "10 years"
MAX_INTERVAL_S = 366 * 86400


class WhenError(ReverieError, ValueError):
    """A phrase that cannot be resolved; the message says why and what is understood.

    `read` is True when the words were read as a time that is refused (in the past, too far
    ahead, too often, 25:00): they are a time phrase, just not one that can be kept. False
    when the words are not a time phrase at all.
    """

    def __init__(self, message: str, *, read: bool = False) -> None:
        super().__init__(message)
        self.read = read


def _wall_clock(d: date, at: time, zone: tzinfo) -> datetime:
    """The instant (UTC) the zone's clock shows `at` on `d`: the first of two, or the first after a gap."""
    naive = datetime.combine(d, at)
    first = naive.replace(tzinfo=zone, fold=0)
    utc = first.astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) == naive:
        return utc
    # Skipped by a clock change: the first instant whose local time is at or after `at`.
    lo = naive.replace(tzinfo=zone, fold=1).astimezone(UTC)
    hi = utc
    if lo > hi:
        lo, hi = hi, lo
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(zone).replace(tzinfo=None) >= naive:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0)


def _last_day(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


@dataclass(frozen=True, kw_only=True)
class Recurrence:
    """How a schedule repeats: a wall-clock rule in the zone, or a fixed interval.

    `kind`: "daily" (on `weekdays`, all seven when empty), "monthly" (on `day_of_month`, -1 the
    last day) at `at`; or "interval" (every `every_s` seconds from `anchor`).
    """

    kind: str
    at: time | None = None
    weekdays: tuple[int, ...] = ()
    day_of_month: int | None = None
    every_s: int | None = None
    anchor: datetime | None = None

    def _day_matches(self, d: date) -> bool:
        if self.kind == "monthly":
            assert self.day_of_month is not None
            last = _last_day(d.year, d.month)
            wanted = last if self.day_of_month == -1 else min(self.day_of_month, last)
            return d.day == wanted
        return not self.weekdays or d.weekday() in self.weekdays

    def next_after(self, after: datetime, zone: tzinfo) -> datetime:
        """The first due instant strictly after `after` (UTC, whole seconds)."""
        if self.kind == "interval":
            assert self.every_s and self.anchor is not None
            step = timedelta(seconds=self.every_s)
            if after < self.anchor:
                return self.anchor
            n = int((after - self.anchor) / step) + 1
            return self.anchor + n * step
        assert self.at is not None
        day = after.astimezone(zone).date() - timedelta(days=1)
        for _ in range(_SEARCH_DAYS):
            if self._day_matches(day):
                due = _wall_clock(day, self.at, zone)
                if due > after:
                    return due
            day += timedelta(days=1)
        raise WhenError(f"{self.describe()} never comes due")  # pragma: no cover - rules are total

    def describe(self) -> str:
        if self.kind == "interval":
            assert self.every_s
            return f"every {_duration(self.every_s)}"
        at = self.at.strftime("%H:%M") if self.at else ""
        if self.kind == "monthly":
            day = "last day" if self.day_of_month == -1 else _ordinal(self.day_of_month or 1)
            return f"on the {day} of each month at {at}"
        days = tuple(sorted(self.weekdays))
        if not days or len(days) == 7:
            return f"every day at {at}"
        if days == (0, 1, 2, 3, 4):
            return f"every weekday at {at}"
        if days == (5, 6):
            return f"every weekend day at {at}"
        names = [WEEKDAYS[i].capitalize() for i in days]
        joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        return f"every {joined} at {at}"

    def to_json(self) -> str:
        data: dict[str, Any] = {"kind": self.kind}
        if self.at is not None:
            data["at"] = self.at.strftime("%H:%M")
        if self.weekdays:
            data["weekdays"] = list(self.weekdays)
        if self.day_of_month is not None:
            data["day_of_month"] = self.day_of_month
        if self.every_s is not None:
            data["every_s"] = self.every_s
        if self.anchor is not None:
            data["anchor"] = self.anchor.isoformat()
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Recurrence:
        data = json.loads(text)
        at = data.get("at")
        anchor = data.get("anchor")
        return cls(
            kind=str(data["kind"]),
            at=time.fromisoformat(at) if at else None,
            weekdays=tuple(int(d) for d in data.get("weekdays", ())),
            day_of_month=data.get("day_of_month"),
            every_s=data.get("every_s"),
            anchor=datetime.fromisoformat(anchor) if anchor else None,
        )


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """A phrase resolved: its first due instant (UTC) and how it repeats (None: once)."""

    phrase: str
    first: datetime
    recurrence: Recurrence | None = None
    # The time of day used because the phrase named a day but no time (None: it named one).
    default_time: time | None = None

    def echo(self, zone: tzinfo, now: datetime) -> str:
        """How the phrase was read, for the person: 'Sun 29 Nov 10:00 GMT ("tomorrow at 10")'.

        A repeating rule says how it repeats and its first time; a default time of day says so.
        """
        local = self.first.astimezone(zone)
        year = "" if local.year == now.astimezone(zone).year else f" {local.year}"
        when = local.strftime(f"%a %d %b{year} %H:%M %Z").strip()
        head = when if self.recurrence is None else f"{self.recurrence.describe()}, first {when}"
        said = json.dumps(self.phrase, ensure_ascii=False)
        if self.default_time is not None:
            said += (
                f"; no time of day given, so {self.default_time.strftime('%H:%M')},"
                " the default ([schedule] default_time)"
            )
        return f"{head} ({said})"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _duration(seconds: float) -> str:
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'' if n == 1 else 's'}" if n != 1 else unit
    return f"{int(seconds)} seconds"


_TIME_RE = r"(?:(?P<noon>noon|midday)|(?P<midnight>midnight)|(?P<h>\d{1,2})(?:[:.](?P<m>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?)"


def _time_of_day(text: str) -> time:
    """'9', '09:00', '6pm', '6:30 pm', 'noon', 'midnight' → a time; WhenError otherwise."""
    m = re.fullmatch(_TIME_RE, text.strip())
    if m is None:
        raise WhenError(f"{text!r} is not a time of day (e.g. 9, 09:30, 6pm, noon)")
    if m.group("noon"):
        return time(12, 0)
    if m.group("midnight"):
        return time(0, 0)
    hour = int(m.group("h"))
    minute = int(m.group("m") or 0)
    ampm = (m.group("ampm") or "").replace(".", "")
    if ampm:
        if not 1 <= hour <= 12:
            raise WhenError(f"{text!r}: with am/pm the hour is 1 to 12", read=True)
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        raise WhenError(f"{text!r} is not a time of day (hours 0-23, minutes 0-59)", read=True)
    return time(hour, minute)


def _split_at(text: str) -> tuple[str, time | None]:
    """'<day part> at <time>' → (day part, time); a phrase without 'at' has no time."""
    m = re.fullmatch(r"(?P<day>.*?)\s*\bat\s+(?P<time>.+)", text)
    if m is None:
        # "every day 7:00", "tomorrow 9am": a trailing time without 'at'.
        m2 = re.fullmatch(r"(?P<day>.*?\S)\s+(?P<time>\d{1,2}(?::\d{2})?\s*(?:am|pm)?)", text)
        if m2 is not None and (":" in m2.group("time") or m2.group("time")[-2:] in ("am", "pm")):
            return m2.group("day").strip(), _time_of_day(m2.group("time"))
        return text.strip(), None
    return m.group("day").strip(), _time_of_day(m.group("time"))


def _weekday_list(text: str) -> tuple[int, ...] | None:
    """'monday', 'mondays', 'monday and thursday', 'mon, wed, fri' → weekday indexes."""
    parts = [p for p in re.split(r"\s*(?:,|\band\b|&|\+)\s*", text.strip()) if p]
    days: list[int] = []
    for part in parts:
        word = part.rstrip("s") if part.endswith("s") and part[:-1] in _WEEKDAY_INDEX else part
        if word not in _WEEKDAY_INDEX:
            return None
        days.append(_WEEKDAY_INDEX[word])
    return tuple(sorted(set(days))) or None


_COUNT = r"(?:half an|half a|an|a|one|two|three|\d+(?:\.\d+)?)"
# One "<count> <unit>" of a duration, at the scanner's position: "20 minutes", "an hour",
# "1h", "30m", with an optional "and" or comma before it.
_PART_RE = re.compile(
    rf"\s*(?:(?:,\s*)?and\s+|,\s*)?(?P<n>{_COUNT})(?:(?<=[a-z])\s+|(?<=\d)\s*)(?P<unit>[a-z]+)"
)


def _count(text: str) -> float:
    text = text.strip()
    if text in _COUNT_WORDS:
        return _COUNT_WORDS[text]
    value = float(text)
    if value <= 0:
        raise WhenError(f"{text!r}: a duration must be positive", read=True)
    return value


def _seconds(amount: str, unit: str) -> float:
    size = _UNITS.get(unit)
    if size is None:
        raise WhenError(
            f"{unit!r} is not a unit of time understood here (minutes, hours, days, weeks)"
        )
    return _count(amount) * size


def _duration_ahead(text: str, shown: str, start: int) -> float:
    """The seconds of the duration at `text[start:]`: '20 minutes', '1h30m', '2 hours and 30
    minutes', read left to right.

    Text that is not a further part of the duration is named in the error exactly as given
    (`shown` is `text` in the person's own letters), never guessed around.
    """
    total = 0.0
    at = start
    while at < len(text):
        m = _PART_RE.match(text, at)
        if m is None:
            break
        total += _seconds(m.group("n"), m.group("unit"))
        if total > MAX_AHEAD.total_seconds():
            raise WhenError(f"that is more than {MAX_AHEAD_TEXT} ahead", read=True)
        at = m.end()
    if at == start:
        raise WhenError("expected a duration such as 'in 20 minutes' or 'in 2 hours'")
    leftover = shown[at:].strip()
    if leftover:
        raise WhenError(
            f"{leftover!r} is not understood after {shown[:at].strip()!r}"
            " (a duration is e.g. '20 minutes', '2 hours and 30 minutes')"
        )
    return total


def _whole(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(microsecond=0)


def _on_day(d: date, at: time, zone: tzinfo, now: datetime) -> datetime:
    """The instant `at` on the local day `d`, refused when the day is past or too far ahead."""
    today = now.astimezone(zone).date()
    if d < today - timedelta(days=1):
        raise WhenError(f"{d.isoformat()} is in the past", read=True)
    if d > today + MAX_AHEAD:
        raise WhenError(f"{d.isoformat()} is more than {MAX_AHEAD_TEXT} ahead", read=True)
    return _wall_clock(d, at, zone)


def _iso(
    text: str, zone: tzinfo, now: datetime, default_time: time
) -> tuple[datetime, bool] | None:
    """An ISO date-time (naive: in the zone) or date (at `default_time`: True), else None."""
    if not re.match(r"^\d{4}-\d{2}-\d{2}", text):
        return None
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return _on_day(date.fromisoformat(text), default_time, zone, now), True
        value = datetime.fromisoformat(text.replace(" ", "T", 1).upper().replace("Z", "+00:00"))
    except ValueError as exc:
        if isinstance(exc, WhenError):
            raise
        # A date and time as written, but not a real one (30 February): a time refused.
        shaped = re.fullmatch(
            r"\d{4}-\d{2}-\d{2}(?:[t ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:z|[+-]\d{2}:?\d{2})?",
            text,
        )
        raise WhenError(f"{text!r} is not a valid ISO date or time", read=bool(shaped)) from None
    if value.tzinfo is None:
        return _on_day(value.date(), value.time().replace(microsecond=0), zone, now), False
    _on_day(value.date(), value.time(), zone, now)  # the bounds, on the date as written
    return _whole(value), False


# A time phrase is never longer than this many words ("on the last day of each month at
# 17:00" is 9): where words are read from the start, no longer run is tried.
MAX_PHRASE_WORDS = 12
_SAID_MAX = 80


def said(phrase: str) -> str:
    """`phrase` quoted for a message, cut short when it is long."""
    phrase = phrase.strip()
    return repr(phrase if len(phrase) <= _SAID_MAX else phrase[: _SAID_MAX - 1] + "…")


def resolve(
    phrase: str,
    now: datetime,
    zone: tzinfo,
    *,
    default_time: time = time(9, 0),
    min_interval_s: float = 60.0,
) -> Resolved:
    """Resolve `phrase` at `now` in the person's `zone`; raise `WhenError` when it cannot.

    A one-off must lie in the future, at most `MAX_AHEAD`; a repeating rule's first due time
    is its first occurrence after `now`. Words left over after a time ("tomorrow at 10 buy
    honey") are named in the error as the text not understood.
    """
    try:
        return _read(phrase, now, zone, default_time, min_interval_s)
    except WhenError as exc:
        if exc.read:
            raise
        words = phrase.split()
        found = read_prefix(
            words[:-1], now, zone, default_time=default_time, min_interval_s=min_interval_s
        )
        if found is None:
            raise
        count, reading = found
        rest = " ".join(words[count:])
        if rest.lower().startswith("at "):
            raise  # what follows 'at' is not a time: the error says so
        if isinstance(reading, WhenError):
            raise reading from None
        raise WhenError(
            f"cannot schedule {said(phrase)}: {said(rest)} is not understood after"
            f" {said(reading.phrase)}"
        ) from None


def read_prefix(
    words: Sequence[str],
    now: datetime,
    zone: tzinfo,
    *,
    default_time: time = time(9, 0),
    min_interval_s: float = 60.0,
) -> tuple[int, Resolved | WhenError] | None:
    """The longest run of `words` from the first that reads as a time, and how many words.

    The reading is the resolved time, or the `WhenError` refusing a time the words do say
    ("yesterday at 9", "every 0 minutes"). None when no run of them is a time phrase.
    """
    for count in range(min(len(words), MAX_PHRASE_WORDS), 0, -1):
        try:
            return count, _read(" ".join(words[:count]), now, zone, default_time, min_interval_s)
        except WhenError as exc:
            if exc.read:
                return count, exc
    return None


def _read(
    phrase: str, now: datetime, zone: tzinfo, default_time: time, min_interval_s: float
) -> Resolved:
    original = phrase
    shown = " ".join(phrase.strip().rstrip(".!").split())
    text = shown.lower()
    if len(text) != len(shown):  # a letter whose lower case is longer: name it lowered
        shown = text
    if not text:
        raise WhenError(f"no time given; say when, e.g. {UNDERSTOOD}")
    now = now.astimezone(UTC)
    try:
        found = _resolve(text, shown, now, zone, default_time, min_interval_s)
    except WhenError as exc:
        raise WhenError(f"cannot schedule {said(original)}: {exc}", read=exc.read) from None
    except OverflowError:
        raise WhenError(
            f"cannot schedule {said(original)}: it is out of range"
            f" (at most {MAX_AHEAD_TEXT} ahead)",
            read=True,
        ) from None
    if found is None:
        raise WhenError(f"cannot read the time {said(original)}; understood are {UNDERSTOOD}")
    first, recurrence, defaulted = found
    if recurrence is None and first <= now:
        local = first.astimezone(zone).strftime("%a %Y-%m-%d %H:%M %Z")
        raise WhenError(f"{said(original)} is {local}, which is in the past", read=True)
    if recurrence is None and first - now > MAX_AHEAD:
        raise WhenError(
            f"cannot schedule {said(original)}: that is more than {MAX_AHEAD_TEXT} ahead",
            read=True,
        )
    return Resolved(
        phrase=" ".join(original.split()),
        first=first,
        recurrence=recurrence,
        default_time=default_time if defaulted else None,
    )


def _interval(n_text: str | None, unit: str, min_interval_s: float) -> int:
    """The seconds of 'every <n> <unit>', bounded: at least 1 unit, `min_interval_s`, a year."""
    n = 2.0 if n_text == "other" else float(n_text or 1)
    plural = unit if unit.endswith("s") else unit + "s"
    if n <= 0:
        raise WhenError(f"the number of {plural} must be at least 1", read=True)
    every = n * _UNITS[unit]
    if every > MAX_INTERVAL_S:
        raise WhenError(
            "that is more than a year apart (for a daily or monthly rule"
            " say e.g. 'every day at 9' or 'on the first of each month')",
            read=True,
        )
    if every < min_interval_s:
        raise WhenError(
            f"every {_duration(every)} is too often (at least every {_duration(min_interval_s)})",
            read=True,
        )
    return int(every)


def _resolve(
    text: str,
    shown: str,
    now: datetime,
    zone: tzinfo,
    default_time: time,
    min_interval_s: float,
) -> tuple[datetime, Recurrence | None, bool] | None:
    """(first due, how it repeats, whether `default_time` was used), or None when unread."""
    m = re.fullmatch(r"(?:on\s+)?(\d{4}-\d{2}-\d{2})\s+at\s+(.+)", text)
    if m is not None:
        try:
            day = date.fromisoformat(m.group(1))
        except ValueError:
            raise WhenError(f"{m.group(1)!r} is not a valid ISO date", read=True) from None
        return _on_day(day, _time_of_day(m.group(2)), zone, now), None, False
    iso = _iso(text, zone, now, default_time)
    if iso is None and text.startswith(("on ", "at ")):
        iso = _iso(text[3:], zone, now, default_time)
    if iso is not None:
        return iso[0], None, iso[1]

    # "in 20 minutes", "in an hour", "in 1h30m", "in 2 days"; "20 minutes ago" is past
    m = re.fullmatch(r"in\s+(.+)", text)
    if m is not None:
        ahead = _duration_ahead(text, shown, m.start(1))
        return _whole(now + timedelta(seconds=ahead)), None, False
    m = re.fullmatch(r"(.+?)\s+ago", text)
    if m is not None:
        _duration_ahead(text[: m.end(1)], shown[: m.end(1)], 0)
        raise WhenError("that is in the past", read=True)

    # "every 2 hours", "every hour", "every 30 minutes"
    m = re.fullmatch(r"every\s+(?:(?P<n>\d+(?:\.\d+)?|other)\s*)?(?P<unit>[a-z]+)", text)
    if m is not None and m.group("unit") in _UNITS and _UNITS[m.group("unit")] < 86400:
        every = _interval(m.group("n"), m.group("unit"), min_interval_s)
        anchor = _whole(now)
        rule = Recurrence(kind="interval", every_s=every, anchor=anchor)
        return rule.next_after(anchor, zone), rule, False

    day_part, at = _split_at(text)

    # "every day", "daily", "every weekday", "every monday and thursday", "every month on the 1st"
    m = re.fullmatch(r"(?:every|each)\s+(.+)", day_part) or (
        re.fullmatch(r"(daily|weekdays|on weekdays)", day_part)
    )
    if m is not None:
        repeating = _repeating(m.group(1), at or default_time)
        if repeating is None:
            return None
        return repeating.next_after(now, zone), repeating, at is None
    m = re.fullmatch(
        r"on\s+the\s+(?P<day>\S+?)\s+(?:day\s+)?of\s+(?:each|every|the)\s+month", day_part
    )
    if m is not None:
        rule = Recurrence(
            kind="monthly", at=at or default_time, day_of_month=_day_of_month(m.group("day"))
        )
        return rule.next_after(now, zone), rule, at is None

    # One-offs on a named day.
    local_today = now.astimezone(zone).date()
    if day_part in ("", "today", "tonight", "this evening"):
        if at is None:
            return None
        if day_part == "":
            due = _wall_clock(local_today, at, zone)
            if due <= now:
                due = _wall_clock(local_today + timedelta(days=1), at, zone)
            return due, None, False
        return _wall_clock(local_today, at, zone), None, False
    offsets = {
        "yesterday": -1,
        "tomorrow": 1,
        "the day after tomorrow": 2,
        "day after tomorrow": 2,
        "the day before yesterday": -2,
        "day before yesterday": -2,
    }
    if day_part in offsets:
        day = local_today + timedelta(days=offsets[day_part])
        return _wall_clock(day, at or default_time, zone), None, at is None
    m = re.fullmatch(
        r"(?P<last>last\s+)?(?:on\s+|next\s+|this\s+|on\s+next\s+)?(?P<day>[a-z]+)", day_part
    )
    if m is not None and m.group("day") in _WEEKDAY_INDEX:
        wanted = _WEEKDAY_INDEX[m.group("day")]
        if m.group("last"):
            back = (local_today.weekday() - wanted) % 7 or 7
            day = local_today - timedelta(days=back)
        else:
            day = local_today + timedelta(days=(wanted - local_today.weekday()) % 7 or 7)
        return _wall_clock(day, at or default_time, zone), None, at is None
    return None


def _day_of_month(word: str) -> int:
    word = word.strip()
    if word in _ORDINAL_WORDS:
        return _ORDINAL_WORDS[word]
    m = re.fullmatch(r"(\d{1,2})(?:st|nd|rd|th)?", word)
    if m is None or not 1 <= int(m.group(1)) <= 31:
        raise WhenError(f"{word!r} is not a day of the month (1st to 31st, or 'last')", read=True)
    return int(m.group(1))


def _repeating(what: str, at: time) -> Recurrence | None:
    what = what.strip()
    if what in ("day", "daily", "morning", "evening", "night"):
        return Recurrence(kind="daily", at=at)
    if what in ("weekday", "weekdays", "working day", "workday", "on weekdays"):
        return Recurrence(kind="daily", at=at, weekdays=(0, 1, 2, 3, 4))
    if what in ("weekend", "weekend day", "weekends"):
        return Recurrence(kind="daily", at=at, weekdays=(5, 6))
    m = re.fullmatch(r"month\s+on\s+the\s+(\S+?)(?:\s+day)?", what) or re.fullmatch(
        r"(\S+?)\s+(?:day\s+)?of\s+(?:the\s+)?month", what
    )
    if m is not None:
        return Recurrence(kind="monthly", at=at, day_of_month=_day_of_month(m.group(1)))
    if what == "month":
        raise WhenError("say which day of the month, e.g. 'on the first of each month'", read=True)
    days = _weekday_list(what)
    if days is not None:
        return Recurrence(kind="daily", at=at, weekdays=days)
    return None
