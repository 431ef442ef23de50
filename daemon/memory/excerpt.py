"""Fit search results to what answers need: the evidence, and as little around it as possible.

What the model sees of memory each turn is a token budget, so a result carries the lines that
bear on the question rather than everything its memory holds:

- a window of messages (`chunks.py`) is cut to its best line (scored by the message's own
  vector against the question's, plus the share of the question's words it uses), the line
  after it, the one before and the second after (an answer usually follows its question),
  as long as those cost little, and any other line that scores as well on its own; a gap
  between kept lines is marked "…";
- a message long enough to crowd out the rest (code, a plan of several hundred words) is
  excerpted to the sentences or lines that share the question's words, "…" where text is left
  out (its opening, when nothing is shared: the vectors found it); it is also indexed as its
  passages (`passages`), so the part that answers can be found and shown on its own; a
  message of a few sentences is cut the same way to a sentence or two;
- a message already shown by a better result is not shown again: one message, one place
  (its other passages may still be);
- a window's lines name the date once, where it changes.

An excerpted item's `message_ids` are exactly the messages whose text it shows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from daemon.memory.api import MemoryItem
from daemon.memory.query import asked_stems, mentioned_stems
from daemon.tokens import default_counter


def count_tokens(text: str) -> int:
    """Tokens as the tokenizer counts them, never scaled by the calibration the agent loop
    learns from a provider's reported usage: whether a message is long, and where its passages
    are cut, must not depend on what a provider reported earlier in this process."""
    return default_counter().raw(text)


# A window keeps its best line and its neighbours, in this order: the line after it, the one
# before, the second after. In a conversation the answer follows the question it answers, and
# the question names what the answer only implies. Tuned on the LoCoMo tuning split (see
# bench/README.md, "Recall that fits").
NEIGHBOURS = (1, -1, 2)
# What those neighbours may cost together: three lines of everyday chat, one long message.
CONTEXT_TOKENS = 150
# A line elsewhere in the window is kept when it scores this well on its own.
LINE_KEEP = 0.45
# The share of the question's words a line uses, added to its vector similarity.
LEXICAL_WEIGHT = 0.3
# A message longer than this is long: it is indexed as passages too, and an excerpt of it is
# about `EXCERPT_TOKENS` long.
LONG_MESSAGE_TOKENS = 160
EXCERPT_TOKENS = 150
# A message of a few sentences (longer than this, up to a long one) is cut to the sentences
# that bear on the question, about `SENTENCES_TOKENS` in all: three sentences of chat, of which
# one answers, cost a third of the budget they would whole. A sentence kept is kept whole up
# to `SENTENCE_TOKENS` (and a message found by its vector alone shows that much of its
# opening): the answer may sit at the end of the sentence that matched. Measured on the LoCoMo
# tuning split (bench/README.md, "Recall that fits"): recall within 1,500 tokens +2.5 points,
# recall@10 equal, the evidence sentence still shown for all but 0.2 points of it.
MEDIUM_MESSAGE_TOKENS = 35
SENTENCES_TOKENS = 30
SENTENCE_TOKENS = 60
# A long message is also indexed as passages of about this many tokens (`passages`).
PASSAGE_TOKENS = 120
GAP = "…"
# In `fit`'s shown set: a passage of this message is shown (a passage is shown by its own id).
PART = "part-of:"

# "Maya (8 May 2023): text" → ("Maya", "8 May 2023", "text"); the label `chunks.message_line`
# writes. The content may span lines (code, lists).
_LABEL = re.compile(r"^([^\n:()]{1,60}?)(?:\s*\(([^)\n]{1,40})\))?:\s?(.*)$", re.DOTALL)
# Sentence ends inside a paragraph; paragraphs and code lines are split on newlines first.
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'“(\[]?[A-Z0-9])")


@dataclass(frozen=True, kw_only=True)
class Line:
    """One message of a result: its message id, its rendered line and the memory it is."""

    message_id: str
    text: str
    rowid: int | None = None


@dataclass(frozen=True, kw_only=True)
class Question:
    """What the results are fitted to: the question's stems and, with vectors, its vector."""

    stems: frozenset[str]
    vector: np.ndarray | None = None

    @classmethod
    def of(cls, text: str, vector: np.ndarray | None = None) -> Question:
        return cls(stems=asked_stems(text), vector=vector)

    def share(self, text: str) -> float:
        """The share of the question's words that `text` uses."""
        if not self.stems:
            return 0.0
        return len(self.stems & mentioned_stems(text)) / len(self.stems)


def split_label(line: str) -> tuple[str, str, str] | None:
    """(speaker, date, content) of a message line, None when it has no speaker label."""
    m = _LABEL.match(line)
    if m is None:
        return None
    return m.group(1).strip(), (m.group(2) or "").strip(), m.group(3)


