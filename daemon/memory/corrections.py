"""Corrected values marked where they still show: summaries, months, recall, WAKE.md.

A correction (`reverie remember --correct`, the `correct` tool, a told new value) or a change
mined at night supersedes a fact; the fact store and its index then hold the new value. But
what was written while the old value held — the day's session summary, the month it was
folded into, a transcript window, the letter in `WAKE.md` — still says the old one. Where
such text is shown, each line that states a superseded value gets a delimited note after it:

    My favourite tea is earl grey. [corrected 2026-11-28: favourite tea is now rooibos, was earl grey]

"The old value shows" in a line when the value the fact held (its key's value, or, for a
fact without one, the words the correction replaced) occurs in it as whole words, case
folded, and, when the fact has a subject, a word of that subject occurs too ("tea" for
"favourite tea"): "Earl Grey ice cream" in a recipe is not the tea. A line that also states
the value holding now already tells the change and is left as it is; so is a line written
after the correction (it was written knowing it). Retracted facts are not marked: they have
no value holding now to point to. `WAKE.md` is marked when it is written, and again when a
correction is made during the day (`mark_file`), since every turn reads it until the next wake.
The context's layers that quote earlier text (the letter, the last dream's reflection, a
handover, open threads, topics, the journal digest) are marked as each turn assembles them
(`MemoryView.mark_corrected`), before they are cut to fit; a cut keeps a line's note.

The superseded facts are read from the index (`memories.superseded_by`, through
`daemon.store.recall_reads`), once per index generation (automatic recall gives the one its
search's refresh read); marking a text is a substring test per correction, then a regex on
a hit.
"""

from __future__ import annotations

import difflib
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from daemon.durable import write_atomic
from daemon.memory.api import MemoryItem
from daemon.memory.ranking import item_of
from daemon.memory.rows import parse_iso
from daemon.memory.slots import slot_anchors
from daemon.store.memory_reads import MemoryReads
from daemon.store.recall_reads import RecallReads

if TYPE_CHECKING:
    from daemon.store.db import Database

_NOTE = re.compile(r"\[(?:corrected|changed) \d{4}-\d{2}-\d{2}: [^\]\n]*\]")
# Automatic recall's own labels in place ("… in Bergen [since changed: now Kotor]") are not the
# line's word on the value: the dated note is still added.
_LABEL = re.compile(r"\[(?:since changed|said later)[^\]\n]*\]")
_MAX_NOTES_A_LINE = 2


@dataclass(frozen=True, kw_only=True)
class Correction:
    """One superseded value and the value holding now."""

    old: str  # the value no longer holding ("earl grey")
    now: str  # the value holding now ("rooibos")
    what: str  # what it is a value of ("favourite tea"); "" when the fact had no key
    on: datetime  # when it stopped holding
    verb: str  # "corrected" (someone said so) | "changed" (sleep found it said)
    anchors: frozenset[str]  # a word of these must be in the line too (none: the value alone)

    def note(self) -> str:
        what = f"{self.what} is now " if self.what else "now "
        return f"[{self.verb} {self.on.date().isoformat()}: {what}{self.now}, was {self.old}]"

    def shows_in(self, line: str) -> bool:
        low = _LABEL.sub(" ", line).lower()
        if self.old.lower() not in low or not _says(low, self.old.lower()):
            return False
        if _says(low, self.now.lower()):
            return False  # the line tells the new value too: it is the change, or knows it
        if not self.anchors:
            return True
        words = set(re.findall(r"[\w'-]+", low))
        return any(a in words or f"{a}s" in words for a in self.anchors)


def _says(text: str, value: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(value) + r"(?![\w-])", text) is not None


def _replaced_words(old: str, new: str) -> tuple[str, str]:
    """The words `new` puts in place of words of `old` ("earl grey" → "rooibos"), or ("", "")."""
    a, b = old.split(), new.split()
    fold = [w.lower().strip(".,;:!?\"'") for w in a], [w.lower().strip(".,;:!?\"'") for w in b]
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, *fold, autojunk=False).get_opcodes():
        if op == "replace":
            return " ".join(a[i1:i2]).strip(".,;:!?\"'"), " ".join(b[j1:j2]).strip(".,;:!?\"'")
    return "", ""


def _what(subject: str, attribute: str) -> str:
    if not subject:
        return ""
    if subject == "person":
        return attribute
    return subject if attribute in ("value", "") else f"{subject} ({attribute})"


def holding_now(old: MemoryItem, facts: Mapping[str, MemoryItem]) -> MemoryItem | None:
    """The fact that holds now where `old` was superseded: the end of its chain of successors.

    None when `old` was never superseded, when the chain's end was retracted since, or when a
    successor is not among `facts`: nothing current to point to.
    """
    cur, seen = old, {old.id}
    while (nxt := str(cur.meta.get("superseded_by") or "")) and nxt not in seen:
        if nxt not in facts:
            break
        seen.add(nxt)
        cur = facts[nxt]
    if cur is old or cur.meta.get("retired_at"):
        return None
    return cur


def correction_of(old: MemoryItem, cur: MemoryItem) -> Correction | None:
    """The correction `cur` made of `old` (through any steps between), or None when it tells
    no value that could show elsewhere."""
    was, now = str(old.meta.get("value") or ""), str(cur.meta.get("value") or "")
    subject = str(old.meta.get("subject") or cur.meta.get("subject") or "")
    attribute = str(old.meta.get("attribute") or cur.meta.get("attribute") or "")
    if not (was and now):
        was, now = _replaced_words(old.text, cur.text)
    if len(was) < 3 or not now or was.lower() == now.lower():
        return None
    on = parse_iso(str(cur.meta.get("valid_from") or "")) or cur.ts
    if on is None:
        return None
    mined = cur.meta.get("source") == "mined"
    return Correction(
        old=was,
        now=now,
        what=_what(subject, attribute),
        on=on,
        verb="changed" if mined else "corrected",
        anchors=slot_anchors(subject, attribute) if subject else frozenset(),
    )


