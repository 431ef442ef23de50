"""When the person last wrote, and what about: the gap the context and the greeting speak of.

The person's words are the `user` messages of trunk and imported sessions (a fork's brief is
the agent's own, never the person's). `last_person_word` finds the newest one older than a
moment; `away_phrase` says a gap the way a person would ("three weeks", "2 months").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import PurePath

from daemon.store.db import Database
from daemon.store.sessions import SessionsRepo

# The message being answered is seconds old: anything this fresh is not "last time".
FRESH = timedelta(minutes=2)
# From this gap on, a greeting says "it's been …" rather than "good morning".
GREET_AWAY = timedelta(days=2)
WORDS_CHARS = 160
_NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_SLUG = re.compile(r"__([a-z0-9-]+)\.md$")


@dataclass(frozen=True, kw_only=True)
class LastWord:
    """The person's newest message before now: when, in which session, what, and its topic."""

    ts: datetime
    session_id: str
    msg_id: str
    text: str  # the message, clipped to WORDS_CHARS
    topic: str  # that session's summary title or slug in words; "" when not summarised


async def last_person_word(
    db: Database, now: datetime, *, answering: str | None = None
) -> LastWord | None:
    """The person's newest message up to `now` (None: they never wrote).

    `answering` is the message a turn is answering: when the newest is that message (the
    same words, younger than `FRESH`) it is passed over, so the turn measures the gap before
    its own message.
    """
    words = await SessionsRepo(db).person_words(3)
    first = True
    for word in words:
        when = _parse(word.ts)
        if when is None or when > now:
            continue
        if first and is_answered(word.content, when, now, answering):
            first = False
            continue
        first = False
        return LastWord(
            ts=when,
            session_id=word.session_id,
            msg_id=word.msg_id,
            text=clip(word.content),
            topic=_topic(word.title, word.summary_path),
        )
    return None


def is_answered(content: str, when: datetime, now: datetime, answering: str | None) -> bool:
    """Whether a message is the one a turn is answering now: its words, just written."""
    return (
        answering is not None
        and now - when < FRESH
        and " ".join(content.split()) == " ".join(answering.split())
    )


def away_phrase(gap: timedelta) -> str:
    """A gap in a person's words: "an hour", "five hours", "two days", "three weeks", "2 months"."""
    hours = gap.total_seconds() / 3600
    if hours < 1.5:
        return "an hour"
    if hours < 36:
        return f"{_count(round(hours))} hours"
    days = gap.days + (1 if gap.seconds >= 12 * 3600 else 0)
    if days < 14:
        return f"{_count(days)} days"
    if days < 45:
        weeks = round(days / 7)
        return f"{_count(weeks)} weeks"
    if days < 548:
        months = round(days / 30.44)
        return f"{_count(months)} months"
    years = round(days / 365.25)
    return "a year" if years == 1 else f"{_count(years)} years"


def clip(text: str, limit: int = WORDS_CHARS) -> str:
    """One line of at most `limit` characters, cut at a word with "…"."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    return line[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def _count(n: int) -> str:
    return _NUMBERS[n] if 0 <= n < len(_NUMBERS) else str(n)


def _topic(title: object, summary_path: object) -> str:
    if title and str(title).strip():
        return clip(str(title), 80)
    if summary_path:
        found = _SLUG.search(PurePath(str(summary_path)).name)
        if found:
            return found.group(1).replace("-", " ")
    return ""


def _parse(value: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