def _pieces(content: str) -> list[str]:
    """A long message's units: its lines (code, lists), each paragraph line split in sentences."""
    out: list[str] = []
    for line in content.split("\n"):
        if not line.strip():
            continue
        out.extend(p for p in _SENTENCE.split(line) if p.strip())
    return out


def passages(content: str) -> list[str]:
    """A long message cut into passages of about `PASSAGE_TOKENS` for the index ([] when short).

    Whole paragraphs (and code lines) are grouped while they fit; a paragraph longer than a
    passage is cut between sentences. Each passage is a memory of its own, so search matches
    the part of a long message that answers, by words and by vector (an embedder reads only
    a message's first few hundred tokens).
    """
    if count_tokens(content) <= LONG_MESSAGE_TOKENS:
        return []
    units: list[str] = []
    for para in re.split(r"\n\s*\n", content.strip()):
        if count_tokens(para) <= PASSAGE_TOKENS:
            units.append(para.strip())
        else:
            units.extend(_pieces(para))
    out: list[str] = []
    current: list[str] = []
    used = 0
    for unit in units:
        cost = count_tokens(unit)
        if current and used + cost > PASSAGE_TOKENS:
            out.append("\n".join(current))
            current, used = [], 0
        current.append(unit)
        used += cost
    if current:
        out.append("\n".join(current))
    return out


def excerpt_message(content: str, question: Question, *, passage: bool = False) -> str:
    """`content` cut to what bears on `question`, when it is more than a few lines; whole
    when it is short.

    Pieces (lines, sentences) are ranked by the question's words they use, each weighted by
    how few pieces use it; the best are kept in their order until the excerpt's size
    (`EXCERPT_TOKENS` for a long message, `SENTENCES_TOKENS` for a few sentences), and "…"
    marks each gap. A message that shares no word with the question (the vectors found it)
    keeps its opening.
    """
    size = count_tokens(content)
    if size <= (LONG_MESSAGE_TOKENS if passage else MEDIUM_MESSAGE_TOKENS):
        return content
    budget = EXCERPT_TOKENS if size > LONG_MESSAGE_TOKENS else SENTENCES_TOKENS
    pieces = _pieces(content)
    if len(pieces) <= 1:
        return _opening(content, max(budget, SENTENCE_TOKENS))
    # A word of the question that most pieces use (the speaker's name in a pasted exchange)
    # says little about which piece answers: each is weighted by its rarity in the message.
    found = [mentioned_stems(p) & question.stems for p in pieces]
    uses: dict[str, int] = {}
    for stems in found:
        for w in stems:
            uses[w] = uses.get(w, 0) + 1
    rarity = {w: math.log(1.0 + len(pieces) / n) for w, n in uses.items()}
    shares = [sum(rarity[w] for w in stems) for stems in found]
    if max(shares) <= 0:
        return _opening(content, max(budget, SENTENCE_TOKENS))
    chosen: set[int] = set()
    used = 0
    for i in sorted(range(len(pieces)), key=lambda i: (-shares[i], i)):
        if shares[i] <= 0:
            break
        cost = count_tokens(pieces[i])
        if chosen and used + cost > budget:
            continue
        chosen.add(i)
        used += cost
    if len(chosen) == 1 and used < budget // 2:
        # A short match alone says little: the piece after it usually goes on with it.
        (i,) = chosen
        if i + 1 < len(pieces):
            chosen.add(i + 1)
    out: list[str] = []
    last = -1
    for i in sorted(chosen):
        if i != last + 1:
            out.append(GAP)
        out.append(_clip(pieces[i], max(budget, SENTENCE_TOKENS)))
        last = i
    if last != len(pieces) - 1:
        out.append(GAP)
    return " ".join(out)


def _opening(content: str, budget: int) -> str:
    return _clip(content, budget) if count_tokens(content) > budget else content


def _clip(text: str, tokens: int) -> str:
    """`text` cut at a word boundary to about `tokens` tokens, "…" where it was cut."""
    if count_tokens(text) <= tokens:
        return text
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) + 1 <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " " + GAP


def excerpt_line(line: str, question: Question, *, passage: bool = False) -> str:
    """A message line with its content excerpted (`excerpt_message`), its label kept.

    A passage of a long message is already the part of it that matched: it is cut only as a
    long message is, never to a sentence or two (on long messages that lost the evidence's
    sentence more often than it saved tokens: bench/README.md, "Recall that fits")."""
    parts = split_label(line)
    if parts is None:
        return excerpt_message(line, question, passage=passage)
    who, when, content = parts
    short = excerpt_message(content, question, passage=passage)
    if short is content:
        return line
    return f"{who} ({when}): {short}" if when else f"{who}: {short}"


