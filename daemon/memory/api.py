"""What the rest of the daemon may ask of memory (the context assembler above all).

`MemoryItem` is one retrievable piece: an explicit fact, a session summary, a transcript
chunk. `MemoryView` (defined with the other seams in `daemon.seams`, re-exported here) is the
read side the context layers are built from; the memory system implements it over the index,
and tests may implement it over a list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from daemon.records import UNTRUSTED_ORIGINS as UNTRUSTED_ORIGINS
from daemon.records import Origin as Origin
from daemon.seams import MemoryView as MemoryView

Kind = Literal["fact", "profile", "summary", "chunk", "month", "journal"]


@dataclass(frozen=True, kw_only=True)
class MemoryItem:
    id: str  # stable id, e.g. "fact:12", "summary:session-2026-…", "chunk:881"
    kind: Kind
    text: str
    origin: Origin
    ts: datetime | None = None
    session: str | None = None
    score: float = 0.0
    title: str = ""
    tags: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()
    source: str = ""  # a path or reference a person can open
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class LiveHistory:
    """The part of a live session the model already sees: its replayed messages."""

    session: str
    message_ids: frozenset[str]

    def shows(self, item: MemoryItem) -> bool:
        """True when the model already sees `item`: a message of the replayed history, or a
        window of messages any of which is replayed (the window repeats the live moment; its
        messages outside the replay are recalled one by one)."""
        if not (self.session and item.session == self.session and item.message_ids):
            return False
        replayed = [m in self.message_ids for m in item.message_ids]
        return all(replayed) if len(replayed) == 1 else any(replayed)
