"""Automatic recall brings the newest word on a subject: the change beside the old value, and
a paraphrase that stands out by vector though its cosine is under the floor (issue 34).

Real SQLite homes with months of ordinary talk between the telling, the change and the
question; nothing mined (no fact holds either value), so what links them is recall's own.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from daemon.memory.embedders import MiniLMEmbedder, minilm_available
from daemon.memory.newest import says_changed, subject_overlap
from daemon.models.base import ModelUnavailable
from tests.memory_support import add_session, memory_system, raising
from tests.sleep_phase_support import START, SleepRig, sleep_home

pytestmark = pytest.mark.anyio

FILLER = [
    "Work was a blur of meetings today and I got nothing real done.",
    "The printer jammed again, third time this week.",
    "I tried a new route to the office and it was slower.",
    "Can you suggest something quick for dinner with leftover rice?",
    "It poured all afternoon, the walk got cut short.",
    "I slept badly and I can feel it.",
    "The kids argued about the remote for an hour.",
    "How do I politely turn down a meeting with no agenda?",
    "I cleared my inbox for once, small victories.",
    "The train was late both ways, so I listened to a podcast about bridges.",
    "We spent the evening sorting the garage shelves.",
    "My back is stiff from sitting all day.",
    "Any ideas for a birthday present under thirty euros?",
    "I read an article on urban beekeeping and now I'm curious.",
    "The heating clicks at night, probably nothing.",
    "Could you help me outline a short talk on onboarding?",
    "We booked a table for dinner on Friday, nothing fancy.",
    "My parents want us over for lunch next weekend.",
]


def _message(rng: random.Random, said: str = "") -> str:
    parts = rng.sample(FILLER, 2)
    if said:
        parts.insert(1, said)
    return " ".join(parts)


async def _talk(rig: SleepRig, rng: random.Random, day: int, said: str = "") -> None:
    when = START + timedelta(days=day)
    rig.clock.set(when + timedelta(hours=2))
    lines = [("user", _message(rng)), ("assistant", "Noted."), ("user", _message(rng, said))]
    await rig.add_session(f"d{day}", lines, started=when, summarise=False)


async def test_a_change_sharing_only_the_subject_is_brought_in_first(tmp_path: Path) -> None:
    """Told where the in-laws' dinner is booked, months of talk, then the venue changes in a
    sentence sharing no word of the question; asked, the old sentence is never shown alone:
    the change comes first and the old message is marked as earlier."""
    rng = random.Random(3)
    with anyio.fail_after(120):
        async with sleep_home(tmp_path / "home") as rig:
            for day in range(0, 240, 4):
                said = ""
                if day == 8:
                    said = "Dinner with the in-laws is booked at Trattoria Sole."
                elif day == 160:
                    said = "Trattoria Sole fell through, we switched to Casa Verde."
                await _talk(rig, rng, day, said)
            rig.clock.set(START + timedelta(days=250))
            asked = "where are we having dinner with the in-laws?"
            recalled = [i.text for i in await rig.memory.view.auto_recall(asked)]
            shown = "\n".join(recalled)
            assert "Trattoria Sole" in shown, recalled  # the old statement is what matches
            assert "Casa Verde" in shown, recalled
            [old] = [t for t in recalled if "booked at Trattoria Sole" in t]
            assert old.startswith("[said later, "), old
            assert old.index("Casa Verde") < old.index("earlier: ") < old.index("booked at"), old


async def test_a_value_changed_twice_shows_the_newest_first_whatever_brought_it_in(
    tmp_path: Path,
) -> None:
    """A firm chosen, replaced months later, and the replacement replaced again: the question
    shares words with the first telling only; the context puts the newest change first, then
    the one before, then the first telling marked as earlier — no firm shown as current alone."""
    rng = random.Random(6)
    with anyio.fail_after(120):
        async with sleep_home(tmp_path / "home") as rig:
            for day in range(0, 300, 4):
                said = {
                    8: "We chose Nordbygg for the renovation of the kitchen.",
                    100: "Hearth Works took over the kitchen from Nordbygg.",
                    200: "Hearth Works went bust, Calloway is finishing the kitchen instead.",
                }.get(day, "")
                await _talk(rig, rng, day, said)
            rig.clock.set(START + timedelta(days=310))
            asked = "which firm did we choose for the renovation?"
            recalled = [i.text for i in await rig.memory.view.auto_recall(asked)]
            [first] = [t for t in recalled if "We chose Nordbygg" in t]
            assert first.index("Calloway") < first.index("took over") < first.index("earlier: "), (
                first
            )
            assert first.index("earlier: ") < first.index("We chose Nordbygg"), first


def test_a_later_sentence_shares_a_subject_by_two_words_or_a_name_and_says_something_new() -> None:
    earlier = "The plan is to buy a flat in Leith."
    assert (
        subject_overlap("We gave up on Leith, now we're looking at flats in Grünerløkka.", earlier)
        >= 2
    )
    # One common word is not a subject ("plan"), and the same words again are no change.
    assert subject_overlap("Change of plan, the holiday is Sicily now.", earlier) < 2
    assert subject_overlap("The plan is to buy a flat in Leith now.", earlier) == 0
    # "I" and "I'm" are not names.
    said = "Our allotment plot is number 14 and I'm curious."
    assert subject_overlap("I read an article on beekeeping and now I'm curious.", said) < 2
    assert says_changed("We're doing Christmas in Kraków now, not Oslo.")
    assert says_changed("Hearth Works took over the kitchen from Nordbygg.")
    assert not says_changed("The kitchen will be done by Nordbygg.")


TEA = "Honestly my favourite tea lately is genmaicha."


@pytest.mark.skipif(not minilm_available(), reason="MiniLM weights package not installed")
async def test_a_paraphrase_that_stands_out_passes_under_the_floor(tmp_path: Path) -> None:
    """The telling sits in a message about other things (its cosine to the question is under
    the floor) among a hundred messages: it is what the vectors rank first by a clear lead,
    so it is recalled; a request about nothing said brings nothing."""
    rng = random.Random(5)
    messages: list[tuple[str, str]] = []
    for n in range(60):
        messages.append(("user", f"Hey. {TEA} Anyway." if n == 7 else _message(rng)))
        messages.append(("assistant", "Noted."))
    with anyio.fail_after(180):
        async with memory_system(tmp_path, embedder=MiniLMEmbedder()) as memory:
            await add_session(memory.db, "s1", messages)
            await memory.index_session("s1")
            await memory.index.flush()
            asked = "what should I brew if I want my usual cuppa?"
            near = await memory.index.searcher.similarities(
                asked, [i for i in await memory.index.search(TEA, k=3) if "genmaicha" in i.text]
            )
            assert near and max(near.values()) < 0.45  # under the floor by cosine alone
            items = await memory.view.auto_recall(asked)
            assert any("genmaicha" in i.text for i in items), [i.text for i in items]
            for other in ("make me a sandwich", "tell me a joke", "write a haiku about autumn"):
                assert await memory.view.auto_recall(other) == [], other


async def test_the_recall_tool_reads_a_changed_value_after_its_change(tmp_path: Path) -> None:
    """The recall tool's sources (models down: the extractive answer): the transcript that
    booked the first venue is read after the later change of it, marked as earlier."""
    models = {
        "recall_planner": raising(ModelUnavailable("down")),
        "recall_synthesis": raising(ModelUnavailable("down")),
    }
    rng = random.Random(7)
    async with memory_system(tmp_path, models=models) as memory:
        for day in range(1, 28):
            said = {
                2: "Dinner with the in-laws is booked at Trattoria Sole.",
                20: "Trattoria Sole fell through, we switched to Casa Verde.",
            }.get(day, "")
            await add_session(
                memory.db,
                f"s{day}",
                [("user", _message(rng, said)), ("assistant", "Noted.")],
                started=f"2026-02-{day:02d}T09:00:00+00:00",
                ts=f"2026-02-{day:02d}T09:00:00+00:00",
            )
            await memory.index_session(f"s{day}")
        result = await memory.recall_result("where are we having dinner with the in-laws?")
    old = [s.text for s in result.sources if "booked at Trattoria Sole" in s.text]
    assert old, [s.text for s in result.sources]
    for text in old:
        assert text.startswith("[said later, 20 February 2026: "), text
        assert text.index("Casa Verde") < text.index("earlier: ") < text.index("booked at"), text


@pytest.fixture
def cli_logging() -> Iterator[None]:
    """The command reconfigures logging for the process; put the defaults back afterwards."""
    import structlog

    yield None
    structlog.reset_defaults()


async def _dinner_home(root: Path) -> None:
    rng = random.Random(8)
    async with sleep_home(root) as rig:
        for day in range(0, 240, 4):
            said = {
                8: "Dinner with the in-laws is booked at Trattoria Sole.",
                160: "Trattoria Sole fell through, we switched to Casa Verde.",
            }.get(day, "")
            await _talk(rig, rng, day, said)


@pytest.mark.usefixtures("cli_logging")
def test_reverie_context_shows_the_change_before_the_old_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reverie context --prompt Q --json` on a home with months of talk: the first turn's
    context never shows the old venue without the new one, and shows the new one first."""
    from daemon.cli import main

    monkeypatch.setenv("REVERIE_EMBEDDER", "none")
    anyio.run(_dinner_home, tmp_path / "home")
    capsys.readouterr()  # what building the home logged
    asked = "where are we having dinner with the in-laws?"
    assert main(["context", "--home", str(tmp_path / "home"), "--prompt", asked, "--json"]) == 0
    text = "\n".join(b["text"] for b in json.loads(capsys.readouterr().out)["blocks"])
    assert "booked at Trattoria Sole" in text, text
    assert text.index("Casa Verde") < text.index("booked at Trattoria Sole"), text
