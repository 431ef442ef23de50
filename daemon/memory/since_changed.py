"""A value since changed, labelled where recall shows a message or summary that stated it.

The fact store knows which values changed (`superseded_by`); the messages and summaries that
said the old value do not, and recall finds them by the same words as the question ("They
told us the offsite will be in Bergen" for "where is the offsite?"). Such a sentence — in the
message a superseded fact was mined from, or naming the old value beside the fact's subject —
is labelled in place with the current value ("… in Bergen [since changed: now Trieste]."), so
the old value is never shown as if it held. A current value whose statement named the one it
replaced, though no fact held that one ("scratch Bergen, the offsite is going to Kotor"),
labels it too.

The changes are read from the index once per index generation (the caller's search has just
refreshed it and says which generation it read).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, replace

from daemon.memory.api import MemoryItem
from daemon.memory.corrections import facts_of, holding_now
from daemon.memory.slots import slot_anchors
from daemon.store.db import Database
from daemon.store.recall_reads import RecallReads


@dataclass(frozen=True)
class Change:
    """A superseded value: what stated it, how to find it, and what holds now."""

    old: str  # the old value ("Bergen"); "" when the fact had none
    anchors: frozenset[str]  # the subject's words
    message_ids: frozenset[str]  # the messages it was mined from
    now: str  # the label: the current value, or the current fact's text

    @staticmethod
    def of(old: MemoryItem, cur: MemoryItem) -> Change:
        value = str(old.meta.get("value") or "") or str(cur.meta.get("changed_from") or "")
        subject, attribute = (
            str(old.meta.get("subject") or ""),
            str(old.meta.get("attribute") or ""),
        )
        provenance = old.meta.get("provenance")
        ids = provenance.get("message_ids", []) if isinstance(provenance, dict) else []
        current = str(cur.meta.get("value") or "")
        return Change(
            old=value,
            anchors=slot_anchors(subject, attribute) if subject else frozenset(),
            message_ids=frozenset(str(i) for i in ids),
            now=f"now {current}" if current else cur.text.strip().rstrip(".!"),
        )

    @staticmethod
    def replaced(fact: MemoryItem) -> Change | None:
        """The change a current fact's statement named ("scratch Bergen, … Kotor"), or None."""
        replaced, value = str(fact.meta.get("replaced") or ""), str(fact.meta.get("value") or "")
        subject = str(fact.meta.get("subject") or "")
        if not (replaced and value and subject) or fact.meta.get("retired_at"):
            return None
        return Change(
            old=replaced,
            now=f"now {value}",
            message_ids=frozenset(),
            anchors=slot_anchors(subject, str(fact.meta.get("attribute") or "")),
        )


async def changes(db: Database, generation: int) -> list[Change]:
    """The values since changed, as of the index's `generation` (read once per generation)."""
    cached = _CACHE.get(db)
    if cached is not None and cached[0] == generation:
        return cached[1]
    facts = await facts_of(db, await RecallReads(db).changed_rowids())
    found: list[Change] = []
    for old in facts.values():
        cur = holding_now(old, facts)
        if cur is not None:
            found.append(Change.of(old, cur))
    found += [c for c in map(Change.replaced, facts.values()) if c is not None]
    _CACHE[db] = (generation, found)
    return found


# Per open database (weakly: a closed one's entry goes with it).
_CACHE: weakref.WeakKeyDictionary[Database, tuple[int, list[Change]]] = weakref.WeakKeyDictionary()


async def label_changed(db: Database, generation: int, items: list[MemoryItem]) -> list[MemoryItem]:
    """`items`, each sentence of a message or summary that states a value since superseded
    labelled with it (facts are the current values: left as they are)."""
    said = [i for i in items if i.kind not in ("fact", "profile")]
    if not said:
        return items
    found = await changes(db, generation)
    if not found:
        return items
    labelled = {i.id: _label_changes(i, found) for i in said}
    return [replace(i, text=labelled[i.id]) if i.id in labelled else i for i in items]


_SENTENCE_END = re.compile(r"[^.!?\n]+(?:[.!?]+|(?=\n)|$)")


def _label_changes(item: MemoryItem, changes: list[Change]) -> str:
    """`item`'s text with each sentence stating a superseded value labelled in place."""
    ids = set(item.message_ids)
    parts: list[str] = []
    last = 0
    text = item.text
    for m in _SENTENCE_END.finditer(text):
        sentence = m.group(0)
        low = sentence.lower()
        words = set(re.findall(r"[\w'-]+", low))
        label = ""
        for change in changes:
            if not change.old or not _says(low, change.old.lower()):
                continue
            if change.now.lower().removeprefix("now ") in low:
                continue  # the sentence of the change itself
            if (ids & change.message_ids) or (
                change.anchors and any(a in words or f"{a}s" in words for a in change.anchors)
            ):
                label = f" [since changed: {change.now}]"
                break
        if label:
            body = sentence.rstrip()
            stop = len(body) - len(body.rstrip(".!?"))
            cut = m.start() + len(body) - stop
            parts.append(text[last:cut] + label)
            last = cut
    return "".join(parts) + text[last:] if parts else text


def _says(sentence: str, value: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(value) + r"(?![\w-])", sentence) is not None
