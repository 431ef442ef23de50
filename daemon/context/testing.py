"""A list-backed `MemoryView` for tests and benchmarks: real code, no index, no database.

Items are kept sorted by time, so the "recent" queries cost O(limit); `auto_recall` uses a
small inverted index over the same tokeniser as the topic router (word overlap weighted by
rarity, newer first among equals), so 100k items still answer in well under a millisecond
for a typical prompt.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime

from daemon.memory.api import LiveHistory, MemoryItem
from daemon.memory.last_word import LastWord, clip, is_answered
from daemon.topics.matrix import tokenise

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _newest_first(items: Iterable[MemoryItem]) -> list[MemoryItem]:
    return sorted(items, key=lambda it: (it.ts or _EPOCH, it.id), reverse=True)


class ListMemoryView:
    """Serve the `MemoryView` protocol from a list of `MemoryItem`s."""

    def __init__(self, items: Iterable[MemoryItem] = ()) -> None:
        self.items: list[MemoryItem] = []
        self._stamps: list[float] = []
        self._postings: dict[str, list[int]] = defaultdict(list)
        self.calls: list[tuple[str, object]] = []
        self.extend(items)

    def extend(self, items: Iterable[MemoryItem]) -> None:
        for item in items:
            index = len(self.items)
            self.items.append(item)
            self._stamps.append((item.ts or _EPOCH).timestamp())
            for word in set(tokenise(f"{item.title} {item.text}")):
                self._postings[word].append(index)
        self._by_kind: dict[str, list[MemoryItem]] = defaultdict(list)
        for item in _newest_first(self.items):
            self._by_kind[item.kind].append(item)
        self._entries = [it for it in _newest_first(self.items) if it.kind != "chunk"]

    async def profile_facts(self, limit: int) -> list[MemoryItem]:
        self.calls.append(("profile_facts", limit))
        return self._by_kind["profile"][:limit]

    async def recent_entries(self, limit: int) -> list[MemoryItem]:
        self.calls.append(("recent_entries", limit))
        return self._entries[:limit]

    async def recent_summaries(self, limit: int) -> list[MemoryItem]:
        self.calls.append(("recent_summaries", limit))
        return self._by_kind["summary"][:limit]

    async def recent_facts(self, limit: int) -> list[MemoryItem]:
        self.calls.append(("recent_facts", limit))
        return self._by_kind["fact"][:limit]

    async def mark_corrected(self, texts: list[str]) -> list[str]:
        """A list holds no superseded facts: nothing to mark."""
        return texts

    async def last_person_word(
        self, now: datetime, *, answering: str | None = None
    ) -> LastWord | None:
        """The newest chunk of the person's (origin `person`) up to `now`, passing over the
        message being answered when it is the newest."""
        self.calls.append(("last_person_word", now))
        first = True
        for item in self._by_kind["chunk"]:
            if item.origin != "person" or item.ts is None or item.ts > now:
                continue
            if first and is_answered(item.text, item.ts, now, answering):
                first = False
                continue
            first = False
            topic = next(
                (s.title for s in self._by_kind["summary"] if s.session == item.session), ""
            )
            return LastWord(
                ts=item.ts,
                session_id=item.session or "",
                msg_id=item.message_ids[0] if item.message_ids else item.id,
                text=clip(item.text),
                topic=topic,
            )
        return None

    async def auto_recall(
        self,
        prompt: str,
        *,
        previous_reply: str = "",
        exclude_ids: frozenset[str] = frozenset(),
        limit: int = 6,
        live: LiveHistory | None = None,
    ) -> list[MemoryItem]:
        self.calls.append(("auto_recall", (prompt, previous_reply, exclude_ids, limit)))
        words = set(tokenise(f"{prompt} {previous_reply}"))
        total = max(1, len(self.items))
        # Words in more than a tenth of all memories say little about any one of them.
        common = max(50, total // 10)
        scores: dict[int, float] = defaultdict(float)
        for word in words:
            posting = self._postings.get(word)
            if posting and len(posting) <= common:
                weight = math.log(1 + total / len(posting))
                for index in posting:
                    scores[index] += weight
        wanted = limit + len(exclude_ids)
        ranked = heapq.nsmallest(
            wanted,
            scores.items(),
            key=lambda pair: (-pair[1], -self._stamps[pair[0]], self.items[pair[0]].id),
        )
        out: list[MemoryItem] = []
        for index, _ in ranked:
            item = self.items[index]
            if item.id in exclude_ids or (live is not None and live.shows(item)):
                continue
            out.append(item)
            if len(out) >= limit:
                break
        return out
