"""Mention links: who "my brother-in-law" is, so a question by relation finds the name's news.

A person names someone once with a relation or a description and speaks of them later by
name alone: "had coffee with Jarek, my brother-in-law" one day, "Jarek took up orienteering
and competes now" months later. Asked "what sport does my brother-in-law do?", a search finds
the first sentence (it shares "brother-in-law") but not the second (it shares nothing).

**At write time** (`extract`, called when a session's messages are chunked) each message of
the person's (or an imported conversation's speaker) is read for a name tied to a phrase:

- a relation: "NAME, my RELATION", "my RELATION NAME", "my RELATION, NAME,", "NAME (my …)",
  "NAME is my RELATION", and an apposition with an article ("Fergus, a friend from the
  running club, …");
- a deed: what the named one did, after "who"/"that" or after such an apposition ("Fergus,
  a friend from the running club, helped us carry the piano up three floors").

A name is a capitalised word (or two) that is not a common word opening a sentence, a month
or a weekday; a relation is at most five words ending the clause. Each link is stored with its
message (`daemon.store.links`).

**At read time** (`LinkHop.hop`, called by the plan search that `memory search`, `recall` and
automatic recall share) a question that names a stored relation (all its content words) or
describes a stored deed (two of its content words, or one when the question asks who and the
word is half of what it asks) resolves to the name; the message that tied them is added, and
for a relation the best passages naming the name (by the question's meaning among the name's
memories), so one context holds both. A question naming a person whose relation is stored
gets the message that tied them. `distinct_passages` drops near-identical passages and
`who_first` prefers passages naming someone when the question asks who.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import numpy as np

from daemon.log import get_logger
from daemon.memory.api import MemoryItem
from daemon.memory.embedders import Embedder
from daemon.memory.lexical import LexicalSearcher
from daemon.memory.lookups import Lookup, lexical_lookups
from daemon.memory.query import MONTHS, STOP_WORDS, asked_stems, bridge_entities, entities
from daemon.memory.ranking import Ranker
from daemon.resources import forgettable
from daemon.store.db import Database
from daemon.store.errors import is_database_error, store_server_away
from daemon.store.links import (
    LINKS_VERSION,
    LinkRow,
    add_links,
    links_count,
    links_version,
    live_links,
    mark_links_version,
    memory_rows,
    person_messages,
)
from daemon.text import STOP_WORDS as EVERYDAY_STOP_WORDS
from daemon.text import stem

log = get_logger("memory.links")

# Names resolved per question, and passages about each name added by the hop.
HOP_NAMES = 2
HOP_PASSAGES = 2
# A word more deeds than this use is too common to name one by itself ("who helped …").
COMMON_DEED_WORD = 3
# Cosine (MiniLM) at which a deed means what a who-question asks though no word is shared
# ("the person who repaired my bicycle" / "fixed my bike when the gears jammed").
DEED_NEAR = {"all-MiniLM-L6-v2": 0.5}
# Memories naming the name that the hop ranks by the question's meaning.
HOP_POOL = 30
# Two passages whose content words overlap this much say the same thing (Jaccard).
SAME_PASSAGE = 0.8

_UP = "A-ZÀ-ÖØ-ÞĀ-Ž"
_LOW = "a-zß-öø-ÿā-ž"
_NAME_WORD = rf"[{_UP}][{_LOW}'’\-]+"
_NAME = rf"(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD})?)"
_REL_WORD = rf"[{_LOW}][{_LOW}'’\-]*"
# A relation: one to five lowercase words.
_REL = rf"(?P<rel>{_REL_WORD}(?:\s+{_REL_WORD}){{0,4}})"
# Where a relation must end: punctuation, the end, or a clause going on.
_REL_END = r"(?=\s*(?:[,.;:!?)]|$|\s(?:who|that|and|came|called|is|was|has|had|just|said)\b))"
_DET = r"(?:my|our|a|an|the)"
_DEED = r"(?P<deed>[a-z][^.;!?\n]{4,140})"

_PATTERNS = [
    # "Jarek, my brother-in-law" / "Fergus, a friend from the running club, helped us …"
    re.compile(
        rf"\b{_NAME},\s+(?P<det>[Mm]y|[Oo]ur)\s+{_REL}{_REL_END}(?:,\s+(?:who\s+)?{_DEED})?"
    ),
    # With an article only as an apposition between commas ("Caroline, the photo is great"
    # is no apposition): "Fergus, a friend from the running club, helped us …"
    re.compile(rf"\b{_NAME},\s+(?P<det>a|an|the)\s+{_REL},\s+(?:who\s+)?{_DEED}"),
    # "Fergus (a friend from the running club) who fixed …"
    re.compile(rf"\b{_NAME}\s+\((?P<det>{_DET})\s+{_REL}\)(?:,?\s+(?:who|that)\s+{_DEED})?"),
    # "my sister Ada", "my best friend from school Jarek"
    re.compile(rf"\b(?P<det>[Mm]y|[Oo]ur)\s+{_REL}\s+{_NAME}\b"),
    # "my sister, Ada, moved …": between commas only — at a sentence's end the name is most
    # often the one spoken to ("I've had tough times with my business, Jon.")
    re.compile(rf"\b(?P<det>[Mm]y|[Oo]ur)\s+{_REL},\s+{_NAME}(?=\s*[,;)])"),
    # "Ada is my sister"
    re.compile(rf"\b{_NAME}\s+(?:is|was)\s+(?P<det>my|our)\s+{_REL}{_REL_END}"),
    # "it was Fergus who fixed my bike" / "Fergus, who lent me the tent" ("Caroline, that
    # sounds great" is no deed: "that" after a comma is a word of its own)
    re.compile(rf"\b{_NAME}(?:,\s+who|\s+(?:who|that))\s+{_DEED}"),
]
# Patterns whose name may open a sentence ("Jarek, my brother-in-law, called"): an apposition
# says it is someone. In the others a capitalised first word is most often just a first word
# ("Dance is my passion", "Finding that balance is key").
_OPENING_OK = frozenset({0, 1, 2})
# Inside "my RELATION NAME" a relation has no article or place word ("my hand at the local
# Street Fighter" is no relation); "my best friend from school Jarek" is.
_NOT_IN_BARE = frozenset("a an the at in on to for with by into about".split())
# Capitalised words that open a sentence without being anyone's name.
_OPENERS = frozenset(
    """honestly anyway well yes yeah no oh okay ok thanks thank sorry also so today yesterday
    tomorrow tonight morning evening afternoon night hi hey hello quick back again last next
    finally apparently turns luckily sadly still maybe perhaps besides meanwhile guess funny
    great good nice remember note please big small new old our my your his her their its
    christmas easter wow cool love awesome amazing omg aww haha yay congrats congratulations
    sure totally absolutely exactly right true""".split()
)
# A relation says who someone is, not what something does: no verb of being or seeming.
_NOT_RELATION = frozenset(
    """is are was were be been being looks look sounds sound seems seem has have had makes
    make made means mean gets got goes went keeps keep feels felt helps helped will would can
    could should might must shall""".split()
)
_WEEKDAYS = frozenset(
    """monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs
    fri sat sun""".split()
)
# A relation may not end on a word that leaves it unfinished ("my trip to Paris").
_DANGLING = frozenset(STOP_WORDS | {"called", "named", "with", "from", "to", "for", "at", "in"})
_LABEL = re.compile(r"^[^\n:()]{1,60}?(?:\s*\([^)\n]{1,40}\))?:\s+")
_WHEN = re.compile(r"\b(?:when|how long ago|what (?:day|date|time|year|month))\b", re.IGNORECASE)
_WHO = re.compile(r"\b(?:who|whom|whose|name)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Mention:
    name: str
    phrase: str
    kind: str  # relation | deed


def _a_name(name: str, text: str, start: int, opening_ok: bool) -> bool:
    low = name.lower()
    first = low.split()[0]
    if low in STOP_WORDS or low in EVERYDAY_STOP_WORDS or first in MONTHS or first in _WEEKDAYS:
        return False
    if low == "i" or first in _OPENERS:
        return False
    before = text[:start].rstrip()
    if before and before[-1] not in '.!?…"“(:\n':
        return True
    # A sentence's first word is capitalised whatever it is: "Honestly, my …", "Finding that
    # balance is key" name no one.
    return opening_ok and not (first in STOP_WORDS or first.endswith(("ly", "ing")))


def _clean_deed(deed: str) -> str:
    deed = re.split(r"\s+(?:but|although|though|so that|because)\s+", deed)[0]
    return " ".join(deed.split()[:16]).rstrip(" ,")


def extract(text: str) -> list[Mention]:
    """The names `text` ties to a relation or a deed, each once, in order."""
    out: dict[tuple[str, str], Mention] = {}
    for n, pattern in enumerate(_PATTERNS):
        for m in pattern.finditer(text):
            name = m.group("name").removesuffix("'s").removesuffix("’s")
            if not _a_name(name, text, m.start("name"), n in _OPENING_OK):
                continue
            groups = m.groupdict()
            rel = groups.get("rel")
            if rel:
                rel = " ".join(rel.split())
                said = set(rel.split())
                if (
                    rel.split()[-1] in _DANGLING
                    or _NOT_RELATION & said
                    or (n == 3 and _NOT_IN_BARE & said)
                    or not asked_stems(rel)
                ):
                    rel = None
                elif groups.get("det") in ("a", "an", "the"):
                    rel = f"{groups['det']} {rel}"
            if rel:
                out.setdefault((name, rel), Mention(name, rel, "relation"))
            deed = groups.get("deed")
            if deed:
                deed = _clean_deed(deed)
                if len(asked_stems(deed)) >= 2:
                    out.setdefault((name, deed), Mention(name, deed, "deed"))
    return list(out.values())


async def record(
    db: Database,
    rows: Sequence[tuple[str, str, str, str, str, str]],
) -> int:
    """Store the links of `rows` (memory uid, session id, message id, created_at, speaker,
    content); return how many links were found."""
    links = [
        LinkRow(uid, m.name, m.phrase, m.kind, speaker, session, msg_id, created)
        for uid, session, msg_id, created, speaker, content in rows
        for m in extract(content)
    ]
    if links:
        await add_links(db, links)
    return len(links)


async def backfill(db: Database, at: str) -> int | None:
    """Read every person's message of a home whose links are older than the rules (once, kv
    mark); return the links found, or None when the home was already up to date."""
    if db.readonly or await links_version(db) >= LINKS_VERSION:
        return None
    found = await record(db, await person_messages(db))
    await mark_links_version(db, at)
    return found


@dataclass(frozen=True)
class Resolved:
    link: LinkRow
    score: float


@functools.lru_cache(maxsize=8192)
def _stems(text: str) -> frozenset[str]:
    # Cached: every search reads every link's phrase, the same ones turn after turn.
    return asked_stems(text)


forgettable(_stems.cache_clear)


def _shared(phrase: frozenset[str], asked: frozenset[str]) -> frozenset[str]:
    """The phrase's stems the question has, a stem of four letters or more matching one it
    begins ("roof" / "roofer")."""
    return frozenset(
        p
        for p in phrase
        if p in asked
        or (
            len(p) >= 4 and any(len(a) >= 4 and (a.startswith(p) or p.startswith(a)) for a in asked)
        )
    )


def resolve(question: str, links: Sequence[LinkRow]) -> list[Resolved]:
    """The links `question` asks through, best first, at most `HOP_NAMES` names.

    A relation when the question has every content word of it; a deed when it shares two of
    them, or one when the question asks who — a word at most `COMMON_DEED_WORD` deeds use."""
    asked = _stems(question)
    if not asked:
        return []
    who = bool(_WHO.search(question))
    named = {e.lower() for e in entities(question)}
    uses: dict[str, int] = {}
    for link in links:
        if link.kind == "deed":
            for w in _stems(link.phrase):
                uses[w] = uses.get(w, 0) + 1
    best: dict[str, Resolved] = {}
    for link in links:
        phrase = _stems(link.phrase)
        if not phrase or link.name.lower() in named:
            continue
        shared = _shared(phrase, asked)
        if link.kind == "relation":
            # Every content word of the relation: "my brother-in-law", not "my brother".
            if shared != phrase:
                continue
            score = 1.0 + len(phrase)
        else:
            rare = {w for w in shared if uses.get(w, 0) <= COMMON_DEED_WORD}
            if not (len(shared) >= 2 or (who and rare)):
                continue
            score = len(shared) / len(asked) + len(shared)
        have = best.get(link.name)
        if have is None or (score, link.created_at) > (have.score, have.link.created_at):
            best[link.name] = Resolved(link, score)
    # The most specific link first; among equals the newest.
    ranked = sorted(best.values(), key=lambda r: (r.score, r.link.created_at), reverse=True)
    return ranked[:HOP_NAMES]


def asks_who(question: str) -> bool:
    return bool(_WHO.search(question))


def named_people(question: str, links: Sequence[LinkRow]) -> list[LinkRow]:
    """The relation links of people the question names (the newest per name)."""
    named = {e.lower() for e in entities(question)}
    out: dict[str, LinkRow] = {}
    for link in links:
        if link.kind == "relation" and link.name.lower() in named:
            out[link.name] = link
    return list(out.values())[:HOP_NAMES]


class LinkHop:
    """The read side: links loaded once per change, resolved per question."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._links: list[LinkRow] = []
        self._count = -1
        self._filled = False
        self._warned = False

    async def links(self, now: str) -> list[LinkRow]:
        """Every live link; none (said once in the log) when the store has no table for them
        yet — a home opened read-only before the daemon migrated it: search goes on without."""
        try:
            if not self._filled:
                await backfill(self.db, now)
                self._filled = True
            count = await links_count(self.db)
            if count != self._count:
                self._links = await live_links(self.db)
                self._count = count
        except Exception as exc:
            if not (is_database_error(exc) or store_server_away(exc)):
                raise
            if not self._warned:
                log.warning("mention links unreadable; searching without them", error=str(exc))
                self._warned = True
            return []
        return self._links

    async def hop(
        self,
        question: str,
        now: str,
        passages: PassageFinder,
        near: Meaning | None = None,
    ) -> list[tuple[str, dict[str, object]]]:
        """(memory uid, meta) to add for `question`, in the order they should be shown.

        `near` (the question's cosine to each of some phrases, or None without vectors) finds
        the deed a who-question means when no word resolves one."""
        if not question.strip():
            return []
        links = await self.links(now)
        if not links:
            return []
        out: dict[str, dict[str, object]] = {}
        resolved = resolve(question, links)
        if near is not None and asks_who(question) and not resolved:
            named = {e.lower() for e in entities(question)}
            deeds = [k for k in links if k.kind == "deed" and k.name.lower() not in named]
            cosines = await near(question, [k.phrase for k in deeds]) if deeds else None
            if cosines:
                best = max(range(len(deeds)), key=lambda i: cosines[i])
                resolved = [Resolved(deeds[best], cosines[best])]
        for found in resolved:
            link = found.link
            out.setdefault(link.memory_uid, {"link": link.phrase, "via": link.name})
            if link.kind != "relation":
                continue  # a deed's own message names who did it: that is the answer
            for uid in await passages(link.name, question, exclude=link.memory_uid):
                out.setdefault(uid, {"link": link.phrase, "via": link.name})
        for link in named_people(question, links):
            out.setdefault(link.memory_uid, {"link": link.phrase, "via": link.name, "named": True})
        return list(out.items())


