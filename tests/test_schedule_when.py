"""Time phrases and what they resolve to, in the person's zone; what cannot be resolved is an error."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from daemon.schedule.reading import read_words
from daemon.when import Recurrence, WhenError, resolve

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
    ("2026-01-01T10:00", "in the past"),
    ("today at 8", "is Fri 2026-03-27 08:00 GMT, which is in the past"),
    ("yesterday at 9", "is Thu 2026-03-26 09:00 GMT, which is in the past"),
    ("last monday", "is Mon 2026-03-23 09:00 GMT, which is in the past"),
    ("2 hours ago", "in the past"),
    ("every 2 minutes", "too often"),
    ("every 0 minutes", "the number of minutes must be at least 1"),
    ("every 0 hours", "the number of hours must be at least 1"),
    # Every number a phrase carries is bounded: an answer, never an overflow.
    ("in 99999999999 days", "more than 10 years ahead"),
    ("in 3660 days", "more than 10 years ahead"),
    ("in " + "9" * 400 + " weeks", "more than 10 years ahead"),
    ("in 2 days and 99999999999 hours", "more than 10 years ahead"),
    ("every 99999999999 hours", "more than a year apart"),
    ("every " + "9" * 400 + " minutes", "more than a year apart"),
    ("9999-12-31T23:59", "9999-12-31 is more than 10 years ahead"),
    ("9999-12-31T23:59-05:00", "9999-12-31 is more than 10 years ahead"),
    ("0001-01-01T00:00", "0001-01-01 is in the past"),
    ("on 9999-12-31 at 9", "more than 10 years ahead"),
    # What was not understood is named exactly as written.
    ("in 20 minutes; DROP TABLE schedules", "'; DROP TABLE schedules' is not understood"),
    ("in 2 days table", "'table' is not understood after 'in 2 days'"),
    ("in 5 minutes please", "'please' is not understood after 'in 5 minutes'"),
    ("tomorrow at 10 buy honey jars", "'buy honey jars' is not understood after 'tomorrow at 10'"),
    ("every day at 7 Please", "'Please' is not understood after 'every day at 7'"),
    ("in 3 years", "'years' is not a unit of time"),
    ("every month", "say which day of the month"),
    ("on the 32nd of each month", "not a day of the month"),
    ("every blue moon", "cannot read the time"),
    ("", "no time given"),
]


@pytest.mark.parametrize(("phrase", "reason"), UNRESOLVABLE)
def test_unresolvable_phrases_say_why(phrase: str, reason: str) -> None:
    with pytest.raises(WhenError) as caught:
        resolve(phrase, NOW, LONDON, min_interval_s=300)
    message = str(caught.value)
    assert reason in message
    assert "internal" not in message and "Traceback" not in message
    if phrase and len(phrase) <= 80:
        assert repr(phrase) in message
    assert len(message) < 600, message


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


def test_a_refused_time_is_told_apart_from_words_that_are_not_a_time() -> None:
    # A time the words do say, refused (what the command line's reading stops at)…
    for phrase in ("yesterday at 9", "every 0 minutes", "in 99999999999 days", "at 25:00"):
        with pytest.raises(WhenError) as caught:
            resolve(phrase, NOW, LONDON)
        assert caught.value.read, phrase
    # …and words that are no time at all.
    for phrase in ("someday", "in a bit", "tomorrow at lunch", "in 20 minutes; DROP"):
        with pytest.raises(WhenError) as caught:
            resolve(phrase, NOW, LONDON)
        assert not caught.value.read, phrase


def test_the_echo_says_how_the_time_was_read_and_when_a_default_was_used() -> None:
    assert resolve("tomorrow at 10", NOW, LONDON).echo(LONDON, NOW) == (
        'Sat 28 Mar 10:00 GMT ("tomorrow at 10")'
    )
    assert resolve("tomorrow", NOW, LONDON, default_time=time(8, 30)).echo(LONDON, NOW) == (
        'Sat 28 Mar 08:30 GMT ("tomorrow"; no time of day given, so 08:30, the default'
        " ([schedule] default_time))"
    )
    assert resolve("every monday", NOW, LONDON).echo(LONDON, NOW) == (
        "every Monday at 09:00, first Mon 30 Mar 09:00 BST"
        ' ("every monday"; no time of day given, so 09:00, the default ([schedule] default_time))'
    )
    assert resolve("2027-01-05", NOW, LONDON).echo(LONDON, NOW).startswith("Tue 05 Jan 2027 09:00")
    assert resolve("in 20 minutes", NOW, LONDON).default_time is None


def words(line: str) -> list[str]:
    """The arguments a shell passes for `line` (single quotes group words)."""
    import shlex

    return shlex.split(line)


# The command line's words → (the time read, the text); quoted or not.
SPLITS: list[tuple[str, str, str, str]] = [
    ("tomorrow at 10 buy honey jars", "tomorrow at 10", "2026-03-28T10:00", "buy honey jars"),
    ("'tomorrow at 10' 'buy honey jars'", "tomorrow at 10", "2026-03-28T10:00", "buy honey jars"),
    ("'tomorrow at 10' buy honey jars", "tomorrow at 10", "2026-03-28T10:00", "buy honey jars"),
    ("'tomorrow at 10 buy honey jars'", "tomorrow at 10", "2026-03-28T10:00", "buy honey jars"),
    ("tomorrow buy honey jars", "tomorrow", "2026-03-28T09:00", "buy honey jars"),
    ("in 20 minutes tea", "in 20 minutes", "2026-03-27T10:35:30", "tea"),
    (
        "every weekday at 8:00 stand-up notes",
        "every weekday at 8:00",
        "2026-03-30T08:00",
        "stand-up notes",
    ),
    (
        "every monday and thursday at 9 swim",
        "every monday and thursday at 9",
        "2026-03-30T09:00",
        "swim",
    ),
    ("2026-12-24 18:00 carols", "2026-12-24 18:00", "2026-12-24T18:00", "carols"),
    ("monday '10 push-ups'", "monday", "2026-03-30T09:00", "10 push-ups"),
    ("'tomorrow at 9' 30 push-ups", "tomorrow at 9", "2026-03-28T09:00", "30 push-ups"),
]


@pytest.mark.parametrize(("line", "when", "first", "text"), SPLITS)
def test_the_longest_time_phrase_the_words_start_with_is_the_time(
    line: str, when: str, first: str, text: str
) -> None:
    got = read_words(words(line), NOW, LONDON, default_time=time(9), min_interval_s=300)
    assert (got.resolved.phrase, got.text) == (when, text)
    assert got.resolved.first == local(first)


# The command line's words that are refused, and what the refusal says.
UNCLEAR: list[tuple[str, str]] = [
    ("monday 10 dentist", "'10' right after it looks like part of one"),
    ("tomorrow at lunch buy milk", "'at' right after it looks like part of one"),
    ("'every monday' and thursday standup", "reads as part of it ('every monday and thursday')"),
    ("someday buy milk", "no time phrase at the start of 'someday buy milk'"),
    ("every 0 minutes stretch", "the number of minutes must be at least 1"),
    ("yesterday at 9 call mum", "which is in the past"),
    ("in 99999999999 days x", "more than 10 years ahead"),
    ("in 20 minutes; DROP TABLE schedules", "'; DROP TABLE schedules' is not understood"),
]


@pytest.mark.parametrize(("line", "reason"), UNCLEAR)
def test_an_unclear_split_is_refused_with_how_to_quote(line: str, reason: str) -> None:
    with pytest.raises(WhenError) as caught:
        read_words(words(line), NOW, LONDON, default_time=time(9), min_interval_s=300)
    assert reason in str(caught.value)
    if "right after it" in reason or "part of it" in reason or "no time phrase" in reason:
        assert "quote the time and the text apart, e.g. reverie schedule add" in str(caught.value)
