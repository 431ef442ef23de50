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
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import lru_cache

from daemon.memory.api import MemoryItem
from daemon.memory.index import MemoryIndex
from daemon.memory.lookups import Lookup, lexical_lookups
from daemon.memory.query import asked_stems, mentioned_stems
from daemon.memory.ranking import undated
from daemon.memory.slots import says_it_changed
from daemon.memory.text import content_words
from daemon.resources import forgettable
from daemon.text import STOP_WORDS
from daemon.tokens import count_tokens

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


@lru_cache(maxsize=8192)
def says_changed(sentence: str) -> bool:
    """Whether `sentence` says something changed: the slot rules' words of change, or a plan's
    ("took over", "fell through", "now, not X"). Cached: the same later messages are read for
    every subject of a turn, and turn after turn."""
    return says_it_changed(sentence) or bool(_MORE_CUES.search(sentence))


@lru_cache(maxsize=8192)
def _asked(text: str) -> frozenset[str]:
    return asked_stems(text)


forgettable(says_changed.cache_clear)
forgettable(_asked.cache_clear)


def subject_overlap(later: str, earlier: str) -> int:
    """How much of a subject two sentences share: their common content stems, a name shared
    (a capitalised word inside the earlier sentence, "Leith") counted twice; 0 when the later
    one says nothing new (the same words again are no change)."""
    late, early = _asked(later), _asked(earlier)
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
    dated = [(pos, item) for pos, item in enumerate(items) if item.ts is not None]
    budget = LookupBudget(done=set(), left=NAME_LOOKUPS)
    found = await changes_since(index, [(i.text, i.ts) for _, i in dated if i.ts], shown, budget)
    out = list(items)
    for (pos, item), labels in zip(dated, found, strict=True):
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


async def changes_since(
    index: MemoryIndex,
    texts: Sequence[tuple[str, datetime]],
    shown: set[str],
    budget: LookupBudget | None = None,
) -> list[list[str]]:
    """Per (text, written at), the labels of the later changes of the values the text names,
    newest first; `shown` (message ids already shown, updated) are not repeated.

    The names of every text are looked up together, one trip to the database a round
    (`daemon.memory.lookups`); a change found names its new value, which may have changed
    again since (A → B → C: C is the newest word, put first): its names are the next round's.
    Each name is looked up once, `budget.left` lookups at most.
    """
    budget = budget or LookupBudget(done=set(), left=NAME_LOOKUPS)
    labels: list[list[str]] = [[] for _ in texts]
    # (which text, name, since when, the sentence naming it)
    todo = [
        (k, name, since, said)
        for k, (text, since) in enumerate(texts)
        for said in sentences(undated(text))
        if "[since changed" not in said  # the fact store's change is already said
        for name in names_in(said)
    ]
    while todo and budget.left > 0:
        batch = []
        for k, name, after, said in todo:
            if budget.left <= 0:
                break
            if name.lower() in budget.done:
                continue
            budget.done.add(name.lower())
            budget.left -= 1
            batch.append((k, name, after, said))
        lookups = [
            Lookup(query=name, k=_NAME_CANDIDATES, after=after + timedelta(seconds=1))
            for _, name, after, _ in batch
        ]
        todo = []
        for (k, name, _, said), later in zip(
            batch, await lexical_lookups(index.searcher, lookups), strict=True
        ):
            change = _latest_change(later, name, said)
            if change is None:
                continue
            when, cand, sentence = change
            if set(cand.message_ids) & shown:
                continue
            shown |= set(cand.message_ids)
            labels[k].insert(0, later_label(when, _unlabelled(sentence)))
            todo += [(k, n, when, sentence) for n in names_in(sentence)]
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


def _latest_change(
    later: list[MemoryItem], name: str, said: str
) -> tuple[datetime, MemoryItem, str] | None:
    """Among `later` (the lookup of `name` after the sentence `said`), the latest sentence
    naming `name` that shares the subject of `said` and says something changed, with its
    memory and time; None when none does."""
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


LATER_LOOKUPS = 4  # subjects a turn looks for later words about (in one BM25 pass)
_LATER_KINDS = ("chunk", "fact", "summary", "month")
_LATER_CANDIDATES = 20  # per subject
_LATER_TOKENS = 40
_LATER_WORDS = 24  # full-text terms of a turn's later-word lookup, at most


@lru_cache(maxsize=4096)
def stems(text: str) -> frozenset[str]:
    """`mentioned_stems`, cached: the same memories come back turn after turn, and stemming
    long chunks adds up."""
    return mentioned_stems(text)


forgettable(stems.cache_clear)


