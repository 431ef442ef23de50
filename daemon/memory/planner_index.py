"""The recall planner's index, level by level: recent sessions, months, years.

The planner reads one line per entry — `id | name | date | snippet` — within
`memory.planner_index_tokens`. Listing every session would grow the index with every day
for ever, so the top level is bounded by the calendar, not by the number of sessions:

- **recent window**: the session summaries not folded into a month yet (sleep folds those
  older than `sleep.fold_after_days`), one line each, newest first;
- **months**: the newest `RECENT_MONTHS` months one line each, in place of the day-level
  summaries they fold (a line names the month's sessions by title);
- **years**: older months collapse into one line per year (and per trust: imported
  conversations never share a line with the agent's own), naming its months;
- **what search found**: the hybrid search's best summaries and months come first,
  interleaved with the rest, so a budget that cannot hold everything keeps the best of both.
  A found summary that was folded stands as its month; an old month that search found is
  listed on its own (at most `FOUND_OLD_MONTHS`) besides its year.

When the planner picks a year or a month, `children` is the next level it reads: a year's
months, a month's sources (its session summaries; a session that never got a summary, by its
transcript chunks). Whatever still does not fit the budget is cut, oldest last-listed first,
and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from daemon.memory.api import MemoryItem
from daemon.memory.months import folded_into as folded_months
from daemon.memory.months import month_lines, month_overview, month_sources, unfolded_summaries
from daemon.memory.text import content_words
from daemon.store.db import Database
from daemon.tokens import count_tokens

RECENT_MONTHS = 12
FOUND_OLD_MONTHS = 4
MAX_WINDOW = 5000  # a bound on the read; the token budget decides what is shown
SNIPPET_CHARS = 160
MONTH_SNIPPET_CHARS = 240
YEAR_WORDS = 16  # a month stands for a few dozen sessions: its line says a little more


@dataclass(frozen=True, kw_only=True)
class IndexEntry:
    """One line of the planner's index: a session, a month or a year (its months in `members`)."""

    id: str
    level: str  # session | month | year
    name: str
    when: str
    snippet: str
    item: MemoryItem | None = None  # the summary, chunk or month row; None for a year
    members: tuple[MemoryItem, ...] = ()  # a year's months, newest first

    @property
    def container(self) -> bool:
        return self.level in ("month", "year")

    @property
    def fork(self) -> bool:
        return self.item is not None and self.item.meta.get("session_kind") == "fork"

    def line(self) -> str:
        return f"{self.id} | {_field(self.name)} | {self.when} | {_field(self.snippet)}"


