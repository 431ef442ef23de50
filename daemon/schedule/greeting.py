"""The morning greeting: after a night's sleep, the first chat opens with a short word.

When a sleep cycle finishes (`SleepFinished`) — the nightly one, or one the person asked
for — the greeting is built from what is already on disk: the open threads of the fresh
`WAKE.md` (the agent's letter to itself) and today's schedule. Extractive: no model call,
so it costs nothing and works without a key. A cycle started because the context filled up
mid-conversation (`compaction`) wakes without a greeting: the person is in the middle of
talking.

It is posted to the outbox with the key ``greeting:<new session id>``: once per wake, and a
restart cannot greet twice (the key exists). Like any notice it is pushed to a client of
the person's that is connected, else it opens their next chat.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, tzinfo

import anyio

from daemon.bus import EventBus
from daemon.events import SleepFinished
from daemon.log import get_logger
from daemon.paths import Home
from daemon.schedule.outbox import Notice, Outbox
from daemon.store.db import Database

log = get_logger("greeting")

# The cycles after which the person is greeted.
GREETED_REASONS = frozenset({"nightly", "manual"})
# WAKE.md sections that hold what is still open, the first one found wins.
THREAD_SECTIONS = ("Open threads", "Open questions", "Where things stand")
MAX_THREADS = 3
THREAD_CHARS = 140
MAX_AGENDA = 5


def open_threads(letter: str, limit: int = MAX_THREADS) -> list[str]:
    """The bullets of WAKE.md's open threads (else its open questions, else where things stand)."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in letter.splitlines():
        heading = re.match(r"^#{2,3}\s+(.*?)\s*$", line)
        if heading:
            current = heading.group(1).strip().lower()
            sections.setdefault(current, [])
            continue
        item = re.match(r"^\s*[-*]\s+(.*\S)", line)
        if current is not None and item:
            sections[current].append(_clip(item.group(1)))
    for name in THREAD_SECTIONS:
        items = [i for i in sections.get(name.lower(), []) if i]
        if items:
            return items[:limit]
    return []


def _clip(text: str) -> str:
    text = " ".join(text.replace("**", "").split())
    return text if len(text) <= THREAD_CHARS else text[: THREAD_CHARS - 1].rstrip() + "…"


async def todays_schedule(db: Database, zone: tzinfo, now: datetime) -> list[str]:
    """What is still scheduled today in the person's zone, as "HH:MM text" lines, soonest first.

    Read from the schedules table (`daemon.schedule.store`): the active schedules whose next
    due time falls later today. A home whose database has no schedules table has none.
    """
    found = await db.fetchone(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schedules'"
    )
    if found is None:
        return []
    rows = await db.fetchall(
        "SELECT next_due, text FROM schedules"
        " WHERE status = 'active' AND next_due IS NOT NULL AND next_due >= ?"
        " ORDER BY next_due LIMIT 50",
        (now.astimezone(UTC).replace(microsecond=0).isoformat(),),
    )
    today: date = now.astimezone(zone).date()
    out: list[str] = []
    for due, text in rows:
        when = datetime.fromisoformat(due).astimezone(zone)
        if when.date() == today:
            out.append(f"{when.strftime('%H:%M')} {_clip(text)}")
    return out[:MAX_AGENDA]


def compose_greeting(threads: list[str], agenda: list[str], local: datetime) -> str:
    """A short, rested greeting: the time of day, what is open, what today holds."""
    # A night's wake-up (03:30) is read in the morning: small hours count as morning.
    hour = local.hour
    salute = "Good morning" if hour < 12 else "Good afternoon" if hour < 18 else "Good evening"
    lines = [f"{salute} — I slept and I'm rested."]
    if threads:
        lines.append("Still open from yesterday:")
        lines += [f"- {t}" for t in threads]
    if agenda:
        lines.append("Today:")
        lines += [f"- {a}" for a in agenda]
    if not threads and not agenda:
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
    ) -> None:
        self.home = home
        self.db = db
        self.outbox = outbox
        self.zone = zone
        self.now = now

    def register(self, bus: EventBus) -> Callable[[], None]:
        return bus.on(SleepFinished, self.on_sleep_finished, name="notices.greeting")

    async def on_sleep_finished(self, event: SleepFinished) -> Notice | None:
        if event.reason not in GREETED_REASONS or not event.new_session_id:
            return None
        return await self.greet(event.new_session_id)

    async def greet(self, wake_id: str) -> Notice:
        """Post this wake's greeting (once: a second call finds the first)."""
        key = f"greeting:{wake_id}"
        existing = await self.outbox.by_key(key)
        if existing is not None:
            return existing
        now = self.now()
        try:
            letter = await anyio.Path(self.home.wake_file).read_text(errors="replace")
        except FileNotFoundError:
            letter = ""
        threads = open_threads(letter)
        agenda = await todays_schedule(self.db, self.zone, now)
        text = compose_greeting(threads, agenda, now.astimezone(self.zone))
        notice = await self.outbox.post(kind="greeting", text=text, key=key, source="system")
        log.info(
            "morning greeting posted", notice=notice.id, threads=len(threads), today=len(agenda)
        )
        return notice
