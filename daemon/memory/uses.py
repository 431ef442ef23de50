"""How facts are used: recall shows them, and what is neither used nor said again fades.

Automatic recall and `recall` call `note` with what they showed: an in-memory count, no I/O,
so a turn never waits for it. The counts are written in one transaction by `flush`, which
the memory system runs after each turn (`turn_finished`, an observer: off the turn's
critical path), before a sleep's promotion reads them, and at shutdown. A crash loses at
most one turn's uses, which only nudge ranking.

`stale_weight` is what automatic recall multiplies a fact's score by: 1.0 for a fact used,
confirmed (said again) or valid within `memory.stale_after_days`, `memory.stale_weight`
otherwise. Nothing is deleted: a stale fact still answers when it is the best match.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta

from daemon.clock import Clock
from daemon.log import get_logger
from daemon.memory.api import MemoryItem
from daemon.memory.rows import iso, parse_iso
from daemon.settings import MemorySettings
from daemon.store.db import Database
from daemon.store.memories import MemoriesRepo, UseCount

log = get_logger("memory.uses")

_FACT_KINDS = frozenset({"fact", "profile"})
# Set while a reader that is not a turn (the sleep's self-exam) assembles context: what it is
# shown is no use of a fact, so it must not make facts look used (nor promote them by use).
_UNCOUNTED: ContextVar[bool] = ContextVar("reverie_uses_uncounted", default=False)


@contextmanager
def uncounted() -> Iterator[None]:
    """Within this block (this task only), what recall shows is not counted as a use."""
    token = _UNCOUNTED.set(True)
    try:
        yield
    finally:
        _UNCOUNTED.reset(token)


class UseLog:
    """Count the facts recall shows; write the counts in batches."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self._pending: dict[str, tuple[int, datetime]] = {}

    def note(self, items: Iterable[MemoryItem]) -> None:
        """Count one use of each fact among `items` (shown once in one answer or turn)."""
        self.note_ids(item.id for item in items if item.kind in _FACT_KINDS)

    def note_ids(self, ids: Iterable[str]) -> None:
        """Count one use of each fact id (`fact:N`) in `ids`; other ids are not facts."""
        if _UNCOUNTED.get():
            return
        now = self.clock.now()
        for uid in dict.fromkeys(ids):
            if uid.startswith("fact:"):
                count, _ = self._pending.get(uid, (0, now))
                self._pending[uid] = (count + 1, now)

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def flush(self) -> int:
        """Write the counted uses (one transaction); return how many facts were updated.

        Cancelled before the write starts, the counts stay pending for the next flush.
        """
        if not self._pending:
            return 0
        batch = dict(self._pending)
        await MemoriesRepo(self.db).count_uses(
            [UseCount(uid=uid, uses=n, last_used=iso(at)) for uid, (n, at) in batch.items()]
        )
        for uid, (n, at) in batch.items():
            left = self._pending.get(uid)
            if left is not None and left == (n, at):
                del self._pending[uid]
            elif left is not None:  # counted again while the write ran: keep only the new uses
                self._pending[uid] = (left[0] - n, left[1])
        log.debug("fact uses written", facts=len(batch))
        return len(batch)


def last_seen(item: MemoryItem) -> datetime | None:
    """The latest of when a fact became valid, was last used, and was last said again."""
    meta = item.meta
    times = [item.ts] + [
        parse_iso(v) if isinstance(v, str) else None
        for v in (meta.get("valid_from"), meta.get("last_used"), meta.get("confirmed_at"))
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def stale_weight(item: MemoryItem, now: datetime, settings: MemorySettings) -> float:
    """How much a memory's score counts in automatic recall: less for a stale fact."""
    if item.kind not in _FACT_KINDS:
        return 1.0
    seen = last_seen(item)
    if seen is None or now - seen <= timedelta(days=settings.stale_after_days):
        return 1.0
    return settings.stale_weight