def line_scores(
    lines: Sequence[Line],
    question: Question,
    vectors: Mapping[int, np.ndarray],
    via: str = "",
) -> list[float]:
    """Each line's relevance: its message's vector against the question's, plus word share.

    A line naming `via` (the bridge name a second hop found the item by) is the item's reason
    to be there: it scores above any other.
    """
    scores = []
    for line in lines:
        vec = vectors.get(line.rowid) if line.rowid is not None else None
        sim = (
            float(vec @ question.vector) if vec is not None and question.vector is not None else 0.0
        )
        bridge = 2.0 if via and via.lower() in line.text.lower() else 0.0
        scores.append(sim + LEXICAL_WEIGHT * question.share(line.text) + bridge)
    return scores


def window_keep(scores: Sequence[float], costs: Sequence[int] | None = None) -> list[int]:
    """Which lines of a window to show: the best, its neighbours, and any that scores as well.

    The neighbours (the line after the best, the one before, the second after) are kept while
    they cost no more than `CONTEXT_TOKENS` together (`costs`: each line's tokens as shown, 0
    for a line shown already): around a long message the context is one neighbour or none.
    """
    if not scores:
        return []
    best = max(range(len(scores)), key=lambda i: scores[i])
    keep = {best} | {i for i, s in enumerate(scores) if s >= LINE_KEEP}
    used = 0
    for i in (best + n for n in NEIGHBOURS):
        if not 0 <= i < len(scores) or i in keep:
            continue
        cost = costs[i] if costs is not None else 0
        if used + cost > CONTEXT_TOKENS:
            break
        keep.add(i)
        used += cost
    return sorted(keep)


def render(lines: Sequence[tuple[int, str]]) -> str:
    """Kept lines (position in the window, text) as one text: the date named where it
    changes, "…" where lines were left out between two kept ones."""
    out: list[str] = []
    last_pos: int | None = None
    last_date = ""
    for pos, text in lines:
        if last_pos is not None and pos != last_pos + 1:
            out.append(GAP)
        parts = split_label(text)
        if parts is not None and parts[1]:
            who, when, content = parts
            text = f"{who}: {content}" if when == last_date else text
            last_date = when
        out.append(text)
        last_pos = pos
    return "\n".join(out)


def _blocked(line: Line, shown: set[str], passage: str | None) -> bool:
    """Whether `line` is shown already: a message shown (whole or excerpted) is not shown
    again, in part or whole; once a passage of it is shown, its other passages may be (the
    item `passage`), not the message again."""
    if line.message_id in shown:
        return True
    return passage in shown if passage is not None else PART + line.message_id in shown


def fit(
    items: Sequence[MemoryItem],
    question: Question,
    *,
    lines_of: Mapping[str, Sequence[Line]],
    vectors: Mapping[int, np.ndarray],
    k: int,
    shown: set[str] | None = None,
) -> list[MemoryItem]:
    """The first `k` items fitted to `question`, each message shown once (see the module).

    `lines_of` maps a chunk's id to its messages in order (a single message's chunk: itself;
    a window: its parts); a chunk missing from it is shown whole. `vectors` holds the
    messages' vectors by rowid. `shown` (message ids already shown, filled in; a passage of a
    long message by its item id, and its message as `PART` + id) lets a caller fit several
    lists against one turn.
    """
    shown = set() if shown is None else shown
    out: list[MemoryItem] = []
    for item in items:
        if len(out) >= k:
            break
        lines = lines_of.get(item.id) if item.kind == "chunk" else None
        if not lines:
            if item.kind == "chunk" and item.message_ids and set(item.message_ids) <= shown:
                continue
            out.append(item)
            if item.kind == "chunk":
                shown.update(item.message_ids)
            continue
        via = str(item.meta.get("via") or "")
        passage = item.id if item.meta.get("passage") is not None else None
        # An item found through a name is cut around the name as well as the question's words.
        asked = replace(question, stems=question.stems | asked_stems(via)) if via else question
        shows = [excerpt_line(line.text, asked, passage=passage is not None) for line in lines]
        if len(lines) > 1:
            costs = [
                0 if _blocked(ln, shown, passage) else count_tokens(t)
                for ln, t in zip(lines, shows, strict=True)
            ]
            keep = window_keep(line_scores(lines, question, vectors, via), costs)
        else:
            keep = [0]
        kept = [(i, lines[i]) for i in keep if not _blocked(lines[i], shown, passage)]
        if not kept:
            continue
        text = render([(i, shows[i]) for i, _ in kept])
        ids = tuple(line.message_id for _, line in kept)
        if passage is not None:
            shown.update({passage, *(PART + m for m in ids)})
        else:
            shown.update(ids)
        if text == item.text and ids == item.message_ids:
            out.append(item)
            continue
        meta = {**item.meta, "excerpt": True}
        if via and via.lower() not in text.lower():
            # The line naming the bridge is shown by a better item: this one is its context.
            meta.pop("via")
        out.append(replace(item, text=text, message_ids=ids, meta=meta))
    return out
