"""Automatic recall: `MemoryView` over the index, what the context layers read every turn.

Automatic recall runs before every turn, so it makes no model call: the message (and a
little of the previous reply, for follow-ups like "and what about her sister?") is decomposed
into a few sub-queries and its names, and searched as `memory search` searches
(`index.search_plan`: the questions about a named person, the second hop through the names
the best hits mention, facet coverage, each line once), with one vector pass for the message
itself; time words ("yesterday", "after my trip") add the plan's time-bounded window as a
preference, as in `memory search` (a second BM25 and vector pass on those turns only: without
it, automatic recall on the planted set's temporal questions fell from 1.00 to 0.50). The
results are kept only above a relevance floor — they share a content word with the message,
were found through a name, or are close to it by vector (`VECTOR_FLOOR`: "what colour did we
choose for the baby's room?" reaches "we picked terracotta for the nursery walls") — so "make
me a sandwich" brings back nothing about sandwiches it never heard of; they are ranked with
explicit facts first among near-equals, fitted to the message (`excerpt.fit`: a window cut
to the lines that bear on it, a long message excerpted, each message shown once in the turn)
and cut to a token budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime

import anyio

from daemon.memory.api import LiveHistory, MemoryItem
from daemon.memory.asked import without_asked
from daemon.memory.corrections import Corrections
from daemon.memory.index import MemoryIndex
from daemon.memory.last_word import LastWord, last_person_word
from daemon.memory.links import distinct_passages, who_first
from daemon.memory.lookups import Lookup, lexical_lookups
from daemon.memory.months import focus_month, months_in_place
from daemon.memory.newest import clip_tokens, named_later, said_later, standouts, stems
from daemon.memory.query import QueryPlan, asked_stems, decompose
from daemon.memory.related import RelatedWords, asks_something
from daemon.memory.since_changed import label_changed
from daemon.memory.text import content_words
from daemon.memory.uses import stale_weight
from daemon.settings import MemorySettings
from daemon.tokens import count_tokens

_EXPLICIT_BOOST = 1.15  # "explicit first among equals": a nudge, not an override of relevance
_PREVIOUS_REPLY_TERMS = 6
_ITEM_TOKEN_CAP = 400  # one long chunk must not take the whole recall layer
_AUTO_RECALL_QUERIES = 3
_AUTO_RECALL_ENTITIES = 4
# Cosine similarity at which a memory the vectors found is relevant though it shares no word
# with the message, per embedder (its `relevance_floor` attribute wins). For MiniLM a
# paraphrase ("baby's room" / "nursery walls") sits near 0.5, an unrelated everyday line
# ("make me a sandwich" / "I bought a new bread maker") at 0.4 and below.
VECTOR_FLOOR = {"all-MiniLM-L6-v2": 0.45}
_NEWEST_SECONDS = 2.0  # the later-word lookups of one turn, at most
_RECALL_KINDS = ("fact", "profile", "summary", "chunk", "month")
# The memories the words standing in for a question's find (`_standing_in`), at most, and
# each word's at most; a word's second hit ranks a little lower than its first.
_STANDING_IN_HITS = 4
_STANDING_IN_PER_WORD = 2
_STANDING_IN_NEXT = 0.9
_STANDING_IN_SHOWN = 2
_VOCABULARY_SECONDS = 1.5
_TURN_ROWS = 200  # new memories whose words a turn takes in at most


@dataclass(frozen=True)
class _Found:
    """A turn's candidates: what the search found, with what stands out by vector (and its
    cosine) and what only the words standing in for the message's found (and their word's
    cosine); `own`: the ids found by the message's own words and vectors."""

    items: list[MemoryItem]
    leads: dict[str, float]
    stood: dict[str, float]
    own: frozenset[str]


