"""The newest word on a subject, for automatic recall: paraphrases that stand out, and changes.

Two things automatic recall needs as a store grows for years, neither of which a fact must
hold:

- **A paraphrase that stands out** (`standouts`). A question that shares no word with what
  was said ("what should I brew if I want my usual cuppa?" / "my favourite tea lately is
  genmaicha") is found by vector alone, and a sentence said in passing inside a longer message
  sits well below the relevance floor's absolute cosine (0.33–0.42 for MiniLM, where the floor
  is 0.45), so the floor cut it, and the lexical side's hits took its place among the
  candidates. What tells it apart from an unrelated best hit is not its cosine but its lead:
  the memory the vectors rank first over the whole store stands clear of the tenth
  (`STANDOUT`: MiniLM paraphrases led the tenth by 0.08–0.15, the best hit of an unrelated
  request — "make me a sandwich", "tell me a joke", "write a haiku" — by 0.02–0.06). A memory
  that leads so, above a lower floor, is a candidate and relevant.
- **The sentence that changed it** (`subject_overlap`, `says_changed`). A sentence recalled by
  the question's words ("the plan is to buy a flat in Leith" for "where are we hoping to buy a
  place?") may share no word of the question with the later sentence that changed it ("we
  gave up on Leith, now we're looking at flats in Grünerløkka"): what they share is the
  subject — two content words, or a name. A later sentence that shares so with the recalled
  one and says something changed is the newest word on it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from daemon.memory.api import MemoryItem
from daemon.memory.index import MemoryIndex
from daemon.memory.query import asked_stems
from daemon.memory.search import undated
from daemon.memory.slots import says_it_changed
from daemon.text import STOP_WORDS

# Per embedder: (the least cosine, the lead over the tenth best) at which the vectors' best
# memory stands out. Measured on a 1,100-day life's store (1,725 memories, all-MiniLM-L6-v2).
STANDOUT = {"all-MiniLM-L6-v2": (0.32, 0.075)}
STANDOUT_POOL = 10
# Words of change the slot rules do not read as one (they would supersede a fact on them):
# said of a plan, they say it changed ("X took over", "X fell through", "now, not X").
_MORE_CUES = re.compile(
    r"\b(?:took over|takes over|taking over|fell through|falls? through|fired|called off|"
    r"pulled out|backed out|got cancell?ed|gave up|instead of)\b|\bnow,? not\b|,\s*not\b",
    re.I,
)
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|(?=\n)|$)")
_NAME = re.compile(r"(?<=[\w,;] )[A-Z][\w'’-]+")
_RUN = re.compile(r"[A-Z][\w'’-]+(?: [A-Z][\w'’-]+)*")
_LABEL_HEAD = re.compile(r"^\[said later, [^:\]]*: ")


async def standouts(
    index: MemoryIndex, prompt: str, kinds: Collection[str]
) -> tuple[list[MemoryItem], dict[str, float]]:
    """The memories the vectors rank first for `prompt` that stand clear of the rest, with
    their cosines; none when the embedder has no measured bar or nothing leads."""
    bar = STANDOUT.get(index.embedder.name)
    if bar is None or index.embedder.dim == 0:
        return [], {}
    # The vector side's order is nudged by recency and kind: twice the pool, by cosine.
    found = await index.search(prompt, k=2 * STANDOUT_POOL, kinds=kinds, mode="vector")
    if len(found) < 2 * STANDOUT_POOL:
        return [], {}  # a small store: the floor alone decides
    near = await index.searcher.similarities(prompt, found)
    sims = sorted((near.get(i.id, -1.0) for i in found), reverse=True)
    least, lead = bar
    cut = max(least, sims[STANDOUT_POOL - 1] + lead)
    out = [i for i in found if near.get(i.id, -1.0) >= cut]
    return out, {i.id: near[i.id] for i in out}


def sentences(text: str) -> list[str]:
    """The sentences of `text` (a line break ends one too)."""
    return [m.group(0).strip() for m in _SENTENCE.finditer(text) if m.group(0).strip()]


def says_changed(sentence: str) -> bool:
    """Whether `sentence` says something changed: the slot rules' words of change, or a plan's
    ("took over", "fell through", "now, not X")."""
    return says_it_changed(sentence) or bool(_MORE_CUES.search(sentence))


def subject_overlap(later: str, earlier: str) -> int:
    """How much of a subject two sentences share: their common content stems, a name shared
    (a capitalised word inside the earlier sentence, "Leith") counted twice; 0 when the later
    one says nothing new (the same words again are no change)."""
    late, early = asked_stems(later), asked_stems(earlier)
    if not late - early:
        return 0
    shared = late & early
    names = {n.lower() for n in _NAME.findall(earlier)} - STOP_WORDS
    names = {n for n in names if n != "i" and not n.startswith(("i'", "i’"))}
    low = later.lower()
    bonus = 1 if any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", low) for n in names) else 0
    return len(shared) + bonus


def bearing(text: str, wanted: frozenset[str]) -> list[str]:
    """The sentences of a recalled `text` that bear on the question: those with its words
    (a memory found by vector alone has none; its names are followed by `named_later`)."""
    return [s for s in sentences(text) if wanted & asked_stems(s)]


_MONTHS_DAYS = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday".split()
)
NAME_LOOKUPS = 6  # names a turn looks for later changes of (one BM25 pass each)
_NAME_CANDIDATES = 10
_LABEL_WORDS = 40


def names_in(sentence: str) -> list[str]:
    """The names in `sentence`: runs of capitalised words ("Hearth Works", "Leith"), a run
    at the sentence's start or after a speaker's label only of two words or more; not "I",
    a month or a weekday alone. A label of recall's own ("[said later, 8 April 2028: ") is
    not part of the sentence."""
    body = _LABEL_HEAD.sub("", sentence.strip())
    out = []
    for m in _RUN.finditer(body):
        words = [w for w in m.group(0).split() if not _not_a_name(w)]
        first = m.start() == 0 or body[: m.start()].rstrip().endswith(":")
        if not words or (first and len(m.group(0).split()) < 2):
            continue
        out.append(" ".join(words))
    return out


def _not_a_name(word: str) -> bool:
    low = word.lower()
    return low in STOP_WORDS or low in _MONTHS_DAYS or low == "i" or low.startswith(("i'", "i’"))


def later_label(when: datetime, sentence: str) -> str:
    """ "[said later, 8 April 2028: …]": a later sentence shown before what it changed."""
    words = sentence.split()
    if len(words) > _LABEL_WORDS:
        sentence = " ".join(words[:_LABEL_WORDS]) + " […]"
    return f"[said later, {when.day} {when:%B %Y}: {sentence}]"


async def named_later(index: MemoryIndex, items: list[MemoryItem]) -> list[MemoryItem]:
    """`items`, each sentence naming a value that a later sentence says changed shown after
    that later sentence ("[said later, 8 April 2028: we fired Nordbygg, the kitchen job goes
    to Hearth Works]\\nearlier: … The kitchen will be done by Nordbygg.").

    Whatever brought a memory in (the question's words, a vector, a greeting), a value it
    names may have changed since with no fact holding either: each name in the shown
    memories (the value of most plans: a place, a firm, a person) is looked up among later
    messages (`NAME_LOOKUPS` at most, by rank), and the latest later sentence that names it,
    shares the subject (`subject_overlap` ≥ 2) and says something changed is put first.
    A change whose message is already shown is left where it is: the value is not alone.
    """
    shown = {m for i in items for m in i.message_ids}
    out = list(items)
    budget = LookupBudget(done=set(), left=NAME_LOOKUPS)
    for pos, item in enumerate(items):
        if item.ts is None:
            continue
        labels = await changed_since(index, item.text, item.ts, shown, budget)
        if labels:
            out[pos] = replace(
                item, text=newest_first(labels, item.text), meta={**item.meta, "said_later": True}
            )
    return out


@dataclass
class LookupBudget:
    """The names a turn or a recall has looked up, and how many lookups it has left."""

    done: set[str]  # names looked up already (lowercase)
    left: int  # lookups left


async def changed_since(
    index: MemoryIndex,
    text: str,
    since: datetime,
    shown: set[str],
    budget: LookupBudget | None = None,
) -> list[str]:
    """The labels of the later changes of the values `text` (written at `since`) names, newest
    first; `shown` (message ids already shown, updated) are not repeated."""
    budget = budget or LookupBudget(done=set(), left=NAME_LOOKUPS)
    labels: list[str] = []
    # (name, since when, the sentence naming it): a change found names its new value, which
    # may have changed again since (A → B → C: C is the newest word, put first).
    todo = [
        (name, since, said)
        for said in sentences(undated(text))
        if "[since changed" not in said  # the fact store's change is already said
        for name in names_in(said)
    ]
    while todo and budget.left > 0:
        name, after, said = todo.pop(0)
        if name.lower() in budget.done:
            continue
        budget.done.add(name.lower())
        budget.left -= 1
        change = await _latest_change(index, name, after, said)
        if change is None:
            continue
        when, cand, sentence = change
        if set(cand.message_ids) & shown:
            continue
        shown |= set(cand.message_ids)
        labels.insert(0, later_label(when, _unlabelled(sentence)))
        todo[:0] = [(n, when, sentence) for n in names_in(sentence)]
    return labels


def newest_first(labels: list[str], text: str) -> str:
    """`text` after the labels of what changed since, marked as earlier (once)."""
    if not labels:
        return text
    joint = "\n" if text.startswith("[said later") else "\nearlier: "
    return "\n".join(labels) + joint + text


def _unlabelled(sentence: str) -> str:
    """A sentence without its speaker's label ("user: …")."""
    return re.sub(r"^(?:user|assistant|the person|reverie)\s*:\s*", "", sentence, flags=re.I)


async def _latest_change(
    index: MemoryIndex, name: str, since: datetime, said: str
) -> tuple[datetime, MemoryItem, str] | None:
    """The latest sentence after `since` naming `name` that shares the subject of `said` and
    says something changed, with its memory and time; None when none does."""
    later = await index.search(
        name,
        k=_NAME_CANDIDATES,
        kinds=["chunk"],
        mode="lexical",
        after=since + timedelta(seconds=1),
    )
    found: list[tuple[datetime, MemoryItem, str]] = []
    for cand in later:
        if cand.ts is None:
            continue
        for sentence in sentences(undated(cand.text)):
            if (
                name.lower() in sentence.lower()
                and says_changed(sentence)
                and subject_overlap(sentence, said) >= 2
            ):
                found.append((cand.ts, cand, sentence))
                break
    return max(found, key=lambda c: c[0]) if found else None
