"""The Journal & forks page: the journal by day, and a turn's fork tree.

Entries are read from the day files as `reverie journal` reads them; forks from the lineage
(`daemon.delegate.lineage`): a fork's parent is the session that delegated it, so a turn's
tree is the forks its trunk turn started and, under each, the forks it started in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

import anyio

from daemon.delegate.lineage import ForkLineage, ForkRow
from daemon.journal.entries import JournalEntry, JournalStore
from daemon.scheduler import local_zone
from daemon.store.console import ConsoleQueries

if TYPE_CHECKING:
    from daemon.services import Services


@dataclass(kw_only=True)
class ForkNode:
    fork: ForkRow
    children: list[ForkNode] = field(default_factory=list)


def _store(services: Services) -> JournalStore:
    return JournalStore(services.home.journal_dir, local_zone(services.settings.scheduler.timezone))


async def days(services: Services) -> list[date]:
    """The days with journal entries, newest first."""
    store = _store(services)
    return sorted(await anyio.to_thread.run_sync(store.days), reverse=True)


async def entries(services: Services, day: date) -> list[JournalEntry]:
    """One day's entries, oldest first."""
    store = _store(services)
    return await anyio.to_thread.run_sync(store.read_day, day)


async def fork_tree(services: Services, turn_id: str) -> list[ForkNode]:
    """The forks started by turn `turn_id`, each with the forks it started (depth first)."""
    forks = await ForkLineage(services.db).all()
    by_parent: dict[str, list[ForkRow]] = {}
    for f in forks:
        by_parent.setdefault(f.parent_session_id, []).append(f)

    def grow(row: ForkRow, seen: set[str]) -> ForkNode:
        seen.add(row.id)
        kids = [grow(c, seen) for c in by_parent.get(row.id, []) if c.id not in seen]
        return ForkNode(fork=row, children=kids)

    seen: set[str] = set()
    return [grow(f, seen) for f in forks if f.parent_turn_id == turn_id and f.depth == 1]


async def turns_with_forks(services: Services, *, limit: int = 20) -> list[tuple[str, int]]:
    """The newest turns that delegated, with how many forks each started directly."""
    return await ConsoleQueries(services.db).turns_with_forks(limit)