class Meaning(Protocol):
    """The question's cosine to each phrase, or None when the threshold is unknown or no
    vectors are made; only cosines at the embedder's `DEED_NEAR` or above are kept (others
    are 0.0)."""

    async def __call__(self, question: str, phrases: Sequence[str]) -> list[float] | None: ...


class PassageFinder(Protocol):
    """The best memories naming a name for a question (the search's `_named_passages`)."""

    async def __call__(self, name: str, question: str, *, exclude: str) -> list[str]: ...


def _body(text: str) -> str:
    return _LABEL.sub("", text.strip())


_SENTENCE = re.compile(r"(?<=[.!?…])\s+|\n+")


_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def _every_word(text: str) -> frozenset[str]:
    """Every word's stem, numbers and short words included: "step 3" and "step 5" differ."""
    return frozenset(stem(w) for w in _TOKEN.findall(text.lower()))


def _same(words: frozenset[str], shown: list[frozenset[str]]) -> bool:
    return any(len(words & o) / len(words | o) >= SAME_PASSAGE for o in shown if o)


def distinct_passages(items: Sequence[MemoryItem], question: str = "") -> list[MemoryItem]:
    """`items` without those that only repeat what an item above them shows: the same sentence
    said on three days, each in its own message. An item is dropped when each of its sentences
    that bears on `question` (shares a word it asks; every sentence without a question) has a
    sentence above it whose content words overlap `SAME_PASSAGE` or more."""
    if _WHEN.search(question):
        return list(items)  # asked when: the same words on two days are two answers
    asked = _stems(question) if question else frozenset()
    shown: list[frozenset[str]] = []
    out: list[MemoryItem] = []
    for item in items:
        sentences = [_every_word(x) for x in _SENTENCE.split(_body(item.text))]
        sentences = [w for w in sentences if w]
        bearing = [w for w in sentences if w & asked] if asked else sentences
        if bearing and all(_same(w, shown) for w in bearing):
            continue
        out.append(item)
        shown.extend(sentences)
    return out


