"""The morning greeting: after a night's sleep, the first chat opens with a short word.

When a sleep cycle finishes (`SleepFinished`) — the nightly one, or one the person asked
for — the greeting is built from what is already on disk: what was left open in the session
just slept, and today's schedule. Extractive: no model call, so it costs nothing and works
without a key.

What is open are real open items — questions left unanswered, promises, plans: the bullets
under an "Open …" heading of the fresh `WAKE.md` (the agent's letter to itself; "Open
threads", "Open questions"), the newest `open_questions` the journal recorded for that
session, and the bullets under an "Open …" heading of its summary file. Never a heading, the
rest of the letter ("Where things stand"), or a line of what the tools did ("called
remember"). The day they are from is the day of the session's last message, named from the
greeting's local date on the daemon's clock: "earlier today", "yesterday", "Monday" within the
week, else "12 Nov". A cycle started because the context filled up
mid-conversation (`compaction`) wakes without a greeting: the person is in the middle of
talking.

It is posted to the outbox with the key ``greeting:<new session id>``: once per wake, and a
restart cannot greet twice (the key exists). Like any notice it is pushed to a client of
the person's that is connected, else it opens their next chat.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, tzinfo
from pathlib import Path

import anyio

from daemon.bus import EventBus
from daemon.events import SleepFinished
from daemon.journal.entries import JournalStore
from daemon.log import get_logger
from daemon.memory.corrections import marked_lines
from daemon.memory.last_word import GREET_AWAY, away_phrase, last_person_word
from daemon.paths import Home
from daemon.schedule.outbox import Notice, Outbox
from daemon.store.db import Database
from daemon.store.notices import NoticesRepo
from daemon.store.schedules import SchedulesRepo
from daemon.store.sessions import SessionsRepo
from daemon.threads import Thread, ThreadBook

log = get_logger("greeting")

# The cycles after which the person is greeted.
GREETED_REASONS = frozenset({"nightly", "manual"})
MAX_THREADS = 3
THREAD_CHARS = 140
MAX_AGENDA = 5
# How many of the newest journal entries are searched for the slept session's open questions.
JOURNAL_LOOKBACK = 200

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(?:\[[ xX]\]\s+)?(.*\S)")
# An "Open …" heading: "Open", "Open threads", "Open questions:", "Still open", "Left open".
_OPEN = re.compile(r"^(?:still\s+|left\s+)?open\b", re.IGNORECASE)
# A heading that travelled into an item's text ("## Work done - - called remember").
_HEADING_INSIDE = re.compile(r"(?:^|\s)#{1,6}\s")
# A line of what the tools did (`daemon.agent.work`): the verb, one subject, its notes —
# "called remember", "read notes/a.md (×2)", "ran `ls` (exit 0)", "fetched https://…",
# "delegated “…”", "searched /x/ in .", "… and 3 more: …". An item in words ("Read the lease
# before Friday") is not one.
_NOTES = r"(?:\s+\([^()]*\))?"
_WORK_LINE = re.compile(
    rf"^(?:called|read|wrote|edited|listed)\s+[^\s]+{_NOTES}$"
    rf"|^ran\s+`[^`]*`?"
    rf"|^fetched\s+\w+://"
    rf"|^delegated\s+[“\"]"
    rf"|^searched\s+/"
    rf"|^…\s*and\s+\d+\s+more:"
)


def open_items(markdown: str) -> list[str]:
    """The list items under every "Open …" heading of a markdown text, in order.

    Only items: a heading, a paragraph or an item of another section is never one. Items
    that are not open matters (`is_open_matter`) are left out.
    """
    out: list[str] = []
    inside = False
    for line in markdown.splitlines():
        heading = _HEADING.match(line)
        if heading:
            inside = bool(_OPEN.match(heading.group(2).strip().rstrip(":")))
            continue
        item = _ITEM.match(line)
        if inside and item:
            text = _clip(item.group(1))
            if is_open_matter(text):
                out.append(text)
    return out


def open_threads(letter: str, limit: int = MAX_THREADS) -> list[str]:
    """What `WAKE.md` says is open (its "Open threads", "Open questions", …), at most `limit`."""
    return _unique(open_items(letter))[:limit]


def is_open_matter(text: str) -> bool:
    """Whether an item's text can be an open matter: not empty, no heading, no tool line."""
    text = text.strip()
    if not text.strip("-*•… "):
        return False
    return not (_HEADING_INSIDE.search(text) or _WORK_LINE.match(text) or text.startswith("-"))


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = " ".join(item.lower().rstrip(".?! ").split())
        if key and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _clip(text: str) -> str:
    text = " ".join(text.replace("**", "").split())
    return text if len(text) <= THREAD_CHARS else text[: THREAD_CHARS - 1].rstrip() + "…"


