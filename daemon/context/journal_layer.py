"""The prompt's journal layer: the thread of recent work, newest first.

The newest daily digest's newest entries (`context.journal_entries`), then each earlier day
of the last `context.journal_days` in a line or two, newest first, so an older day is cut
before a newer one. The journal gives way to the total budget only down to its reserve
(`journal.context_reserved_tokens`, `daemon.context.budget`).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from daemon.context.layers import Layer, memory_block
from daemon.journal.digest import (
    day_gist,
    digest_body,
    digests_since,
    newest_digest_path,
    newest_sections,
)
from daemon.paths import Home
from daemon.scheduler import local_zone
from daemon.settings import Settings
from daemon.topics.files import FileCache

# An earlier day of the journal layer is shown in about this many characters.
JOURNAL_DAY_CHARS = 200


def journal_layer(
    files: FileCache,
    home: Home,
    settings: Settings,
    *,
    now: datetime,
    notes: list[str],
    why: dict[str, str],
) -> Layer:
    """The journal layer as of `now`; `why["journal"]` says what it shows, or why nothing."""
    layer = Layer(name="journal", heading="## Journal digest", stable=False)
    found = newest_digest_path(home)
    if found is None:
        why["journal"] = "not shown: the journal has no daily digest yet"
        return layer
    day, path = found
    ft = files.read(path)
    if ft.problem:
        notes.append(f"journal: {ft.problem}")
    cfg = settings.context
    body = newest_sections(digest_body(ft.text), cfg.journal_entries)
    if body:
        layer.entries.append(
            memory_block(
                f"journal:{day.isoformat()}",
                body,
                kind="journal",
                origin="agent",
                ts=datetime(day.year, day.month, day.day, tzinfo=UTC),
                source=f"journal/{path.name}",
                title=f"Journal digest {day.isoformat()} (newest first)",
                rank=0,
            )
        )
    today = now.astimezone(local_zone(settings.scheduler.timezone)).date()
    first = today - timedelta(days=cfg.journal_days - 1)
    earlier = _earlier_days(files, home, layer, since=first, before=day, notes=notes)
    shown = f"the newest daily digest ({day.isoformat()})" if body else ""
    if earlier:
        days = f"{len(earlier)} earlier day{'s' if len(earlier) > 1 else ''}"
        more = f"{days} of the last {cfg.journal_days} in brief ({earlier[-1]} to {earlier[0]})"
        shown = f"{shown} and {more}" if shown else more
    why["journal"] = (
        f"{shown}: the thread of recent work, newest first"
        if shown
        else "not shown: the newest daily digest is empty"
    )
    return layer


def _earlier_days(
    files: FileCache, home: Home, layer: Layer, *, since: date, before: date, notes: list[str]
) -> list[str]:
    """Add a gist of each day's digest from `since` to before `before`, newest first, to
    `layer`; return the days added (ISO dates, in that order)."""
    earlier: list[str] = []
    for when, older in digests_since(home, since):
        if when >= before:
            continue
        oft = files.read(older)
        if oft.problem:
            notes.append(f"journal: {oft.problem}")
        line = day_gist(digest_body(oft.text), JOURNAL_DAY_CHARS)
        if not line:
            continue
        earlier.append(when.isoformat())
        layer.entries.append(
            memory_block(
                f"journal:{when.isoformat()}",
                line,
                kind="journal-day",
                origin="agent",
                ts=datetime(when.year, when.month, when.day, tzinfo=UTC),
                rank=len(layer.entries),
            )
        )
    return earlier