def who_first(question: str, items: Sequence[MemoryItem], boost: float = 1.2) -> list[MemoryItem]:
    """For a question asking who (or a name), passages naming someone the question does not
    rank above those naming no one, by `boost` on their scores; other questions unchanged."""
    if not _WHO.search(question):
        return list(items)
    asked = {e.lower() for e in entities(question)}
    out = []
    for item in items:
        names = [n for n in bridge_entities(item.text) if n.lower() not in asked]
        out.append(_boosted(item, boost) if names else item)
    return out


def _boosted(item: MemoryItem, boost: float) -> MemoryItem:
    return replace(item, score=item.score * boost)


class _Searcher(Protocol):
    db: Database
    lexical: LexicalSearcher
    matrix: Any
    ranker: Ranker
    link_hop: LinkHop
    embedder: Embedder
    query_vectors: Callable[[Sequence[str]], Awaitable[np.ndarray | None]]

    async def search(
        self,
        query: str,
        *,
        k: int = 10,
        kinds: Collection[str] | None = None,
        mode: Literal["hybrid", "lexical", "vector"] = "hybrid",
        include_retired: bool = False,
    ) -> list[MemoryItem]: ...

    async def similarities(
        self, question: str, items: Sequence[MemoryItem]
    ) -> dict[str, float]: ...