def day_phrase(then: date, today: date) -> str:
    """Name `then` as seen from `today`: "earlier today", "yesterday", "Monday", "12 Nov"."""
    days = (today - then).days
    if days <= 0:
        return "earlier today"
    if days == 1:
        return "yesterday"
    if days < 7:
        return then.strftime("%A")
    if then.year == today.year:
        return f"{then.day} {then.strftime('%b')}"
    return f"{then.day} {then.strftime('%b')} {then.year}"


async def todays_schedule(db: Database, zone: tzinfo, now: datetime) -> list[str]:
    """What is still scheduled today in the person's zone, as "HH:MM text" lines, soonest first.

    Read from the schedules table (`daemon.schedule.store`): the active schedules whose next
    due time falls later today. A home whose database has no schedules table has none.
    """
    schedules = SchedulesRepo(db)
    if not await schedules.exists():
        return []
    today: date = now.astimezone(zone).date()
    out: list[str] = []
    for row in await schedules.active_from(now, limit=50):
        assert row.next_due is not None  # active_from reads only schedules with a due time
        when = datetime.fromisoformat(row.next_due).astimezone(zone)
        if when.date() == today:
            out.append(f"{when.strftime('%H:%M')} {_clip(row.text)}")
    return out[:MAX_AGENDA]


def compose_greeting(
    threads: list[str],
    agenda: list[str],
    local: datetime,
    since: date | None = None,
    *,
    away: str = "",
    due: Sequence[str] = (),
) -> str:
    """A short, rested greeting: the time of day, what is open (and from when), what today holds.

    `since` is the local day the open matters are from; None leaves the day unnamed. `away`
    is how long since the person last wrote ("three weeks") when that is long: the greeting
    says so instead of the time of day.
    """
    # A night's wake-up (03:30) is read in the morning: small hours count as morning.
    hour = local.hour
    salute = "Good morning" if hour < 12 else "Good afternoon" if hour < 18 else "Good evening"
    if away:
        lines = [f"It's been {away} since we last talked — welcome back. I slept and I'm rested."]
    else:
        lines = [f"{salute} — I slept and I'm rested."]
    if threads:
        lines.append(
            f"Still open from {day_phrase(since, local.date())}:" if since else "Still open:"
        )
        lines += [f"- {t}" for t in threads]
    if due:
        lines.append("Due today:")
        lines += [f"- {d}" for d in due]
    if agenda:
        lines.append("Today:")
        lines += [f"- {a}" for a in agenda]
    if not threads and not agenda and not due:
        lines.append("Nothing is waiting on us today.")
    return "\n".join(lines)


