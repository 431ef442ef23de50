"""The journal as a person reads it: the `journal` socket command (`/journal`) and its text.

`reverie journal` (`daemon.cli.journal`) shows the same entries the same way.

Both read the day files directly (they are append-only and fsynced, so reading while the
daemon writes is safe); a torn last line is skipped, never shown half.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import anyio

from daemon.journal.entries import JournalEntry, JournalStore
from daemon.paths import Home
from daemon.scheduler import local_zone
from daemon.settings import Settings

_MAX_TAIL = 10_000


def parse_day(value: str, today: date) -> date:
    """`YYYY-MM-DD`, `today` or `yesterday`; raise ValueError with the reason."""
    text = value.strip().lower()
    if text == "today":
        return today
    if text == "yesterday":
        return date.fromordinal(today.toordinal() - 1)
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--day {value!r} is not a date (expected YYYY-MM-DD, 'today' or 'yesterday')"
        ) from None


def read_entries(
    home: Home, settings: Settings, *, tail: int, day: str | None
) -> list[JournalEntry]:
    """The entries asked for (oldest first); raise ValueError for bad arguments."""
    if tail < 1 or tail > _MAX_TAIL:
        raise ValueError(f"--tail must be between 1 and {_MAX_TAIL}, got {tail}")
    zone = local_zone(settings.scheduler.timezone)
    store = JournalStore(home.journal_dir, zone)
    wanted = parse_day(day, datetime.now(zone).date()) if day else None
    return store.tail(tail, day=wanted)


def render_entries(entries: list[JournalEntry], settings: Settings) -> str:
    """Entries as readable text, one block each."""
    zone = local_zone(settings.scheduler.timezone)
    blocks: list[str] = []
    for e in entries:
        when = e.ts.astimezone(zone).strftime("%Y-%m-%d %H:%M")
        head = f"{when}  [{e.trigger}{'' if e.source == 'model' else ', ' + e.source}] {e.session}".rstrip()
        lines = [head, f"  {e.summary}"]
        for key, label in (
            ("decisions", "decided"),
            ("progress", "progress"),
            ("open_questions", "open"),
            ("files_touched", "files"),
        ):
            for item in getattr(e, key):
                lines.append(f"    {label}: {item}")
        if e.tags:
            lines.append(f"    tags: {', '.join(e.tags)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


async def journal_command(home: Home, settings: Settings, args: dict[str, Any]) -> dict[str, Any]:
    """The `journal` socket command: `{"tail": N, "day": DATE}` → entries and their text."""
    try:
        tail = int(args.get("tail", 10))
    except (TypeError, ValueError):
        raise ValueError("journal: 'tail' must be a number") from None
    day = args.get("day")
    if day is not None and not isinstance(day, str):
        raise ValueError("journal: 'day' must be a date string")
    entries = await anyio.to_thread.run_sync(
        lambda: read_entries(home, settings, tail=tail, day=day)
    )
    text = render_entries(entries, settings) if entries else "no journal entries yet"
    return {"entries": [e.to_json() for e in entries], "text": text}