def _names(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


async def with_links(
    searcher: _Searcher,
    question: str,
    ranked: list[tuple[int, float]],
    *,
    kinds: Collection[str] | None,
    include_retired: bool,
) -> tuple[list[tuple[int, float]], dict[int, dict[str, object]]]:
    """`ranked` (rowid, score) with the link hop's memories for `question` placed first (a
    named person's relation message third), each with its meta ("link", "via")."""

    async def passages(name: str, question: str, *, exclude: str) -> list[str]:
        # A lookup after the plan's search: the index it refreshed is read as it is.
        lookup = Lookup(
            query=name,
            k=HOP_POOL,
            kinds=tuple(kinds) if kinds else (),
            include_retired=include_retired,
        )
        [found] = await lexical_lookups(searcher, [lookup])
        pool = [
            item
            for item in found
            if item.id != exclude and not item.meta.get("window") and _names(item.text, name)
        ]
        near = await searcher.similarities(question, pool)
        order = sorted(range(len(pool)), key=lambda i: (-near.get(pool[i].id, 0.0), i))
        return [pool[i].id for i in order[:HOP_PASSAGES]]

    async def near(question: str, phrases: Sequence[str]) -> list[float] | None:
        floor = DEED_NEAR.get(searcher.embedder.name)
        if floor is None:
            return None
        vectors = await searcher.query_vectors([question, *phrases])
        if vectors is None:
            return None
        cosines = [float(c) for c in vectors[1:] @ vectors[0]]
        return [c if c >= floor else 0.0 for c in cosines] if max(cosines) >= floor else None

    added = await searcher.link_hop.hop(question, datetime.now(UTC).isoformat(), passages, near)
    if not added:
        return ranked, {}
    by_uid = {
        uid: rowid
        for rowid, uid, kind, retired in await memory_rows(searcher.db, [u for u, _ in added])
        if (kinds is None or kind in kinds) and (include_retired or not retired)
    }
    top = ranked[0][1] if ranked else 1.0
    front: list[tuple[int, float]] = []
    lower: list[tuple[int, float]] = []
    meta: dict[int, dict[str, object]] = {}
    for uid, m in added:
        rowid = by_uid.get(uid)
        if rowid is None:
            continue
        meta[rowid] = {k: v for k, v in m.items() if k != "named"}
        (lower if m.get("named") else front).append((rowid, top))
    ahead = {r for r, _ in front}
    rest = [(r, s) for r, s in ranked if r not in ahead]
    # A named person's relation message comes third at the lowest: where the search already
    # ranked it higher, it stays.
    high = {r for r, _ in rest[:2]}
    lower = [(r, s) for r, s in lower if r not in high and r not in ahead]
    moved = {r for r, _ in lower}
    rest = [(r, s) for r, s in rest if r not in moved]
    return [*front, *rest[:2], *lower, *rest[2:]], meta
