"""Recall that fits (daemon/memory/excerpt.py): results carry the evidence and little around it.

A window is cut to the lines that bear on the question, a long message is excerpted around
what matched, a message is shown once per turn, an item's `message_ids` are exactly the
messages its text shows, and a paraphrase that shares no word with its memory still reaches it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.memory.embedders import MiniLMEmbedder, minilm_available
from daemon.memory.excerpt import GAP, Question, excerpt_message
from daemon.memory.query import decompose
from daemon.memory.system import MemorySystem
from daemon.tokens import default_counter
from tests.memory_support import NOW, add_session, memory_system

pytestmark = pytest.mark.anyio

CHATTER = [
    ("user", "The weather was grey all week, I stayed in and read a novel."),
    ("assistant", "A quiet week then. Which novel did you pick?"),
    ("user", "A detective story set on a ferry, quite gripping."),
    ("assistant", "Ferries make good settings for a mystery."),
    ("user", "My cousin Ilse is starting her violin lessons in April."),
    ("assistant", "Good luck to her with the scales!"),
    ("user", "We went to the market and bought far too many apples."),
    ("assistant", "Apple cake season, then."),
]

NURSERY = [
    *CHATTER[:4],
    ("user", "We picked terracotta for the nursery walls after a long debate."),
    ("assistant", "Warm and calm, a lovely choice."),
    *CHATTER[6:],
]


async def _contents(memory: MemorySystem) -> dict[str, str]:
    rows = await memory.db.fetchall("SELECT msg_id, content FROM messages")
    return {r[0]: r[1] for r in rows}


def _shows_exactly(text: str, ids: tuple[str, ...], contents: dict[str, str]) -> bool:
    """Every id's message text (or an excerpt of it) is in `text`, and no other message's is."""
    for mid, content in contents.items():
        head = content.split()[:5]
        shown = " ".join(head) in " ".join(text.split())
        if shown != (mid in ids):
            return False
    return True


async def test_window_is_cut_to_the_matching_line_and_its_ids(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await add_session(memory.db, "s1", CHATTER)
        await memory.index_session("s1")
        await memory.index.flush()
        contents = await _contents(memory)
        found = await memory.index.search_plan(
            decompose("When do the violin lessons of Ilse start?", now=NOW), k=10
        )
        assert found and "violin lessons" in found[0].text
        windows = [i for i in found if i.id.endswith("-w")]
        assert windows, "the windows holding the violin line are among the results"
        for item in found:
            assert _shows_exactly(item.text, item.message_ids, contents), item
        # No result repeats a message a better one shows.
        ids = [m for i in found for m in i.message_ids]
        assert len(ids) == len(set(ids))
        # A window keeps the line before its best and the two after it, not all six: the
        # lines about the weather and the novel, three and four before, stay out.
        top = await memory.index.search_plan(
            decompose("When do the violin lessons of Ilse start?", now=NOW), k=4
        )
        near = {"s1-m3", "s1-m4", "s1-m5", "s1-m6", "s1-m7"}
        assert [i.id for i in top][:2] == ["chunk:s1:4", "chunk:s1:3-w"]
        assert all(set(i.message_ids) <= near for i in top if i.id.endswith("-w"))


async def test_a_window_whose_lines_all_show_elsewhere_is_left_out(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await add_session(memory.db, "s1", CHATTER[:3])
        await memory.index_session("s1")
        await memory.index.flush()
        found = await memory.index.search_plan(decompose("detective ferry novel", now=NOW), k=10)
        ids = [m for i in found for m in i.message_ids]
        assert len(ids) == len(set(ids)) and set(ids) <= {"s1-m0", "s1-m1", "s1-m2"}
        unfitted = await memory.index.search_plan(
            decompose("detective ferry novel", now=NOW), k=10, fit=False
        )
        assert len([m for i in unfitted for m in i.message_ids]) > len(ids)


async def test_automatic_recall_never_shows_a_message_twice_in_a_turn(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        lines = [
            ("user" if i % 2 == 0 else "assistant", f"The Lisbon trip plan, step {i}: trams.")
            for i in range(12)
        ]
        await add_session(memory.db, "s1", lines)
        await memory.index_session("s1")
        await memory.index.flush()
        items = await memory.view.auto_recall("What was the Lisbon trip plan with trams?")
        assert len(items) >= 2
        shown = [line for i in items for line in i.text.splitlines() if line != GAP]
        ids = [m for i in items for m in i.message_ids]
        assert len(ids) == len(set(ids))
        steps = [line.split("step ")[1] for line in shown]
        assert len(steps) == len(set(steps)), shown


def test_a_long_message_is_excerpted_around_what_matched() -> None:
    filler = " ".join(
        f"Paragraph {n} goes over the staging rollout, the dashboards and the on-call rota."
        for n in range(30)
    )
    content = (
        filler + " The database migration needs the orders table locked for ten minutes. " + filler
    )
    question = Question.of("How long is the orders table locked during the migration?")
    short = excerpt_message(content, question)
    assert "orders table locked for ten minutes" in short
    assert short.startswith(GAP) and short.endswith(GAP)
    assert len(short) < len(content) / 5
    # A short message is never cut.
    assert excerpt_message("The orders table is locked.", question) == "The orders table is locked."
    # Nothing shared (the vectors found it): its opening.
    opening = excerpt_message(content, Question.of("ice cream flavours"))
    assert opening.startswith("Paragraph 0") and opening.endswith(GAP)


def test_a_message_of_a_few_sentences_is_cut_to_the_one_that_answers() -> None:
    content = (
        "Thanks so much, it has been a wonderful but busy month for all of us here. "
        "The kids keep asking about the summer holidays and where we might go next. "
        "I finally signed up for a pottery class on Thursday evenings at the studio. "
        "Anyway, how have you been lately, and how is the new job treating you?"
    )
    question = Question.of("When is the pottery class?")
    short = excerpt_message(content, question)
    assert "signed up for a pottery class on Thursday evenings" in short
    assert "summer holidays" not in short and "busy month" not in short
    assert short.startswith(GAP) and len(short) <= len(content) / 2
    # A sentence or two is never cut.
    two = "I finally signed up for a pottery class. It is on Thursdays."
    assert excerpt_message(two, question) == two


def test_a_passage_of_a_long_message_is_not_cut_to_a_sentence() -> None:
    passage = " ".join(
        f"Step {n}: copy the assets bucket, check the checksums, update the runbook."
        for n in range(6)
    )
    question = Question.of("when do we check the checksums?")
    assert excerpt_message(passage, question, passage=True) == passage
    assert len(excerpt_message(passage, question)) < len(passage)


async def test_a_long_message_is_excerpted_in_search_results(tmp_path: Path) -> None:
    plan = "\n".join(
        f"Step {n}: copy the assets bucket, check the checksums, update the runbook."
        for n in range(40)
    )
    plan += "\nStep 40: rotate the signing key stored in the vault under ops/signing."
    async with memory_system(tmp_path) as memory:
        await add_session(memory.db, "s1", [("assistant", plan), ("user", "Thanks, looks good.")])
        await memory.index_session("s1")
        await memory.index.flush()
        found = await memory.index.search_plan(
            decompose("where is the signing key stored?", now=NOW), k=5
        )
        hit = next(i for i in found if "s1-m0" in i.message_ids)
        assert "signing key stored in the vault" in hit.text
        assert GAP in hit.text and len(hit.text) < len(plan) / 4


# The agent loop calibrates the shared token counter from the usage a provider reports: a
# run whose (fake) provider reported fewer tokens than counted left it at 0.6–0.8, and this
# message was no longer long enough to be cut into passages (it failed only in a full run).
@pytest.mark.parametrize("calibrated", [1.0, 0.6, 1.8])
async def test_a_long_message_is_indexed_and_found_as_its_passages(
    tmp_path: Path, calibrated: float
) -> None:
    counter = default_counter()
    before, counter.scale = counter.scale, calibrated
    try:
        await _long_message_found_as_passages(tmp_path)
    finally:
        counter.scale = before


async def _long_message_found_as_passages(tmp_path: Path) -> None:
    sections = [
        "Backups: copy the assets bucket nightly, keep thirty days, check the checksums.",
        "Deploys: build the image, push it to the registry, roll the web tier one by one.",
        "Secrets: the signing key lives in the vault under ops/signing, rotated each quarter.",
        "Alerts: page the on-call engineer when the error rate passes two percent.",
    ]
    plan = "\n\n".join(
        f"{s} " + "Notes and caveats follow for this section. " * 12 for s in sections
    )
    async with memory_system(tmp_path) as memory:
        await add_session(memory.db, "s1", [("assistant", plan), ("user", "Thanks, looks good.")])
        await memory.index_session("s1")
        await memory.index.flush()
        rows = await memory.db.fetchall(
            "SELECT uid, text, message_ids FROM memories WHERE uid LIKE 'chunk:s1:0.p%' ORDER BY uid"
        )
        assert len(rows) >= 3 and all(r[2] == '["s1-m0"]' for r in rows)
        assert rows[0][1].startswith("assistant (2 March 2026): Backups")
        assert rows[1][1].startswith("assistant (2 March 2026): … ")
        found = await memory.index.search_plan(
            decompose("where does the signing key live?", now=NOW), k=5
        )
        assert found[0].meta.get("passage") is not None
        assert "signing key lives in the vault" in found[0].text
        assert "Backups" not in found[0].text and found[0].message_ids == ("s1-m0",)
        # The message is not shown again whole after its passage; other passages may follow.
        later = [i for i in found[1:] if "s1-m0" in i.message_ids]
        assert all(i.meta.get("passage") is not None for i in later)
        texts = [i.text for i in found]
        assert len(texts) == len(set(texts))


@pytest.mark.skipif(not minilm_available(), reason="MiniLM weights package not installed")
async def test_a_paraphrase_sharing_no_word_reaches_its_memory(tmp_path: Path) -> None:
    async with memory_system(tmp_path, embedder=MiniLMEmbedder()) as memory:
        await add_session(memory.db, "s1", NURSERY)
        await memory.index_session("s1")
        await memory.index.flush()
        asked = "what colour did we choose for the baby's room?"
        items = await memory.view.auto_recall(asked)
        assert any("terracotta for the nursery walls" in i.text for i in items), items
        # The floor still keeps out what is merely near: nothing here is about sandwiches.
        assert await memory.view.auto_recall("make me a sandwich") == []
