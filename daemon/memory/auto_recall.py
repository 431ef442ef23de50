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
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import lru_cache

import anyio

from daemon.memory.api import LiveHistory, MemoryItem
from daemon.memory.asked import without_asked
from daemon.memory.corrections import Corrections, holding_now
from daemon.memory.index import MemoryIndex
from daemon.memory.last_word import LastWord, last_person_word
from daemon.memory.links import distinct_passages, who_first
from daemon.memory.months import focus_month, months_in_place
from daemon.memory.newest import (
    bearing,
    named_later,
    says_changed,
    standouts,
    subject_overlap,
)
from daemon.memory.query import asked_stems, decompose, mentioned_stems
from daemon.memory.related import RelatedWords, asks_about_them
from daemon.memory.rows import row_to_item
from daemon.memory.search import undated
from daemon.memory.slots import slot_anchors
from daemon.memory.text import content_words
from daemon.memory.uses import stale_weight
from daemon.resources import forgettable
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


@lru_cache(maxsize=4096)
def _stems(text: str) -> frozenset[str]:
    # Cached: the same memories come back turn after turn, and stemming long chunks adds up.
    return mentioned_stems(text)


forgettable(_stems.cache_clear)


class IndexMemoryView:
    """The read side of memory for the context assembler, implemented over `MemoryIndex`."""

    def __init__(self, index: MemoryIndex, settings: MemorySettings) -> None:
        self.index = index
        self.settings = settings
        self.related: RelatedWords = index.related
        # The vocabulary's catch-up on new memories, bounded per turn in the daemon (an old
        # home's first build is spread over turns); None: whole (`reverie context`).
        self.vocabulary_seconds: float | None = _VOCABULARY_SECONDS

    async def profile_facts(self, limit: int) -> list[MemoryItem]:
        """Active profile facts (target=profile), newest first."""
        return await self.index.recent(["profile"], limit) if limit > 0 else []

    async def recent_entries(self, limit: int) -> list[MemoryItem]:
        """The last memory entries of any kind except chunks (recent themes), newest first;
        a summary's line stating a value since corrected is marked with the correction."""
        if limit <= 0:
            return []
        found = await self.index.recent(["fact", "profile", "summary"], limit)
        return (await Corrections.load(self.index.db)).items(found)

    async def recent_summaries(self, limit: int) -> list[MemoryItem]:
        """The last session summaries, newest first (folded days shown as their month), each
        line stating a value since corrected marked with the correction."""
        shown = await months_in_place(self.index, await self.index.recent(["summary"], limit))
        return (await Corrections.load(self.index.db)).items(shown) if shown else shown

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
        marks = await Corrections.load(self.index.db)
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
        model call; cancellation propagates.
        """
        if not self.settings.auto_recall or limit <= 0:
            return []
        limit = min(limit, self.settings.auto_recall_max)
        prompt = " ".join(prompt.split())
        if not prompt:
            return []
        plan = decompose(prompt)
        queries = list(plan.queries)
        wanted = asked_stems(prompt)
        follow_up = [w for w in content_words(previous_reply) if len(w) > 3][:_PREVIOUS_REPLY_TERMS]
        if follow_up and len(content_words(prompt)) < 6:
            # A short follow-up ("when is it?") leans on what was just said.
            queries.insert(0, prompt + " " + " ".join(follow_up))
            wanted |= asked_stems(" ".join(follow_up))
        # Every turn pays for this search: the message itself and its two best sub-queries
        # (each extra one costs a BM25 pass), one vector pass (the message's). Names, places
        # and project-like tokens are looked up on their own, after the cap: they are the
        # surest signal in a message and cost one BM25 pass each.
        names = [e for e in plan.entities if e.lower() != plan.text.lower()][:_AUTO_RECALL_ENTITIES]
        plan = replace(
            plan, queries=tuple(queries[: _AUTO_RECALL_QUERIES - 1]), entities=tuple(names)
        )
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
        have = {i.id for i in found}
        standing_in = await self._standing_in(prompt)
        found += [i for i, _ in standing_in if i.id not in have]
        stood = {i.id: near for i, near in standing_in}
        embedder = self.index.embedder
        floor = getattr(embedder, "relevance_floor", VECTOR_FLOOR.get(embedder.name))
        near = await self.index.searcher.similarities(prompt, found) if floor is not None else {}

        def relevant(item: MemoryItem) -> bool:
            text = " ".join((item.title, item.text, " ".join(item.tags)))
            if wanted and wanted & _stems(text):
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
        chained = " ".join(i.text for i in found if relevant(i)).lower()
        now = self.index.clock.now()
        top = max((i.score for i in found if i.id not in leads and i.id not in stood), default=0.0)
        out: list[MemoryItem] = []
        seen_text: set[str] = set()
        for item in found:
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
        # message's: "car" for "driving" (0.72) before what shares only "days" with it,
        # "route" for "trip" (0.54) behind the summer trip itself.
        out = [
            replace(i, score=max(i.score, top * stood[i.id])) if i.id in stood else i for i in out
        ]
        # A question asking who: the passages naming someone first among near-equals.
        out = who_first(prompt, out)
        out.sort(key=_rank)
        # A message is its own chunk and sits in the windows that overlap it: each is shown
        # once, by the best-ranked memory that holds it, and a window only by the lines that
        # bear on the message.
        out = await self.index.searcher.fit(prompt, out, len(out))
        # The same passage said on several days takes the budget once.
        out = distinct_passages(out, prompt)
        # The message being answered (and the same words said before) is no memory of it.
        out = _unasked(out, prompt)

        # A message or summary that states a value since changed is shown with the change,
        # and a corrected value with the date of its correction (`daemon.memory.corrections`).
        out = await self._changed_since(out)
        out = (await Corrections.load(self.index.db)).items(out)

        budget = self.settings.auto_recall_tokens
        # Long items are clipped so that `auto_recall_min` of them fit the budget together:
        # three relevant memories, shortened, beat one whole chunk.
        item_cap = min(_ITEM_TOKEN_CAP, budget // max(1, min(self.settings.auto_recall_min, limit)))
        chosen: list[MemoryItem] = []
        used = extra = 0
        for item in out:
            # What only words standing in found takes places of its own beside the limit:
            # it never pushes out what the message's own words found.
            alone = item.id in stood and item.id not in have
            if (alone and extra >= _STANDING_IN_SHOWN) or (
                not alone and len(chosen) - extra >= limit
            ):
                continue
            text = item.text
            cost = count_tokens(text)
            if cost > item_cap:
                text = _clip_tokens(text, item_cap)
                cost = count_tokens(text)
            if used + cost > budget:
                continue
            chosen.append(item if text == item.text else replace(item, text=text))
            used += cost
            extra += alone
        # A message shown with what was said of the same thing later, when that says it
        # changed though no fact holds either; the last unlabelled items make room for it.
        # Bounded in time: on a loaded machine these lookups must not push the turn's context
        # past its hook's deadline; what they did not reach is shown as it was.
        with anyio.move_on_after(_NEWEST_SECONDS):
            chosen = await self._said_later(chosen, wanted)
            # And a value any of them names, changed later in a sentence naming it.
            chosen = await named_later(self.index, chosen)
        while sum(count_tokens(i.text) for i in chosen) > budget:
            spare = [k for k, i in enumerate(chosen) if "said_later" not in i.meta]
            if not spare:
                break
            chosen.pop(spare[-1])
        self.index.uses.note(chosen)  # counted in memory; written after the turn
        return chosen

    async def _standing_in(self, prompt: str) -> list[tuple[MemoryItem, float]]:
        """The memories the store's words nearest a question's words find by BM25
        (`daemon.memory.related`), best first, each with the cosine of the word that found it
        (less for a word's second hit); none for a message that asks nothing.

        In the daemon the whole step is bounded (`vocabulary_seconds`): the vocabulary takes
        in the words of a few new memories first unless its build is running (the index's
        start), and what is not done in time is left out of this turn, never waited for.
        """
        if not asks_about_them(prompt) or not self.related.usable:
            return []
        out: dict[str, tuple[MemoryItem, float]] = {}
        bounded = self.vocabulary_seconds is not None
        with anyio.move_on_after(self.vocabulary_seconds if bounded else math.inf):
            if not (bounded and self.related.busy):
                await self.related.refresh(rows=_TURN_ROWS if bounded else None)
            for word in await self.related.near(prompt):  # the closest first
                hits = await self.index.search(
                    word.word, k=_STANDING_IN_PER_WORD, kinds=_RECALL_KINDS, mode="lexical"
                )
                for n, item in enumerate(hits):
                    out.setdefault(item.id, (item, word.similarity * _STANDING_IN_NEXT**n))
        return list(out.values())[:_STANDING_IN_HITS]

    async def _changed_since(self, items: list[MemoryItem]) -> list[MemoryItem]:
        """`items`, each sentence that states a value since superseded labelled with it.

        The fact store knows which values changed (`superseded_by`); the messages and
        summaries that said the old value do not, and recall finds them by the same words as
        the question ("They told us the offsite will be in Bergen" for "where is the
        offsite?"). Such a sentence — in the message a superseded fact was mined from, or
        naming the old value beside the fact's subject — is labelled in place with the current
        value ("… in Bergen [since changed: now Trieste]."), so the old value is never shown
        as if it held.
        """
        said = [i for i in items if i.kind not in ("fact", "profile")]
        if not said:
            return items
        rows = await self.index.db.fetchall(_CHANGED_FACTS)
        if not rows:
            return items
        facts = {r["uid"]: row_to_item(r) for r in rows}
        changes: list[_Change] = []
        for old in facts.values():
            cur = holding_now(old, facts)
            if cur is not None:
                changes.append(_Change.of(old, cur))
        for fact in facts.values():
            # A current value whose statement named the one it replaced, though no fact held
            # that one ("scratch Bergen, the offsite is going to Kotor").
            replaced, value = (
                str(fact.meta.get("replaced") or ""),
                str(fact.meta.get("value") or ""),
            )
            if replaced and value and not fact.meta.get("retired_at") and fact.meta.get("subject"):
                changes.append(_Change(old=replaced, now=f"now {value}", message_ids=frozenset(),
                    anchors=slot_anchors(str(fact.meta["subject"]), str(fact.meta.get("attribute") or ""))))  # fmt: skip
        if not changes:
            return items
        labelled = {i.id: _label_changes(i, changes) for i in said}
        return [replace(i, text=labelled[i.id]) if i.id in labelled else i for i in items]

    async def _said_later(
        self, items: list[MemoryItem], wanted: frozenset[str]
    ) -> list[MemoryItem]:
        """`items`, a message among them followed by the latest later sentence that says the
        thing it speaks of changed ("internally the project is called Marigold" … [said later,
        12 March: the project's been renamed, it's Heron now]).

        `_changed_since` labels a value the fact store saw replaced; a value no rule read (said
        in words the extractive rules were not shaped on) has no fact to be superseded, and
        recall finds its first statement by the question's words, not the sentence of the
        change, which may share only the subject ("project") with it. So the subject of each
        message — the question's words it uses — is looked up among later messages, by words
        alone (one BM25 pass per subject, `_LATER_LOOKUPS` at most), and the latest later
        sentence naming the subject with a word of change is shown beside the best-ranked
        message before it, so the old value is never shown alone as if it held.
        """
        shown = {m for i in items for m in i.message_ids}
        # A change already among the items is still put first beside what it changed (once).
        labelled: set[str] = set()
        out = list(items)
        # Messages that speak of the same thing share one lookup, from the earliest of them.
        subjects: dict[frozenset[str], list[tuple[int, datetime]]] = {}
        bears: dict[frozenset[str], list[str]] = {}
        for pos, item in enumerate(items):
            if item.kind not in _LATER_KINDS or item.ts is None:
                continue
            subject = wanted & _stems(item.text)
            said = bearing(undated(item.text), wanted) if subject else []
            key = subject
            if key:
                subjects.setdefault(key, []).append((pos, item.ts))
                bears.setdefault(key, []).extend(said)
        for subject, dated in list(subjects.items())[:_LATER_LOOKUPS]:
            # The question's words it uses, and the words of its sentences that bear on the
            # question: the later sentence of a change may share only the latter ("Leith").
            said = bears.get(subject, [])
            words = [
                w for p, _ in dated for w in content_words(items[p].text) if _stems(w) & subject
            ] + [w for s in said for w in content_words(s)]
            since = min(ts for _, ts in dated)
            later = await self.index.search(
                " ".join(dict.fromkeys(words)),
                k=_LATER_CANDIDATES,
                kinds=["chunk"],
                mode="lexical",
                after=since + timedelta(seconds=1),
            )
            changes: list[tuple[bool, datetime, MemoryItem, str]] = []
            for cand in later:
                if cand.ts is None or set(cand.message_ids) & labelled:
                    continue
                for m in _SENTENCE_END.finditer(undated(cand.text)):
                    sentence = m.group(0).strip()
                    if not says_changed(sentence):
                        continue
                    # The same subject: two content words or a name of a sentence recalled.
                    strong = any(subject_overlap(sentence, s) >= 2 for s in said)
                    if strong or (subject & _stems(sentence) and not set(cand.message_ids) & shown):
                        changes.append((strong, cand.ts, cand, sentence))
                        break
            if not changes:
                continue
            # The latest word of it, the same subject's before a shared question word's.
            _, when, cand, sentence = max(changes, key=lambda c: (c[0], c[1]))
            if count_tokens(sentence) > _LATER_TOKENS:
                sentence = _clip_tokens(sentence, _LATER_TOKENS)
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


def _unasked(items: list[MemoryItem], prompt: str) -> list[MemoryItem]:
    """`items` without the lines of chunks that say only `prompt`; a chunk saying nothing
    else is left out (`daemon.memory.asked`)."""
    out = []
    for item in items:
        rest = without_asked(item.text, prompt) if item.kind == "chunk" else item.text
        if rest:
            out.append(item if rest == item.text else replace(item, text=rest))
    return out


_NEWEST_SECONDS = 2.0  # the later-word lookups of one turn, at most
# The memories the words standing in for a question's find (`_standing_in`), at most, and
# each word's at most; a word's second hit ranks a little lower than its first.
_STANDING_IN_HITS = 4
_STANDING_IN_PER_WORD = 2
_STANDING_IN_NEXT = 0.9
_STANDING_IN_SHOWN = 2
_VOCABULARY_SECONDS = 1.5
_TURN_ROWS = 200  # new memories whose words a turn takes in at most
_RECALL_KINDS = ("fact", "profile", "summary", "chunk", "month")
_LATER_LOOKUPS = 4  # subjects a turn looks for later words about (one BM25 pass each)
_LATER_KINDS = ("chunk", "fact", "summary", "month")
_LATER_CANDIDATES = 20
_LATER_TOKENS = 40


_CHANGED_FACTS = (
    "SELECT * FROM memories WHERE kind IN ('fact', 'profile') "
    "AND (superseded_by IS NOT NULL OR supersedes IS NOT NULL OR meta LIKE '%\"replaced\"%')"
)


@dataclass(frozen=True)
class _Change:
    """A superseded value: what stated it, how to find it, and what holds now."""

    old: str  # the old value ("Bergen"); "" when the fact had none
    anchors: frozenset[str]  # the subject's words
    message_ids: frozenset[str]  # the messages it was mined from
    now: str  # the label: the current value, or the current fact's text

    @staticmethod
    def of(old: MemoryItem, cur: MemoryItem) -> _Change:
        value = str(old.meta.get("value") or "") or str(cur.meta.get("changed_from") or "")
        subject, attribute = (
            str(old.meta.get("subject") or ""),
            str(old.meta.get("attribute") or ""),
        )
        provenance = old.meta.get("provenance")
        ids = provenance.get("message_ids", []) if isinstance(provenance, dict) else []
        current = str(cur.meta.get("value") or "")
        return _Change(
            old=value,
            anchors=slot_anchors(subject, attribute) if subject else frozenset(),
            message_ids=frozenset(str(i) for i in ids),
            now=f"now {current}" if current else cur.text.strip().rstrip(".!"),
        )


_SENTENCE_END = re.compile(r"[^.!?\n]+(?:[.!?]+|(?=\n)|$)")


def _label_changes(item: MemoryItem, changes: list[_Change]) -> str:
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


def _rank(item: MemoryItem) -> tuple[float, bool]:
    """Best score first; explicit facts first among equals."""
    return (-item.score, item.kind not in ("fact", "profile"))


def _clip_tokens(text: str, tokens: int) -> str:
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