async def said_later(
    index: MemoryIndex, items: list[MemoryItem], wanted: frozenset[str]
) -> list[MemoryItem]:
    """`items`, a message among them followed by the latest later sentence that says the
    thing it speaks of changed ("internally the project is called Marigold" … [said later,
    12 March: the project's been renamed, it's Heron now]).

    The "since changed" labels mark a value the fact store saw replaced; a value no rule read
    (said in words the extractive rules were not shaped on) has no fact to be superseded, and
    recall finds its first statement by the question's words, not the sentence of the change,
    which may share only the subject ("project") with it. So the subject of each message —
    the question's words it uses, and the words of its sentences that bear on the question —
    is looked up among later messages by words alone: the subjects of a turn (`LATER_LOOKUPS`
    at most) in one BM25 pass over their words together, after the earliest of them, each
    subject then reading the candidates written after its own messages. The latest later
    sentence naming the subject with a word of change is shown beside the best-ranked message
    before it, so the old value is never shown alone as if it held.
    """
    subjects = _subjects(items, wanted)
    if not subjects:
        return items
    since = min(ts for _, (dated, _) in subjects for _, ts in dated)
    lookup = Lookup(
        query=" ".join(_lookup_words(items, subjects)),
        k=_LATER_CANDIDATES * len(subjects),
        after=since + timedelta(seconds=1),
    )
    [later] = await lexical_lookups(index.searcher, [lookup])
    shown = {m for i in items for m in i.message_ids}
    # A change already among the items is still put first beside what it changed (once).
    labelled: set[str] = set()
    out = list(items)
    read = _read(later)
    for subject, (dated, said) in subjects:
        after = min(ts for _, ts in dated) + timedelta(seconds=1)
        mine = [r for r in read if r[0].ts is not None and r[0].ts >= after]
        change = _latest_said(mine, subject, said, shown, labelled)
        if change is None:
            continue
        when, cand, sentence = change
        if count_tokens(sentence) > _LATER_TOKENS:
            sentence = clip_tokens(sentence, _LATER_TOKENS)
        label = f"[said later, {when.day} {when:%B %Y}: {sentence}]"
        # Once, beside the best-ranked message it follows: the others are its context.
        before = [p for p, ts in dated if ts < when]
        if not before:
            continue
        item = out[before[0]]
        # The newest word first, what it follows marked as earlier.
        out[before[0]] = replace(
            item,
            text=f"{label}\nearlier: {item.text}",
            message_ids=(*item.message_ids, *cand.message_ids),
            meta={**item.meta, "said_later": cand.id},
        )
        shown |= set(cand.message_ids)
        labelled |= set(cand.message_ids)
    return out


_Subject = tuple[frozenset[str], tuple[list[tuple[int, datetime]], list[str]]]


def _subjects(items: list[MemoryItem], wanted: frozenset[str]) -> list[_Subject]:
    """The subjects of `items` (the question's words each uses), each with its messages'
    places and times and their sentences that bear on the question; messages that speak of
    the same thing share one subject. The first `LATER_LOOKUPS`."""
    subjects: dict[frozenset[str], tuple[list[tuple[int, datetime]], list[str]]] = {}
    for pos, item in enumerate(items):
        if item.kind not in _LATER_KINDS or item.ts is None:
            continue
        subject = wanted & stems(item.text)
        if subject:
            dated, said = subjects.setdefault(subject, ([], []))
            dated.append((pos, item.ts))
            said.extend(bearing(undated(item.text), wanted))
    return list(subjects.items())[:LATER_LOOKUPS]


def _lookup_words(items: list[MemoryItem], subjects: list[_Subject]) -> list[str]:
    """The words the subjects are looked up by, each once: the question's words their messages
    use, then words of their sentences that bear on the question (the later sentence of a
    change may share only those: "Leith") — names first, then the longest — up to
    `_LATER_WORDS` in all (each word is one more full-text term to count and score)."""
    asked = [
        w
        for subject, (dated, _) in subjects
        for p, _ in dated
        for w in content_words(items[p].text)
        if stems(w) & subject
    ]
    named = [n.lower() for _, (_, said) in subjects for s in said for n in _NAME.findall(s)]
    bearing = [w for _, (_, said) in subjects for s in said for w in content_words(s)]
    said_words = list(dict.fromkeys(bearing))
    names = [w for w in dict.fromkeys(named) if w in said_words and w not in STOP_WORDS]
    rest = sorted((w for w in said_words if w not in names), key=len, reverse=True)
    words = list(dict.fromkeys([*asked, *names, *rest]))
    return words[: max(_LATER_WORDS, len(dict.fromkeys(asked)))]


_Read = tuple[MemoryItem, list[tuple[str, frozenset[str], frozenset[str]]]]


def _read(later: list[MemoryItem]) -> list[_Read]:
    """Each later memory with its sentences, their stems and the stems they could ask (read
    once a turn for every subject)."""
    return [
        (cand, [(s, stems(s), _asked(s)) for s in sentences(undated(cand.text))])
        for cand in later
        if cand.ts is not None
    ]


def _latest_said(
    later: list[_Read],
    subject: frozenset[str],
    said: list[str],
    shown: set[str],
    labelled: set[str],
) -> tuple[datetime, MemoryItem, str] | None:
    """The latest later sentence on `subject` that says something changed, with its memory and
    time: the same subject's (two content words or a name of a sentence `said`) before one
    sharing only a question word (and not already shown)."""
    changes: list[tuple[bool, datetime, MemoryItem, str]] = []
    early = frozenset().union(*(_asked(s) for s in said))
    for cand, read in later:
        ids = set(cand.message_ids)
        if cand.ts is None or ids & labelled:
            continue
        for sentence, mentioned, asked in read:
            weak = bool(subject & mentioned) and not ids & shown
            # A sentence sharing no stem with those recalled cannot share the subject with one:
            # the regexes of change are read only where one of the two could hold.
            if not (weak or asked & early) or not says_changed(sentence):
                continue
            strong = any(subject_overlap(sentence, s) >= 2 for s in said)
            if strong or weak:
                changes.append((strong, cand.ts, cand, sentence))
                break
    if not changes:
        return None
    _, when, cand, sentence = max(changes, key=lambda c: (c[0], c[1]))
    return when, cand, sentence


def clip_tokens(text: str, tokens: int) -> str:
    """Cut `text` to roughly `tokens` tokens at a word boundary."""
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:  # binary search on the word count that fits
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) + 2 <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " […]"
