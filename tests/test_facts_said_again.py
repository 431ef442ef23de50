"""A known fact's slot said again with another value, in any construction, changes the fact.

The extractive rules read changes only in the constructions they know; a stored fact names its
subject and value, so a later sentence that names the subject again with a word of change and
either the old value or one value of the same shape is read as a change of that fact. When the
new value cannot be told, the sentence stands in for the fact (tagged uncertain): the old value
is never left standing alone as current.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from daemon.memory.mining import MinedFact, rules_for
from daemon.memory.slots import restated, slot_anchors, values_of_shape
from daemon.sleep.changes import list_changes
from daemon.sleep.mine import MiningPhase
from tests.sleep_phase_support import START, SleepRig, sleep_home

pytestmark = pytest.mark.anyio

GYM = slot_anchors("person", "gym day")


@pytest.mark.parametrize(
    ("sentence", "value", "anchors", "new"),
    [
        ("From now on I hit the gym on Sunday, no longer Saturday.", "Saturday", GYM, "Sunday"),
        ("Scratch Bergen, the offsite is going to Kotor.", "Bergen",
         slot_anchors("team offsite", "where"), "Kotor"),
        ("Marketing vetoed Heron, the project codename is Juniper.", "Heron",
         slot_anchors("project codename", "value"), "Juniper"),
        ("The airline moved the Lisbon flight to 22 March (was 15 February).", "15 February",
         slot_anchors("lisbon flight", "when"), "22 March"),
        ("My gym slot changed: it's Thursdays these days.", "Saturday", GYM, "Thursday"),
        # The old value named, the new one not a value of its shape: unclear, "" stands in.
        ("The nursery is no longer terracotta.", "terracotta",
         slot_anchors("nursery walls", "value"), ""),
    ],
)  # fmt: skip
def test_a_change_is_read_from_the_slot_not_the_construction(
    sentence: str, value: str, anchors: frozenset[str], new: str
) -> None:
    said = restated(sentence, value=value, anchors=anchors)
    assert said is not None and said.value == new and said.old == value


@pytest.mark.parametrize(
    ("sentence", "value", "anchors"),
    [
        ("I rode my bike 40 km today, the lock is fine now.", "163", slot_anchors("bike lock", "value")),
        ("Tomas said the offsite was fun.", "Bergen", slot_anchors("team offsite", "where")),
        ("I went to the gym on Sunday.", "Saturday", GYM),  # no word of change
        ("Ugh, Saturday at the gym was packed again.", "Saturday", GYM),  # a past day, not a change
        # A common word beside "now" or "was" is no change of a value without a shape.
        ("The party was awesome now that the love is back.", "awesome",
         slot_anchors("love around you", "value")),
        ("I love the nursery now, terracotta suits it.", "terracotta",
         slot_anchors("nursery walls", "value")),
        ("The offsite moved to Kotor.", "Bergen", GYM),  # another subject
        ("I can't go to the gym on Friday, work is crazy.", "Saturday", GYM),  # one day
    ],
)  # fmt: skip
def test_a_sentence_that_changes_nothing_is_not_read_as_a_change(
    sentence: str, value: str, anchors: frozenset[str]
) -> None:
    assert restated(sentence, value=value, anchors=anchors) is None


async def _night(rig: SleepRig, day: int, text: str, cycle: str) -> dict:
    when = START + timedelta(days=day)
    rig.clock.set(when + timedelta(hours=2))
    await rig.add_session(f"d{day}", [("user", text)], started=when)
    report = await MiningPhase().run(rig.context(cycle_id=cycle))
    return report.details["mined"]


async def test_a_habit_said_again_in_other_words_supersedes_the_mined_day(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            await _night(rig, 0, "Long week. My gym day is Saturday now.", "c0")
            facts = rig.memory.facts
            [first] = [f for f in facts.facts() if f.mined]
            assert first.value == "Saturday"
            mined = await _night(
                rig, 5, "Busy again. From now on I hit the gym on Sunday, no longer Saturday.", "c5"
            )
            assert [o["status"] for o in mined["outcomes"]] == ["superseded"]
            old = facts.get(first.id)
            assert old is not None and not old.active and old.superseded_by
            new = facts.get(old.superseded_by)
            assert new is not None and new.value == "Sunday" and new.key == first.key
            assert "Sunday" in new.text and "(20" not in new.text  # a habit stays a weekday
            [change] = await list_changes(rig.db, "c5")
            assert (change.kind, change.target) == ("fact_superseded", first.id)
            shown = [i.text for i in await rig.memory.view.recent_facts(10)]
            assert not [t for t in shown if "Saturday" in t and "Sunday" not in t]


async def test_an_unclear_new_value_leaves_the_sentence_in_place_of_the_old(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            await _night(rig, 0, "The nursery walls are going to be terracotta.", "c0")
            facts = rig.memory.facts
            [first] = [f for f in facts.facts() if f.mined]
            await _night(rig, 3, "Honestly the nursery is no longer terracotta.", "c3")
            old = facts.get(first.id)
            assert old is not None and not old.active
            new = facts.get(old.superseded_by or "")
            assert new is not None and new.text == "Honestly the nursery is no longer terracotta."
            assert new.tags == ("uncertain",) and new.value == "" and new.key == first.key
            # A later clear value replaces the stand-in by the rules' own key.
            await _night(rig, 6, "The nursery walls are going to be ochre.", "c6")
            [current] = [f for f in facts.facts() if f.mined]
            assert current.value == "ochre" and facts.history(current.id)[0].id == first.id


async def test_a_fact_without_a_key_changes_only_by_a_sentence_naming_its_value(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            facts = rig.memory.facts
            kept = await facts.record_mined(
                MinedFact(text="They told us the offsite will be in Bergen.", kind="plan",
                          origin="person", session="d0", message_ids=("d0-m0",), said_at=START)
            )  # fmt: skip
            await _night(rig, 2, "The offsite venue was lovely, I hear.", "c2")
            assert facts.get(kept.id).active  # type: ignore[union-attr]
            await _night(rig, 4, "The offsite got relocated to Trieste (it was Bergen).", "c4")
            old = facts.get(kept.id)
            assert old is not None and not old.active
            new = facts.get(old.superseded_by or "")
            assert new is not None and new.replaced == "Bergen" and "Trieste" in new.text
            assert new.tags == ()  # the new value is clear: not marked uncertain


@pytest.mark.parametrize(
    ("sentence", "replaced"),
    [
        ("Scratch Bergen, the offsite is going to Kotor.", "Bergen"),
        ("Marketing vetoed Heron, the project codename is Juniper.", "Heron"),
        ("The offsite is in Kotor this year.", ""),  # no word of change
    ],
)
def test_a_change_naming_two_values_of_one_shape_replaces_the_other(
    sentence: str, replaced: str
) -> None:
    [found] = [f for f in rules_for(sentence) if f.get("subject")]
    assert found["replaces"] == replaced


def test_punctuation_ends_a_name_and_a_first_word_is_not_one_alone() -> None:
    assert values_of_shape("Thanks, I just like helping people.", "name") == [(0, "Thanks")]
    assert values_of_shape("We met Ana Lopez, Tom, Eva.", "name") == [
        (7, "Ana Lopez"), (18, "Tom"), (23, "Eva")
    ]  # fmt: skip


async def test_a_taste_said_again_is_not_a_change_of_it(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            await _night(rig, 0, "I love running my own studio.", "c0")
            mined = await _night(rig, 2, "I used to love spending time in the studio.", "c2")
            assert "superseded" not in [o["status"] for o in mined["outcomes"]]
            await _night(rig, 3, "Last week I decided to run for office again.", "c3")
            mined = await _night(rig, 5, "Last week I dropped off the cakes at the shelter.", "c5")
            assert "superseded" not in [o["status"] for o in mined["outcomes"]]
