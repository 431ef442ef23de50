"""Automatic recall shows a message that stated a since-changed value with the change.

The fact store knows the offsite moved from Bergen to Trieste; the message that first said
Bergen does not, and recall finds it by the question's own words. Each sentence stating a
superseded value is labelled in place with what holds now.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from daemon.sleep.mine import MiningPhase
from tests.sleep_phase_support import START, SleepRig, sleep_home

pytestmark = pytest.mark.anyio


async def _day(rig: SleepRig, day: int, lines: list[str]) -> None:
    when = START + timedelta(days=day)
    rig.clock.set(when + timedelta(hours=2))
    await rig.add_session(f"d{day}", [("user", t) for t in lines], started=when)
    await MiningPhase().run(rig.context(cycle_id=f"c{day}"))


def _stating(texts: list[str], value: str) -> list[str]:
    return [t for t in texts if value in t]


async def test_the_first_statement_of_a_changed_plan_is_shown_with_the_change(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            await _day(
                rig, 0, ["Morning. The team offsite is in Bergen this year, so keep May free."]
            )
            await _day(rig, 4, ["Change of plan: the offsite moves from Bergen to Trieste."])
            recalled = [i.text for i in await rig.memory.view.auto_recall("where is the offsite?")]
            first = [t for t in recalled if "this year" in t]
            assert first, recalled
            assert all(
                "Bergen this year, so keep May free [since changed: now Trieste]." in t
                for t in first
            ), first
            # The sentence of the change already says both: left as it is.
            assert not [t for t in recalled if "Trieste [since" in t]


async def test_a_message_never_mined_is_labelled_by_the_old_value_beside_its_subject(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            await _day(rig, 0, ["My gym day is Tuesday now."])
            await _day(rig, 1, ["Ugh, Tuesday at the gym was packed again", "Anyway."])
            await _day(rig, 3, ["From now on I hit the gym on Sunday, no longer Tuesday."])
            recalled = [i.text for i in await rig.memory.view.auto_recall("which day is the gym?")]
            packed = [t for t in recalled if "packed" in t]
            assert packed and all("[since changed: now Sunday]" in t for t in packed), recalled
            # Every sentence that names Tuesday beside the gym names Sunday too.
            for text in recalled:
                for sentence in text.split("."):
                    if "Tuesday" in sentence and "gym" in sentence:
                        assert "Sunday" in sentence, text


async def test_a_value_the_change_names_as_replaced_is_labelled_though_no_fact_held_it(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            await _day(rig, 0, ["Bergen won the vote for the offsite."])
            assert not [f for f in rig.memory.facts.facts() if "Bergen" in f.text]
            await _day(rig, 3, ["Scratch Bergen, the offsite is going to Trieste."])
            [fact] = [f for f in rig.memory.facts.facts() if f.mined]
            assert (fact.value, fact.replaced) == ("Trieste", "Bergen")
            recalled = [i.text for i in await rig.memory.view.auto_recall("where is the offsite?")]
            vote = [t for t in recalled if "vote" in t]
            assert vote, recalled
            assert all("the offsite [since changed: now Trieste]." in t for t in vote), vote


async def test_a_change_no_rule_read_is_shown_beside_the_first_statement(
    tmp_path: Path,
) -> None:
    """No fact holds the codename (no night has read it), and the sentence of the change
    shares only "project" with the question, so recall's best hits are the lines that say
    "project codename": the change is shown beside the first statement."""
    said = [
        "The codename for the new project is Marigold.",
        "We spent the whole meeting arguing about the project codename.",
        "Nobody outside the team may know the project codename.",
        "A project codename should be short and easy to say.",
        "The project codename list is pinned on the whiteboard.",
        "I keep forgetting whether the project codename is secret.",
        "The garden needs water, and the cat is sulking again.",
        "The project's been renamed, it's Heron now.",
        "The project budget meeting went fine.",
    ]
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            for day, line in enumerate(said):  # no night's mining: no fact holds any of it
                when = START + timedelta(days=day)
                rig.clock.set(when + timedelta(hours=2))
                await rig.add_session(f"d{day}", [("user", line)], started=when, summarise=False)
            recalled = [
                i.text for i in await rig.memory.view.auto_recall("what's the project codename?")
            ]
            assert not any("renamed" in t and "[said later" not in t for t in recalled), recalled
            first = [t for t in recalled if "Marigold" in t]
            assert first, recalled
            assert all("[said later, 12 January 2026: " in t for t in first), first
            assert "it's Heron now" in first[0]
            # What was said later without a word of change is not taken for one.
            assert not any("budget" in t for t in recalled), recalled
