"""Time phrases and what they resolve to, in the person's zone; what cannot be resolved is an error."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from daemon.schedule.when import Recurrence, WhenError, resolve

LONDON = ZoneInfo("Europe/London")
LISBON = ZoneInfo("Europe/Lisbon")
NEW_YORK = ZoneInfo("America/New_York")
# Friday 27 March 2026, 10:15 GMT (London is on GMT until Sunday 29 March, 01:00 UTC).
NOW = datetime(2026, 3, 27, 10, 15, 30, 250000, tzinfo=UTC)


def local(text: str, zone: ZoneInfo = LONDON) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone).astimezone(UTC)


# phrase → (first due, local wall clock in London; how it repeats, or None)
TABLE: list[tuple[str, str, str | None]] = [
    ("in 20 minutes", "2026-03-27T10:35:30", None),
    ("in 2 hours", "2026-03-27T12:15:30", None),
    ("in an hour", "2026-03-27T11:15:30", None),
    ("in half an hour", "2026-03-27T10:45:30", None),
    ("in 1h30m", "2026-03-27T11:45:30", None),
    ("in 3 days", "2026-03-30T11:15:30", None),  # 72 h later: the clocks went forward meanwhile
    ("at 18:30", "2026-03-27T18:30", None),
    ("at 9", "2026-03-28T09:00", None),  # 09:00 has passed today: tomorrow
    ("at 6pm", "2026-03-27T18:00", None),
    ("at 6:45 pm", "2026-03-27T18:45", None),
    ("at noon", "2026-03-27T12:00", None),
    ("today at 17:00", "2026-03-27T17:00", None),
    ("tomorrow at 9", "2026-03-28T09:00", None),
    ("Tomorrow at 9am.", "2026-03-28T09:00", None),
    ("tomorrow", "2026-03-28T09:00", None),  # a day without a time: default_time
    ("tomorrow 7:30", "2026-03-28T07:30", None),
    ("day after tomorrow at 8", "2026-03-29T08:00", None),
    ("next monday at 10", "2026-03-30T10:00", None),
    ("monday at 10", "2026-03-30T10:00", None),
    ("on friday at 8", "2026-04-03T08:00", None),  # today is Friday: the next one
    ("2026-12-24T18:00", "2026-12-24T18:00", None),
    ("2026-12-24 18:00", "2026-12-24T18:00", None),
    ("on 2026-12-24 at 18:00", "2026-12-24T18:00", None),
    ("2026-12-24", "2026-12-24T09:00", None),
    ("every day at 7", "2026-03-28T07:00", "every day at 07:00"),
    ("daily at 7", "2026-03-28T07:00", "every day at 07:00"),
    ("every weekday at 8:00", "2026-03-30T08:00", "every weekday at 08:00"),
    ("every monday", "2026-03-30T09:00", "every Monday at 09:00"),
    ("every mondays and thursdays at 9", "2026-03-30T09:00", "every Monday and Thursday at 09:00"),
    (
        "every mon, wed and fri at 7:15",
        "2026-03-30T07:15",
        "every Monday, Wednesday and Friday at 07:15",
    ),
    ("every weekend at 10", "2026-03-28T10:00", "every weekend day at 10:00"),
    ("on the first of each month", "2026-04-01T09:00", "on the 1st of each month at 09:00"),
    (
        "on the 15th of every month at 9:30",
        "2026-04-15T09:30",
        "on the 15th of each month at 09:30",
    ),
    ("every month on the 31st at 8", "2026-03-31T08:00", "on the 31st of each month at 08:00"),
    (
        "on the last day of each month at 17:00",
        "2026-03-31T17:00",
        "on the last day of each month at 17:00",
    ),
    ("every 2 hours", "2026-03-27T12:15:30", "every 2 hours"),
    ("every hour", "2026-03-27T11:15:30", "every hour"),
    ("every 30 minutes", "2026-03-27T10:45:30", "every 30 minutes"),
]


@pytest.mark.parametrize(("phrase", "first", "repeats"), TABLE)
def test_phrase_table(phrase: str, first: str, repeats: str | None) -> None:
    got = resolve(phrase, NOW, LONDON)
    assert got.first == local(first), (phrase, got.first.astimezone(LONDON))
    assert got.first.microsecond == 0 and got.first.tzinfo is not None
    assert (got.recurrence.describe() if got.recurrence else None) == repeats


UNRESOLVABLE = [
    ("someday", "cannot read the time"),
    ("soon", "cannot read the time"),
    ("in a bit", "'bit' is not a unit of time"),
    ("in -5 minutes", "expected a duration"),
    ("at 25:00", "is not a time of day"),
    ("at 13pm", "with am/pm the hour is 1 to 12"),
    ("tomorrow at lunch", "is not a time of day"),
    ("2026-02-30T10:00", "is not a valid ISO date or time"),
    ("2026-01-01T10:00", "has already passed"),
    ("today at 8", "has already passed"),
    ("every 2 minutes", "too often"),
    ("every month", "say which day of the month"),
    ("on the 32nd of each month", "not a day of the month"),
    ("every blue moon", "cannot read the time"),
    ("", "no time given"),
]


@pytest.mark.parametrize(("phrase", "reason"), UNRESOLVABLE)
def test_unresolvable_phrases_say_why(phrase: str, reason: str) -> None:
    with pytest.raises(WhenError) as caught:
        resolve(phrase, NOW, LONDON, min_interval_s=300)
    assert reason in str(caught.value)
    if phrase:
        assert repr(phrase) in str(caught.value)


def test_the_persons_zone_decides() -> None:
    assert resolve("tomorrow at 9", NOW, NEW_YORK).first == local("2026-03-28T09:00", NEW_YORK)
    assert resolve("tomorrow at 9", NOW, LISBON).first == local("2026-03-28T09:00", LISBON)
    # An explicit offset is kept as given.
    assert resolve("2026-12-24T18:00+01:00", NOW, LONDON).first == datetime(
        2026, 12, 24, 17, 0, tzinfo=UTC
    )
    assert resolve("tomorrow", NOW, LONDON, default_time=time(7, 30)).first == local(
        "2026-03-28T07:30"
    )


def test_wall_clock_stays_across_spring_forward_in_london() -> None:
    rule = resolve("every day at 9", NOW, LONDON).recurrence
    assert rule is not None
    due = resolve("every day at 9", NOW, LONDON).first
    seen = []
    for _ in range(4):
        seen.append(due)
        due = rule.next_after(due, LONDON)
    assert [d.astimezone(LONDON).strftime("%m-%d %H:%M %Z") for d in seen] == [
        "03-28 09:00 GMT",
        "03-29 09:00 BST",
        "03-30 09:00 BST",
        "03-31 09:00 BST",
    ]
    # 24 hours apart, then 23 on the day the clocks go forward.
    assert seen[1] - seen[0] == timedelta(hours=23)


def test_a_time_the_spring_change_skips_fires_at_the_first_valid_instant_after() -> None:
    # 29 March 2026: 01:00 GMT becomes 02:00 BST; 01:30 does not exist that day.
    rule = Recurrence(kind="daily", at=time(1, 30))
    before = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    due = rule.next_after(before, LONDON)
    assert due == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 02:00 BST, the first instant after
    assert due.astimezone(LONDON).strftime("%H:%M %Z") == "02:00 BST"
    after = rule.next_after(due, LONDON)
    assert after.astimezone(LONDON).strftime("%m-%d %H:%M %Z") == "03-30 01:30 BST"
    # A one-off at the skipped time is the same instant.
    assert resolve("2026-03-29T01:30", before, LONDON).first == due


def test_a_time_the_autumn_change_repeats_fires_once() -> None:
    # 25 October 2026: 02:00 BST becomes 01:00 GMT; 01:30 happens twice that day.
    rule = Recurrence(kind="daily", at=time(1, 30))
    start = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)
    first = rule.next_after(start, LONDON)
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # the first 01:30 (BST)
    second = rule.next_after(first, LONDON)
    # Not the second 01:30 an hour later: the next day's.
    assert second == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    assert second - first == timedelta(hours=25)


def test_nine_oclock_stays_nine_across_the_autumn_change() -> None:
    rule = Recurrence(kind="daily", at=time(9, 0), weekdays=(0, 1, 2, 3, 4, 5, 6))
    due = rule.next_after(datetime(2026, 10, 24, 12, 0, tzinfo=UTC), LONDON)
    days = []
    for _ in range(3):
        days.append(due.astimezone(LONDON).strftime("%m-%d %H:%M %Z"))
        due = rule.next_after(due, LONDON)
    assert days == ["10-25 09:00 GMT", "10-26 09:00 GMT", "10-27 09:00 GMT"]


def test_monthly_on_a_day_a_month_lacks_is_its_last_day() -> None:
    rule = Recurrence(kind="monthly", at=time(8, 0), day_of_month=31)
    due = datetime(2026, 3, 31, 7, 0, tzinfo=UTC)
    months = []
    for _ in range(4):
        due = rule.next_after(due, LONDON)
        months.append(due.astimezone(LONDON).strftime("%m-%d"))
    assert months == ["04-30", "05-31", "06-30", "07-31"]


def test_interval_is_fixed_from_when_it_was_set() -> None:
    got = resolve("every 2 hours", NOW, LONDON)
    rule = got.recurrence
    assert rule is not None and rule.every_s == 7200
    # Across the spring change: still every 120 minutes of real time.
    t = got.first
    for _ in range(30):
        nxt = rule.next_after(t, LONDON)
        assert nxt - t == timedelta(hours=2)
        t = nxt
    # Asked long after a downtime: the next slot after then, on the same grid.
    later = rule.next_after(NOW + timedelta(days=3, minutes=7), LONDON)
    assert (later - got.first) % timedelta(hours=2) == timedelta(0)


def test_a_recurrence_survives_its_stored_form() -> None:
    for phrase in (
        "every weekday at 8:00",
        "on the last day of each month at 17:00",
        "every 2 hours",
    ):
        rule = resolve(phrase, NOW, LONDON).recurrence
        assert rule is not None
        assert Recurrence.from_json(rule.to_json()) == rule