def oneline(text: str, chars: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= chars else line[: chars - 1].rsplit(" ", 1)[0] + "…"


def _field(text: str) -> str:
    return text.replace("|", "/")


def session_entry(item: MemoryItem) -> IndexEntry:
    """A session summary's line (or, for a session never summarised, its chunk's)."""
    slug = str(item.meta.get("file") or Path(item.source).stem or item.id).removesuffix(".md")
    if item.kind == "chunk":
        slug = f"session {item.session or '?'} (no summary)"
    when = item.ts.date().isoformat() if item.ts else "undated"
    text = (item.title + ": " if item.title and item.kind != "chunk" else "") + item.text
    return IndexEntry(
        id=item.id,
        level="session",
        name=slug,
        when=when,
        snippet=oneline(text, SNIPPET_CHARS),
        item=item,
    )


def month_entry(item: MemoryItem, stems: Collection[str] = ()) -> IndexEntry:
    name = str(item.meta.get("file") or item.id).removesuffix(".md")
    return IndexEntry(
        id=item.id,
        level="month",
        name=name,
        when=str(item.meta.get("month") or (item.ts.strftime("%Y-%m") if item.ts else "undated")),
        snippet=f"{item.title}: {month_overview(item.text, chars=MONTH_SNIPPET_CHARS, stems=stems)}",
        item=item,
    )


def year_entry(year: str, imported: bool, months: Sequence[MemoryItem]) -> IndexEntry:
    """One line for a year of older months: which months, how many sessions, their main words."""
    names = sorted(str(m.meta.get("month") or m.id)[5:7] for m in months)
    titles = [line.title for m in months for line in month_lines(m.text) if line.day]
    words = Counter(w for title in titles for w in dict.fromkeys(content_words(title)))
    common = ", ".join(w for w, _ in words.most_common(YEAR_WORDS))
    label = " (imported)" if imported else ""
    return IndexEntry(
        id=f"year:{year}" + (":imported" if imported else ""),
        level="year",
        name=f"year-{year}" + ("-imported" if imported else ""),
        when=year,
        snippet=oneline(
            f"{year}{label}: months {', '.join(names)}; {len(titles)} session(s) about {common}",
            MONTH_SNIPPET_CHARS,
        ),
        members=tuple(months),
    )


def _month_key(item: MemoryItem) -> str:
    return str(item.meta.get("month") or item.id)


def _imported(item: MemoryItem) -> bool:
    return item.id.endswith(":imported")


async def top_level(
    db: Database,
    months: Sequence[MemoryItem],
    found: Sequence[MemoryItem],
    stems: Collection[str] = (),
) -> list[IndexEntry]:
    """The planner's first level: what search `found` interleaved with the calendar's levels.

    `months` are every month row; `found` the hybrid search's summaries and months, best
    first; a month's line names the sessions that mention `stems` (what is asked) first.
    """
    ordered = sorted(months, key=_month_key, reverse=True)
    recent_keys = sorted({_month_key(m) for m in ordered}, reverse=True)[:RECENT_MONTHS]
    recent = [m for m in ordered if _month_key(m) in recent_keys]
    years: dict[tuple[str, bool], list[MemoryItem]] = {}
    for m in ordered:
        if _month_key(m) not in recent_keys:
            years.setdefault((_month_key(m)[:4], _imported(m)), []).append(m)
    by_id = {m.id: m for m in ordered}

    window = [session_entry(s) for s in await unfolded_summaries(db, MAX_WINDOW)]
    calendar = [
        *window,
        *(month_entry(m, stems) for m in recent),
        *(year_entry(y, imp, ms) for (y, imp), ms in sorted(years.items(), reverse=True)),
    ]

    folded = await folded_months(db, [f.id for f in found if f.kind == "summary"])
    relevant: list[IndexEntry] = []
    old_shown = 0
    for hit in found:
        month_id = hit.id if hit.kind == "month" else folded.get(hit.id)
        if month_id is None:
            if hit.kind == "summary":
                relevant.append(session_entry(hit))
            continue
        month = by_id.get(month_id)
        if month is None:
            continue
        if _month_key(month) not in recent_keys:
            if old_shown >= FOUND_OLD_MONTHS or any(r.id == month.id for r in relevant):
                continue
            old_shown += 1
        relevant.append(month_entry(month, stems))

    out: dict[str, IndexEntry] = {}
    # Interleaved, so a budget that cannot hold them all keeps the best of both orders.
    for pair in zip_longest(relevant, calendar):
        for entry in pair:
            if entry is not None:
                out.setdefault(entry.id, entry)
    # A delegate fork's own summary after the others (otherwise in order).
    return sorted(out.values(), key=lambda e: e.fork)


async def children(
    db: Database, entry: IndexEntry, stems: Collection[str] = ()
) -> list[IndexEntry]:
    """The next level under a year (its months) or a month (its sources); nothing under a session."""
    if entry.level == "year":
        return [month_entry(m, stems) for m in entry.members]
    if entry.level != "month":
        return []
    out: list[IndexEntry] = []
    sessions: set[str] = set()
    for source in await month_sources(db, entry.id):
        if source.kind == "chunk":
            # A session never summarised: one line for it (its first folded chunk).
            if source.session in sessions:
                continue
            sessions.add(source.session or source.id)
        out.append(session_entry(source))
    return sorted(out, key=lambda e: e.fork)


def fit(
    head: Sequence[str], entries: Sequence[IndexEntry], budget: int
) -> tuple[list[str], list[IndexEntry], int]:
    """The index lines within `budget` tokens: `head` (the facts), then entries in order.

    Returns the lines, the entries shown and how many entries did not fit.
    """
    lines = list(head)
    used = sum(count_tokens(line) + 1 for line in lines)
    shown: list[IndexEntry] = []
    for i, entry in enumerate(entries):
        line = entry.line()
        cost = count_tokens(line) + 1
        if used + cost > budget:
            return lines, shown, len(entries) - i
        used += cost
        lines.append(line)
        shown.append(entry)
    return lines, shown, 0