class Corrections:
    """The corrections known to the index now; marks the lines that still state an old value."""

    def __init__(self, found: list[Correction]) -> None:
        # The latest first: a value corrected twice points at what holds now.
        self.found = sorted(found, key=lambda c: c.on, reverse=True)

    @classmethod
    async def load(cls, db: Database, generation: int | None = None) -> Corrections:
        """The corrections as of the index's `generation` (read from the store when not
        given: a caller whose search has just refreshed the index gives the one it read).
        Read from the store once per generation."""
        reads = RecallReads(db)
        if generation is None:
            generation = await reads.generation()
        cached = _CACHE.get(db)
        if cached is not None and cached[0] == generation:
            return cached[1]
        facts = await facts_of(db, await reads.superseded_rowids())
        found: list[Correction] = []
        for old in facts.values():
            cur = holding_now(old, facts)
            if cur is None:
                continue
            made = correction_of(old, cur)
            if made is not None:
                found.append(made)
        out = cls(found)
        _CACHE[db] = (generation, out)
        return out

    def mark(self, text: str, *, written: datetime | None = None) -> str:
        """`text` with a note after each line that states a value since corrected.

        `written`: when the text was written; a correction made after it only is marked.
        Lines already carrying a note are left as they are (marking twice adds nothing).
        """
        if not self.found or not text:
            return text
        out: list[str] = []
        for line in text.split("\n"):
            notes: list[str] = []
            if not _NOTE.search(line):
                for c in self.found:
                    if written is not None and c.on <= written:
                        continue
                    if c.note() not in notes and c.shows_in(line):
                        notes.append(c.note())
                        if len(notes) >= _MAX_NOTES_A_LINE:
                            break
            out.append(line.rstrip() + " " + " ".join(notes) if notes else line)
        return "\n".join(out)

    def items(self, items: list[MemoryItem]) -> list[MemoryItem]:
        """`items` with their text marked (facts are left alone: they are the current values)."""
        out = []
        for item in items:
            if item.kind in ("fact", "profile"):
                out.append(item)
                continue
            marked = self.mark(item.text, written=_written(item))
            out.append(item if marked == item.text else replace(item, text=marked))
        return out


async def facts_of(db: Database, rowids: list[int]) -> dict[str, MemoryItem]:
    """The memories of `rowids` by uid, in the order given (those that exist)."""
    rows = await MemoryReads(db).rows(rowids)
    return {rows[r].uid: item_of(rows[r]) for r in rowids if r in rows}


def _written(item: MemoryItem) -> datetime | None:
    """When a summary, month or chunk was written (a month: its last day): older corrections
    were known to it."""
    if item.kind == "chunk":
        return item.ts
    return None if item.kind == "month" else item.ts


def notes_in(text: str) -> list[str]:
    """The correction notes `text` carries, in order, each once."""
    return list(dict.fromkeys(m.group(0) for m in _NOTE.finditer(text)))


def with_notes(answer: str, read: list[str]) -> str:
    """`answer` with the correction notes of what it was drawn from (`read`) that it does not
    carry yet: a synthesised or extractive answer may quote the old value without its note."""
    missing = [n for t in read for n in notes_in(t) if n not in answer]
    missing = list(dict.fromkeys(missing))
    if not missing:
        return answer
    return answer.rstrip() + "\n\nCorrected since: " + " ".join(missing)


# Per open database (weakly: a closed one's entry goes with it; an id could be reused).
_CACHE: weakref.WeakKeyDictionary[Database, tuple[int, Corrections]] = weakref.WeakKeyDictionary()


async def mark_file(path: Path, db: Database) -> bool:
    """Mark the lines of the file at `path` (WAKE.md) that state a value since corrected.

    The letter is read by every turn until the next wake; a correction made during the day
    reaches it now, not only the next letter. Rewritten atomically, and only when a line
    changed; True when it was.
    """
    try:
        text = await anyio.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False  # no letter yet (or not ours to read): nothing to mark
    marked = (await Corrections.load(db)).mark(text)
    if marked == text:
        return False
    await anyio.to_thread.run_sync(lambda: write_atomic(path, marked, mode=0o600))
    return True


# A note cut short by a caller's clip ("… [corrected 2026-11-…"): an unclosed bracket at the end.
_CUT_NOTE = re.compile(r"\s*\[[^\]\n]*…$")


def unmarked(text: str) -> str:
    """`text` without its correction notes (one cut short at its end included)."""
    return _CUT_NOTE.sub("", _NOTE.sub("", text)).rstrip()


async def marked_lines(db: Database, lines: list[str]) -> list[str]:
    """Short lines quoted from what was written (the greeting's open matters), each marked
    anew: a note a clip cut short is dropped and the whole note added after the line."""
    if not lines:
        return lines
    if not await RecallReads(db).has_memories():
        return lines  # a database without memories (a bare home): nothing was corrected
    marks = await Corrections.load(db)
    out = []
    for line in lines:
        bare = unmarked(line)
        marked = marks.mark(bare)
        out.append(marked if marked != bare else line)
    return out