class IndexMemoryView:
    """The read side of memory for the context assembler, implemented over `MemoryIndex`."""

    def __init__(self, index: MemoryIndex, settings: MemorySettings) -> None:
        self.index = index
        self.settings = settings
        self.related: RelatedWords = index.related
        # The vocabulary's catch-up on new memories, bounded per turn in the daemon (an old
        # home's first build is spread over turns); None: whole (`reverie context`).
        self.vocabulary_seconds: float | None = _VOCABULARY_SECONDS
        # The layers read concurrently at a turn's start share one read of the corrections.
        self._reading: anyio.Event | None = None
        self._read: Corrections | None = None

    async def _corrections(self) -> Corrections:
        """The corrections as of the index's generation now (one read for concurrent asks)."""
        if self._reading is not None:
            await self._reading.wait()
            if self._read is not None:
                return self._read
        self._reading, self._read = anyio.Event(), None
        try:
            self._read = await Corrections.load(self.index.db)
            return self._read
        finally:
            self._reading.set()
            self._reading = None

    async def profile_facts(self, limit: int) -> list[MemoryItem]:
        """Active profile facts (target=profile), newest first."""
        return await self.index.recent(["profile"], limit) if limit > 0 else []

    async def recent_entries(self, limit: int) -> list[MemoryItem]:
        """The last memory entries of any kind except chunks (recent themes), newest first;
        a summary's line stating a value since corrected is marked with the correction."""
        if limit <= 0:
            return []
        found = await self.index.recent(["fact", "profile", "summary"], limit)
        return (await self._corrections()).items(found)

    async def recent_summaries(self, limit: int) -> list[MemoryItem]:
        """The last session summaries, newest first (folded days shown as their month), each
        line stating a value since corrected marked with the correction."""
        shown = await months_in_place(self.index, await self.index.recent(["summary"], limit))
        return (await self._corrections()).items(shown) if shown else shown

    async def recent_facts(self, limit: int) -> list[MemoryItem]:
        """The last explicit facts (target=memory), newest first."""
        return await self.index.recent(["fact"], limit) if limit > 0 else []

    async def last_person_word(
        self, now: datetime, *, answering: str | None = None
    ) -> LastWord | None:
        """The person's newest message before the one being answered (`last_word`)."""
        return await last_person_word(self.index.db, now, answering=answering)

    async def mark_corrected(self, texts: list[str]) -> list[str]:
        """Each text with a note after each line stating a value since corrected."""
        if not any(texts):
            return texts
        marks = await self._corrections()
        return [marks.mark(text) for text in texts]

    async def auto_recall(
        self,
        prompt: str,
        *,
        previous_reply: str = "",
        exclude_ids: frozenset[str] = frozenset(),
        limit: int = 6,
        live: LiveHistory | None = None,
    ) -> list[MemoryItem]:
        """Memories relevant to `prompt`, best first, deduplicated, none from `exclude_ids`.

        Chunks of the live conversation that `live` says the model is replaying are left
        out: recall brings what the model cannot already see.

        At most `min(limit, auto_recall_max)` items within `auto_recall_tokens`; fewer (or none)
        when little is relevant; long items are clipped so that `auto_recall_min` fit. No
        model call; cancellation propagates. The index is refreshed once, by the search; what
        follows it (the labels of changes, the later-word lookups) reads the generation that
        refresh read.
        """
        if not self.settings.auto_recall or limit <= 0:
            return []
        limit = min(limit, self.settings.auto_recall_max)
        prompt = " ".join(prompt.split())
        if not prompt:
            return []
        plan, wanted = _asked(prompt, previous_reply)
        found = await self._candidates(plan, prompt, limit, wanted)
        out = await self._relevant(found, prompt, wanted, exclude_ids, live)
        out = await self._shaped(out, prompt)
        chosen = await self._newest(self._within_budget(out, limit, found), wanted)
        self.index.uses.note(chosen)  # counted in memory; written after the turn
        return chosen

    async def _candidates(
        self, plan: QueryPlan, prompt: str, limit: int, wanted: frozenset[str]
    ) -> _Found:
        """What the search finds for the message, with the vectors' standouts and what the
        words standing in for the message's find added."""
        found = await self.index.search_plan(
            plan,
            k=max(12, limit * 3),
            kinds=_RECALL_KINDS,
            vector_queries=1,
            fit=False,
            feedback=False,
        )
        found = [focus_month(item, wanted) for item in found]  # a month: the lines asked about
        # What the vectors rank first over the whole store and stands clear of the rest is a
        # candidate and relevant though its cosine is under the floor (`newest.standouts`).
        stand, leads = await standouts(self.index, prompt, _RECALL_KINDS)
        have = {i.id for i in found}
        found += [i for i in stand if i.id not in have]
        # A question about the person's life in other words than they told it ("what are we
        # driving these days?" for "the new family car"): the store's words near its words.
        own = frozenset(i.id for i in found)
        standing_in = await self._standing_in(prompt)
        found += [i for i, _ in standing_in if i.id not in own]
        stood = {i.id: near for i, near in standing_in}
        return _Found(items=found, leads=leads, stood=stood, own=own)

    async def _standing_in(self, prompt: str) -> list[tuple[MemoryItem, float]]:
        """The memories the store's words nearest a question's words find by BM25
        (`daemon.memory.related`), best first, each with the cosine of the word that found it
        (less for a word's second hit); none for a message that asks nothing.

        In the daemon the whole step is bounded (`vocabulary_seconds`): the vocabulary takes
        in the words of a few new memories first unless its build is running (the index's
        start), and what is not done in time is left out of this turn, never waited for. The
        words' lookups go to the database together, against the index the search refreshed.
        """
        if not asks_something(prompt) or not self.related.usable:
            return []
        out: dict[str, tuple[MemoryItem, float]] = {}
        bounded = self.vocabulary_seconds is not None
        with anyio.move_on_after(self.vocabulary_seconds if bounded else math.inf):
            if not (bounded and self.related.busy):
                await self.related.refresh(rows=_TURN_ROWS if bounded else None)
            words = await self.related.near(prompt)  # the closest first
            lookups = [
                Lookup(query=w.word, k=_STANDING_IN_PER_WORD, kinds=_RECALL_KINDS) for w in words
            ]
            for word, hits in zip(
                words, await lexical_lookups(self.index.searcher, lookups), strict=True
            ):
                for n, item in enumerate(hits):
                    out.setdefault(item.id, (item, word.weight * _STANDING_IN_NEXT**n))
        return list(out.values())[:_STANDING_IN_HITS]

    async def _relevant(
        self,
        found: _Found,
        prompt: str,
        wanted: frozenset[str],
        exclude_ids: frozenset[str],
        live: LiveHistory | None,
    ) -> list[MemoryItem]:
        """The candidates above the relevance floor, each line once, weighted (explicit facts
        first among near-equals, stale facts less), best first."""
        leads, stood = found.leads, found.stood
        embedder = self.index.embedder
        floor = getattr(embedder, "relevance_floor", VECTOR_FLOOR.get(embedder.name))
        near = (
            await self.index.searcher.similarities(prompt, found.items) if floor is not None else {}
        )

        def relevant(item: MemoryItem) -> bool:
            text = " ".join((item.title, item.text, " ".join(item.tags)))
            if wanted and wanted & stems(text):
                return True
            # What the vectors found counts though no word is shared (a paraphrase).
            return (
                item.id in leads
                or item.id in stood
                or (floor is not None and near.get(item.id, -1.0) >= floor)
            )

        # The relevance floor: a memory shares a word with what was asked, or was found through
        # a name that a memory sharing one mentions (the second hop's chain: "my brother" →
        # "Tomas got into medical school" → "Tomas complains about the exams"). A name from a
        # hit that shares nothing leads nowhere: "make me a sandwich" brings back nothing.
        chained = " ".join(i.text for i in found.items if relevant(i)).lower()
        now = self.index.clock.now()
        top = max(
            (i.score for i in found.items if i.id not in leads and i.id not in stood), default=0.0
        )
        out: list[MemoryItem] = []
        seen_text: set[str] = set()
        for item in found.items:
            if (
                item.id in exclude_ids
                or item.meta.get("retired_at")
                or (live is not None and live.shows(item))
            ):
                continue
            via = str(item.meta.get("via") or "").lower()
            if not (relevant(item) or (via and via in chained)):
                continue
            key = " ".join(item.text.lower().split())[:300]
            if key in seen_text:
                continue
            seen_text.add(key)
            explicit = item.kind in ("fact", "profile")
            # A fact neither used nor said again for long weighs less (`daemon.memory.uses`).
            weight = (_EXPLICIT_BOOST if explicit else 1.0) * stale_weight(item, now, self.settings)
            score = item.score * weight
            if item.id in leads:  # standing out by vector: among the best, not behind them
                score = max(score, top)
            out.append(replace(item, score=score))
        # What only the words standing in found ranks by how near its word is to the
        # message's, weighed by how few memories use it (`RelatedWords.near`): "car" for
        # "driving" (0.72) before what shares only "days" with it, "route" for "trip" (0.54)
        # behind the summer trip itself. Its score in the word's own lookup says how well it
        # matched that word, not the message, and ranks nothing.
        out = [_standing_score(i, top, stood[i.id], found.own) if i.id in stood else i for i in out]
        # A question asking who: the passages naming someone first among near-equals.
        out = who_first(prompt, out)
        out.sort(key=_rank)
        return out

    async def _shaped(self, out: list[MemoryItem], prompt: str) -> list[MemoryItem]:
        """The ranked memories fitted to the message, each passage once, without the message
        itself, each value since changed or corrected labelled."""
        # A message is its own chunk and sits in the windows that overlap it: each is shown
        # once, by the best-ranked memory that holds it, and a window only by the lines that
        # bear on the message.
        out = await self.index.searcher.fit(prompt, out, len(out))
        # The same passage said on several days takes the budget once.
        out = distinct_passages(out, prompt)
        # The message being answered (and the same words said before) is no memory of it.
        out = _unasked(out, prompt)
        # A message or summary that states a value since changed is shown with the change
        # (`daemon.memory.since_changed`), and a corrected value with the date of its
        # correction (`daemon.memory.corrections`); both read once per index generation, the
        # one the search's refresh read.
        generation = self.index.matrix.generation
        out = await label_changed(self.index.db, generation, out)
        return (await Corrections.load(self.index.db, generation)).items(out)

    def _within_budget(self, out: list[MemoryItem], limit: int, found: _Found) -> list[MemoryItem]:
        """The best `limit` memories within `auto_recall_tokens`; long items are clipped so
        that `auto_recall_min` of them fit the budget together: three relevant memories,
        shortened, beat one whole chunk. What only words standing in found takes places of
        its own beside the limit: it never pushes out what the message's own words found."""
        budget = self.settings.auto_recall_tokens
        item_cap = min(_ITEM_TOKEN_CAP, budget // max(1, min(self.settings.auto_recall_min, limit)))
        chosen: list[MemoryItem] = []
        used = extra = 0
        for item in out:
            alone = item.id in found.stood and item.id not in found.own
            if (alone and extra >= _STANDING_IN_SHOWN) or (
                not alone and len(chosen) - extra >= limit
            ):
                continue
            text = item.text
            cost = count_tokens(text)
            if cost > item_cap:
                text = clip_tokens(text, item_cap)
                cost = count_tokens(text)
            if used + cost > budget:
                continue
            chosen.append(item if text == item.text else replace(item, text=text))
            used += cost
            extra += alone
        return chosen

    async def _newest(self, chosen: list[MemoryItem], wanted: frozenset[str]) -> list[MemoryItem]:
        """`chosen`, a message shown with what was said of the same thing later, when that says
        it changed though no fact holds either; the last unlabelled items make room for it.

        Bounded in time: on a loaded machine these lookups must not push the turn's context
        past its hook's deadline; what they did not reach is shown as it was.
        """
        with anyio.move_on_after(_NEWEST_SECONDS):
            chosen = await said_later(self.index, chosen, wanted)
            # And a value any of them names, changed later in a sentence naming it.
            chosen = await named_later(self.index, chosen)
        while sum(count_tokens(i.text) for i in chosen) > self.settings.auto_recall_tokens:
            spare = [k for k, i in enumerate(chosen) if "said_later" not in i.meta]
            if not spare:
                break
            chosen.pop(spare[-1])
        return chosen


def _asked(prompt: str, previous_reply: str) -> tuple[QueryPlan, frozenset[str]]:
    """The search plan for a message and the stems it asks about.

    Every turn pays for this search: the message itself and its two best sub-queries (each
    extra one costs a BM25 pass), one vector pass (the message's). Names, places and
    project-like tokens are looked up on their own, after the cap: they are the surest
    signal in a message and cost one BM25 pass each.
    """
    plan = decompose(prompt)
    queries = list(plan.queries)
    wanted = asked_stems(prompt)
    follow_up = [w for w in content_words(previous_reply) if len(w) > 3][:_PREVIOUS_REPLY_TERMS]
    if follow_up and len(content_words(prompt)) < 6:
        # A short follow-up ("when is it?") leans on what was just said.
        queries.insert(0, prompt + " " + " ".join(follow_up))
        wanted |= asked_stems(" ".join(follow_up))
    names = [e for e in plan.entities if e.lower() != plan.text.lower()][:_AUTO_RECALL_ENTITIES]
    plan = replace(plan, queries=tuple(queries[: _AUTO_RECALL_QUERIES - 1]), entities=tuple(names))
    return plan, wanted


def _unasked(items: list[MemoryItem], prompt: str) -> list[MemoryItem]:
    """`items` without the lines of chunks that say only `prompt`; a chunk saying nothing
    else is left out (`daemon.memory.asked`)."""
    out = []
    for item in items:
        rest = without_asked(item.text, prompt) if item.kind == "chunk" else item.text
        if rest:
            out.append(item if rest == item.text else replace(item, text=rest))
    return out


def _standing_score(item: MemoryItem, top: float, near: float, own: frozenset[str]) -> MemoryItem:
    """A memory a word standing in found, scored by that word's weight (`near`) against the
    best the message's own search found; found by the message itself too, the better of both."""
    boost = _EXPLICIT_BOOST if item.kind in ("fact", "profile") else 1.0
    score = top * near * boost
    return replace(item, score=max(item.score, score) if item.id in own else score)


def _rank(item: MemoryItem) -> tuple[float, bool]:
    """Best score first; explicit facts first among equals."""
    return (-item.score, item.kind not in ("fact", "profile"))
