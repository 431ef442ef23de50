"""Resolve relative dates ("tomorrow", "next Friday", "in 3 days") to absolute ones.

A fact is read weeks after it was written, so "tomorrow" must be pinned at write time. The
original wording stays and the resolved date follows it in parentheses:
"dentist appointment tomorrow" → "dentist appointment tomorrow (2026-03-04)".
"""

from __future__ import annotations

import calendar
import re
from datetime import date, datetime, timedelta

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple of": 2,
}  # fmt: skip
_NUM = (
    r"(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|couple of)"
)
_UNIT = r"(?P<unit>day|week|month|year)s?"
_WD = r"(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
# Already followed by an explicit date: leave alone, so resolving twice changes nothing.
_NOT_RESOLVED = r"(?!\s*\(\s*(?:\d{4}-\d{2}|week of))"

_PATTERN = re.compile(
    r"\b(?:"
    r"(?P<dat>(?:the\s+)?day\s+after\s+tomorrow)"
    r"|(?P<dby>(?:the\s+)?day\s+before\s+yesterday)"
    r"|(?P<today>today|tonight|this\s+(?:morning|afternoon|evening))"
    r"|(?P<tomorrow>tomorrow)"
    r"|(?P<yesterday>yesterday|last\s+night)"
    rf"|(?P<in>in\s+{_NUM}\s+{_UNIT})"
    rf"|(?P<ago>{_NUM.replace('?P<n>', '?P<n2>')}\s+{_UNIT.replace('?P<unit>', '?P<unit2>')}\s+ago)"
    r"|(?P<rel_period>(?P<which>next|last|this)\s+(?P<period>week|month|year))"
    rf"|(?P<rel_wd>(?P<mod>next|last|this|coming|on|this\s+coming)\s+{_WD})"
    rf"|(?P<bare_wd>{_WD.replace('?P<wd>', '?P<wd2>')})"
    rf")\b{_NOT_RESOLVED}",
    re.IGNORECASE,
)
# Crude tense detection for a bare weekday ("I went there on Monday" is in the past).
_PAST = re.compile(
    r"\b(was|were|went|had|did|met|saw|got|said|told|came|left|made|took|ago|last|finished|started)\b|\w{3,}ed\b",
    re.IGNORECASE,
)


def add_months(day: date, months: int) -> date:
    """Move `day` by whole months, clamping to the end of shorter months."""
    index = day.year * 12 + (day.month - 1) + months
    year, month = divmod(index, 12)
    last = calendar.monthrange(year, month + 1)[1]
    return date(year, month + 1, min(day.day, last))


def _shift(today: date, n: int, unit: str) -> date:
    unit = unit.lower()
    if unit == "day":
        return today + timedelta(days=n)
    if unit == "week":
        return today + timedelta(weeks=n)
    if unit == "month":
        return add_months(today, n)
    return add_months(today, 12 * n)


def _number(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBERS[word]


def _weekday(today: date, name: str, direction: int) -> date:
    """The named weekday strictly after (direction 1) or before (-1) `today`."""
    target = _WEEKDAYS.index(name.lower())
    if direction > 0:
        delta = (target - today.weekday()) % 7 or 7
        return today + timedelta(days=delta)
    delta = (today.weekday() - target) % 7 or 7
    return today - timedelta(days=delta)


def _annotation(m: re.Match[str], today: date, past: bool) -> str:
    g = m.groupdict()
    if g["dat"]:
        return (today + timedelta(days=2)).isoformat()
    if g["dby"]:
        return (today - timedelta(days=2)).isoformat()
    if g["today"]:
        return today.isoformat()
    if g["tomorrow"]:
        return (today + timedelta(days=1)).isoformat()
    if g["yesterday"]:
        return (today - timedelta(days=1)).isoformat()
    if g["in"]:
        return _shift(today, _number(g["n"]), g["unit"]).isoformat()
    if g["ago"]:
        return _shift(today, -_number(g["n2"]), g["unit2"]).isoformat()
    if g["rel_period"]:
        step = {"next": 1, "last": -1, "this": 0}[g["which"].lower()]
        period = g["period"].lower()
        if period == "week":
            monday = today - timedelta(days=today.weekday()) + timedelta(weeks=step)
            return f"week of {monday.isoformat()}"
        if period == "month":
            return add_months(today.replace(day=1), step).strftime("%Y-%m")
        return str(today.year + step)
    if g["rel_wd"]:
        mod = " ".join(g["mod"].lower().split())
        if mod == "last":
            return _weekday(today, g["wd"], -1).isoformat()
        if mod == "this" and today.weekday() == _WEEKDAYS.index(g["wd"].lower()):
            return today.isoformat()
        if mod == "on" and past:
            return _weekday(today, g["wd"], -1).isoformat()
        return _weekday(today, g["wd"], 1).isoformat()
    return _weekday(today, g["wd2"], -1 if past else 1).isoformat()


def resolve_dates(text: str, now: datetime) -> str:
    """Return `text` with each relative date followed by its absolute date in parentheses.

    `now` must already be in the person's timezone: "tomorrow" is a local notion.
    """
    today = now.date()
    past = bool(_PAST.search(text))
    return _PATTERN.sub(lambda m: f"{m.group(0)} ({_annotation(m, today, past)})", text)