class MorningGreeting:
    """Posts the greeting after a sleep cycle (see the module's docstring)."""

    def __init__(
        self,
        *,
        home: Home,
        db: Database,
        outbox: Outbox,
        zone: tzinfo,
        now: Callable[[], datetime],
        threads: ThreadBook | None = None,
    ) -> None:
        self.home = home
        # The open threads (`daemon.threads`): the greeting names those due today or overdue.
        self.threads = threads
        self.db = db
        self.outbox = outbox
        self.zone = zone
        self.now = now

    def register(self, bus: EventBus) -> Callable[[], None]:
        return bus.on(SleepFinished, self.on_sleep_finished, name="notices.greeting")

    async def on_sleep_finished(self, event: SleepFinished) -> Notice | None:
        if event.reason not in GREETED_REASONS or not event.new_session_id:
            return None
        return await self.greet(event.new_session_id, slept=event.old_session_id)

    async def greet(self, wake_id: str, *, slept: str | None = None) -> Notice:
        """Post this wake's greeting (once: a second call finds the first).

        `slept` is the session the cycle slept on: its journal entries and summary add to what
        `WAKE.md` says is open, and its last message dates them.
        """
        key = f"greeting:{wake_id}"
        existing = await self.outbox.by_key(key)
        if existing is not None:
            return existing
        now = self.now()
        letter = await _read(self.home.wake_file)
        matters = open_items(letter)
        since: date | None = None
        if slept:
            matters += await anyio.to_thread.run_sync(self._journal_open, slept)
            summary_path, last = await self._session(slept)
            if summary_path:
                matters += open_items(await _read(Path(summary_path)))
            if last is not None:
                since = last.astimezone(self.zone).date()
        threads = _unique(matters)[:MAX_THREADS]
        # A matter stating a value since corrected says so (`daemon.memory.corrections`).
        threads = await marked_lines(self.db, threads)
        agenda = await todays_schedule(self.db, self.zone, now)
        due = await self._due(now)
        # After a long silence the greeting says how long, not "good morning".
        said = await last_person_word(self.db, now)
        gap = now - said.ts if said is not None else None
        away = away_phrase(gap) if gap is not None and gap >= GREET_AWAY else ""
        if away and said is not None and await self._welcomed_back(said.ts):
            away = ""  # the account of the time down said it already (`daemon.schedule.downtime`)
        text = compose_greeting(
            threads, agenda, now.astimezone(self.zone), since, away=away, due=due
        )
        notice = await self.outbox.post(kind="greeting", text=text, key=key, source="system")
        log.info(
            "morning greeting posted", notice=notice.id, threads=len(threads), today=len(agenda)
        )
        return notice

    async def _due(self, now: datetime) -> list[str]:
        """The open threads due today or overdue, as the greeting names them."""
        if self.threads is None:
            return []
        today = now.astimezone(self.zone).date()
        return [due_line(t, today, self.zone) for t in await self.threads.due()]

    def _journal_open(self, session_id: str) -> list[str]:
        """The newest open questions the journal recorded for `session_id` (blocking)."""
        entries = JournalStore(self.home.journal_dir, self.zone).tail(JOURNAL_LOOKBACK)
        for entry in reversed(entries):
            if entry.session == session_id and entry.open_questions and entry.trigger != "note":
                items = [_clip(q) for q in entry.open_questions]
                return [q for q in items if is_open_matter(q)]
        return []

    async def _welcomed_back(self, since: datetime) -> bool:
        """Whether a time-down account (which opens with the gap) was posted after `since`."""
        return await NoticesRepo(self.db).posted_since("downtime:", since)

    async def _session(self, session_id: str) -> tuple[str | None, datetime | None]:
        """The session's summary file and the time of its last message (None when unknown)."""
        sessions = SessionsRepo(self.db)
        summary = await sessions.summary_path(session_id)
        last = await sessions.last_message_ts(session_id)
        when: datetime | None = None
        if last is not None:
            try:
                when = datetime.fromisoformat(last)
            except ValueError:
                when = None
            if when is not None and when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
        return summary, when


def due_line(thread: Thread, today: date, zone: tzinfo) -> str:
    """A due thread as the greeting names it: who said it, when, the words, how late."""
    said = day_phrase(thread.opened_at.astimezone(zone).date(), today)
    who = "I promised" if thread.kind == "promise" else "You planned"
    line = f"{who} {said}: “{_clip(thread.text)}”"
    if thread.due is not None and thread.due < today:
        line += f" (it was due {day_phrase(thread.due, today)})"
    return line


async def _read(path: Path) -> str:
    try:
        return await anyio.Path(path).read_text(errors="replace")
    except OSError:  # absent or unreadable: nothing said there
        return ""
