"""The journal as memories: each entry indexed as a `journal` row, and the reindex from the day files.

`memory search` finds an entry by its words; `reverie memory reindex` rebuilds the rows from
`journal/YYYY-MM-DD.jsonl`, the entries' truth.
"""

from __future__ import annotations

from datetime import date

import anyio

from daemon.journal.entries import JournalEntry, JournalStore
from daemon.memory.index import MemoryIndex
from daemon.memory.rows import NewMemory
from daemon.paths import Home
from daemon.scheduler import local_zone
from daemon.settings import Settings


def journal_memory(entry: JournalEntry, day: date) -> NewMemory:
    """The index row of an entry: kind `journal`, searchable with `memory search`."""
    return NewMemory(
        uid=f"journal:{entry.id}",
        kind="journal",
        text=entry.text(),
        title=f"Journal {day.isoformat()} {entry.ts.strftime('%H:%M')} ({entry.trigger})",
        origin=entry.memory_origin,
        created_at=entry.ts,
        tags=tuple(entry.tags),
        importance=0.4,
        session_id=entry.session or None,
        source=f"journal/{day.isoformat()}.jsonl",
        meta={"trigger": entry.trigger, "source": entry.source},
    )


async def reindex_journal(home: Home, settings: Settings, index: MemoryIndex) -> int:
    """Index every entry of every day file again (`reverie memory reindex`); return how many."""
    store = JournalStore(home.journal_dir, local_zone(settings.scheduler.timezone))
    count = 0
    for day in await anyio.to_thread.run_sync(store.days):
        entries = await anyio.to_thread.run_sync(store.read_day, day)
        if entries:
            await index.upsert([journal_memory(e, day) for e in entries])
            count += len(entries)
    return count
