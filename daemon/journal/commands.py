"""The journal as a person reads it: the `journal` socket command (`/journal`) and its text.

`reverie journal` (`daemon.cli.journal`) shows the same entries the same way.

The command's request is `JournalRequest` (parsed from the wire's `args`, refusing a bad
`tail` or `day` with `ValueError`, which the gateway answers as `bad_args`) and its result
`JournalResult`. Both read the day files directly (they are append-only and fsynced, so reading while the
daemon writes is safe); a torn last line is skipped, never shown half.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Self, TypedDict

import anyio

from daemon.chat import args as wire
from daemon.journal.entries import JournalEntry, JournalStore
from daemon.paths import Home
from daemon.scheduler import local_zone
from daemon.settings import Settings

_MAX_TAIL = 10_000
DEFAULT_TAIL = 10


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
    _check_tail(tail)
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


def _check_tail(tail: int) -> None:
    if tail < 1 or tail > _MAX_TAIL:
        raise ValueError(f"--tail must be between 1 and {_MAX_TAIL}, got {tail}")


@dataclass(frozen=True, kw_only=True, slots=True)
class JournalRequest:
    """`journal`: the last `tail` entries, of one `day` (`YYYY-MM-DD`, today, yesterday) if given."""

    tail: int = DEFAULT_TAIL
    day: str | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        tail = wire.integer("journal", args, "tail")
        tail = DEFAULT_TAIL if tail is None else tail
        _check_tail(tail)
        day = wire.string("journal", args, "day")
        if day is not None:
            # Refused here; which day `today` names is read with the entries.
            parse_day(day, date.today())
        return cls(tail=tail, day=day)


class JournalResult(TypedDict):
    """The entries (oldest first, as `JournalEntry.to_json`) and the same as readable text."""

    entries: list[dict[str, Any]]
    text: str


async def journal_command(home: Home, settings: Settings, request: JournalRequest) -> JournalResult:
    """The `journal` socket command: `{"tail": N, "day": DATE}` → entries and their text."""
    entries = await anyio.to_thread.run_sync(
        lambda: read_entries(home, settings, tail=request.tail, day=request.day)
    )
    text = render_entries(entries, settings) if entries else "no journal entries yet"
    return {"entries": [e.to_json() for e in entries], "text": text}
