"""Words of the store standing in for a question's words (`daemon.memory.related`, issue 34).

A real SQLite home with MiniLM: a fact told among weeks of ordinary talk, asked months later
in words it was never said in ("what are we driving these days?" for "the new family car is
a Volvo V60"). Below the vector floor by cosine and sharing no word, it reaches automatic
recall only through the vocabulary's near words; a message that asks nothing brings nothing.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import anyio
import numpy as np
import pytest

from daemon.memory.embedders import MiniLMEmbedder, minilm_available
from daemon.memory.related import RelatedWords, asks_something, vocabulary_words
from tests.memory_support import add_session, memory_system

pytestmark = pytest.mark.anyio

FILLER = [
    "Work was a blur of meetings today and I got nothing real done.",
    "The printer jammed again, third time this week.",
    "Can you suggest something quick for dinner with leftover rice?",
    "It poured all afternoon, the walk got cut short.",
    "I slept badly and I can feel it.",
    "The kids argued about the remote for an hour.",
    "I cleared my inbox for once, small victories.",
    "The train was late both ways, so I listened to a podcast about bridges.",
    "We spent the evening sorting the garage shelves.",
    "Any ideas for a birthday present under thirty euros?",
    "The heating clicks at night, probably nothing.",
]
TOLD = {
    7: "We traded the old hatchback, the new family car is a Volvo V60.",
    19: "The allergist confirmed I'm allergic to birch pollen.",
}


def test_only_a_message_that_asks_something_looks_for_other_words() -> None:
    assert asks_something("what are we driving these days?")
    assert asks_something("Remind me who lent me the tent")
    assert asks_something("is the boiler still under warranty")
    assert not asks_something("make me a sandwich")
    assert not asks_something("write a haiku about autumn")
    assert vocabulary_words("The new family car is a Volvo V60!") == [
        "new",
        "family",
        "car",
        "volvo",
    ]


async def _home(memory: object) -> None:
    rng = random.Random(3)
    messages: list[tuple[str, str]] = []
    for n in range(40):
        said = TOLD.get(n, "")
        parts = rng.sample(FILLER, 2)
        if said:
            parts.insert(1, said)
        messages += [("user", " ".join(parts)), ("assistant", "Noted.")]
    await add_session(memory.db, "s1", messages)  # type: ignore[attr-defined]
    await memory.index_session("s1")  # type: ignore[attr-defined]
    await memory.index.flush()  # type: ignore[attr-defined]


@pytest.mark.skipif(not minilm_available(), reason="MiniLM weights package not installed")
async def test_a_question_in_other_words_reaches_the_fact_through_near_words(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(180):
        async with memory_system(tmp_path, embedder=MiniLMEmbedder()) as memory:
            await _home(memory)
            asked = "what are we driving these days?"
            told = [i for i in await memory.index.search("Volvo", k=3) if "Volvo" in i.text]
            near = await memory.index.searcher.similarities(asked, told)
            assert near and max(near.values()) < 0.45  # under the vector floor on its own
            items = await memory.view.auto_recall(asked)
            assert any("Volvo V60" in i.text for i in items), [i.text for i in items]
            items = await memory.view.auto_recall("what did the allergy tests find?")
            assert any("birch pollen" in i.text for i in items), [i.text for i in items]
            # Asking nothing, nothing: a sandwich's near words do not open the store.
            for other in ("make me a sandwich", "write a haiku about autumn"):
                assert await memory.view.auto_recall(other) == [], other

            words = memory.view.related
            assert "car" in words.index and words.path.exists()
            # Words the store uses often, and everyday words, are left as they are.
            assert not words.wants_stand_ins("dinner")  # in many memories here
            assert not words.wants_stand_ins("big")  # an everyday word
            assert words.wants_stand_ins("employer")  # in no memory, and no everyday word


CROWDED = [
    "The old town was full of tourists again, we could hardly walk.",
    "Crowds of tourists blocked the bridge on the way home.",
    "The audience at the school play clapped for ages.",
]


@pytest.mark.skipif(not minilm_available(), reason="MiniLM weights package not installed")
async def test_a_word_few_memories_use_stands_in_before_nearer_words_many_use(
    tmp_path: Path,
) -> None:
    """ "visitors": the store's "tourists" (0.79) and "crowds" (0.57) are nearer than "guest"
    (0.51), but a dozen days mention them and one memory says "guest" — the guest wifi."""
    rng = random.Random(5)
    with anyio.fail_after(180):
        async with memory_system(tmp_path, embedder=MiniLMEmbedder()) as memory:
            messages: list[tuple[str, str]] = []
            for n in range(40):
                parts = [*rng.sample(FILLER, 1), *rng.sample(CROWDED, 1)]
                if n == 17:
                    parts.insert(1, "The guest wifi password is cobalt-lantern-24.")
                messages += [("user", " ".join(parts)), ("assistant", "Noted.")]
            await add_session(memory.db, "s1", messages)
            await memory.index_session("s1")
            await memory.index.flush()
            words = memory.view.related
            items = await memory.view.auto_recall("what do visitors use to get online here?")
            assert any("cobalt-lantern-24" in i.text for i in items), [i.text for i in items]
            near = await words.near("what do visitors use to get online here?")
            assert "guest" in [r.word for r in near]
            common = words.specificity(words.counts[words.index["tourists"]])
            assert words.specificity(1) == 1.0 and 0.5 <= common < 0.8


@pytest.mark.skipif(not minilm_available(), reason="MiniLM weights package not installed")
async def test_the_vocabulary_is_kept_beside_the_database_and_only_grows_by_new_words(
    tmp_path: Path,
) -> None:
    embedder = MiniLMEmbedder()
    calls: list[int] = []

    class Counting:
        name, dim = embedder.name, embedder.dim

        async def embed(self, texts: list[str]) -> np.ndarray:
            calls.append(len(texts))
            return await embedder.embed(texts)

    with anyio.fail_after(180):
        async with memory_system(tmp_path, embedder=embedder) as memory:
            await _home(memory)
            first = RelatedWords(memory.db, Counting())
            assert await first.refresh() == len(first.words) > 20
            assert first.path.exists()
            again = RelatedWords(memory.db, Counting())
            calls.clear()
            assert await again.refresh() == 0 and calls == []  # read back, nothing embedded
            assert again.words == first.words
            assert again.counts == first.counts
            said = "The espresso grinder arrived."
            new = set(vocabulary_words(said)) - set(first.words)
            assert {"espresso", "grinder"} <= new
            await add_session(memory.db, "s2", [("user", said)])
            await memory.index_session("s2")
            await memory.index.flush()
            assert await again.refresh() == len(new)
            assert sum(calls) == len(new)  # only the new words embedded
            # Memories of known words only move the counts and the position, and both are saved.
            before = again.counts[again.index["printer"]]
            await add_session(memory.db, "s3", [("user", "The printer jammed again.")])
            await memory.index_session("s3")
            await memory.index.flush()
            assert await again.refresh() == 0
            with np.load(again.path) as saved:  # the next start reads nothing again
                assert int(saved["last_rowid"]) == again.last_rowid
            reread = RelatedWords(memory.db, Counting())
            await reread.refresh()
            assert reread.counts[reread.index["printer"]] == before + 1
            # A damaged file is rebuilt, not trusted.
            again.path.write_bytes(b"not a vocabulary")
            rebuilt = RelatedWords(memory.db, Counting())
            assert await rebuilt.refresh() == len(rebuilt.words) >= len(first.words)


@pytest.mark.skipif(not minilm_available(), reason="MiniLM weights package not installed")
async def test_the_daemons_index_builds_the_vocabulary_at_start_not_in_a_turn(
    tmp_path: Path,
) -> None:
    """A home written before the vocabulary existed gets it when its index starts (the
    embedder's warm-up), so no turn waits for it."""
    with anyio.fail_after(180):
        async with memory_system(tmp_path, embedder=MiniLMEmbedder()) as memory:
            await _home(memory)
        memory.index.related.path.unlink(missing_ok=True)  # as a home from before the vocabulary
        assert not memory.index.related.path.exists()
        async with memory_system(tmp_path, embedder=MiniLMEmbedder()) as again:
            words = again.index.related
            with anyio.fail_after(60):
                while not words.path.exists():
                    await anyio.sleep(0.05)
            assert "volvo" in words.index and words.last_rowid > 0


def test_what_only_a_word_standing_in_found_ranks_by_that_words_weight() -> None:
    """Its score in the stand-in's own lookup measured it against that word, not the message:
    ranked by it, a common word's hits came first whatever the weight said."""
    from datetime import UTC, datetime

    from daemon.memory.api import MemoryItem
    from daemon.memory.auto_recall import _standing_score

    ts = datetime(2028, 1, 1, tzinfo=UTC)
    chunk = MemoryItem(id="chunk:a", kind="chunk", text="two people", origin="person", ts=ts)
    fact = MemoryItem(id="fact:7", kind="fact", text="guest wifi", origin="person", ts=ts)
    top = 0.02
    common = _standing_score(replace(chunk, score=0.018), top, 0.36, frozenset())
    rare = _standing_score(replace(fact, score=0.015), top, 0.51, frozenset())
    assert rare.score > common.score
    assert common.score == pytest.approx(top * 0.36)
    # Found by the message's own words too: the better of both.
    own = _standing_score(replace(chunk, score=0.018), top, 0.36, frozenset({"chunk:a"}))
    assert own.score == 0.018
