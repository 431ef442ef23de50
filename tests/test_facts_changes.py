"""Facts that change: a weekday of a habit stays a weekday, and a told new value supersedes the old."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from daemon.memory.mining import Line, mine_lines, resolve_plan_dates
from daemon.memory.mining_model import parse_model_facts
from daemon.sleep.maintenance import MaintenancePhase
from tests.harness import run_cli
from tests.sleep_phase_support import sleep_home, sleep_settings

pytestmark = pytest.mark.anyio

SAID = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)  # a Tuesday

RECURRING = [
    "the gym moves to Saturday for me, Tuesday doesn't work any more",
    "My gym day is Tuesday.",
    "I go to the climbing wall every Friday.",
    "Choir moved from Monday to Wednesday.",
    "I usually train on Thursday with Marta.",
    "Our date night is Friday.",
    "I go swimming on Saturdays.",
]
ONE_OFF = [
    ("This Saturday we fly to Rome.", "2026-11-28"),
    ("My dentist appointment is next Tuesday.", "2026-12-01"),
    ("On Saturday we fly to Lisbon.", "2026-11-28"),
    ("The dinner moves to Saturday.", "2026-11-28"),
]


def test_the_gym_moving_to_saturday_is_mined_as_a_weekday() -> None:
    mined = _mined("the gym moves to Saturday for me, Tuesday doesn't work any more")
    assert mined == ["The gym moves to Saturday for me, Tuesday doesn't work any more"]


def _mined(text: str) -> list[str]:
    line = Line(id="m0", session="s1", role="user", text=text, ts=SAID, origin="person")
    return [f.text for f in mine_lines([line], UTC)]


@pytest.mark.parametrize("text", RECURRING)
def test_a_weekday_of_a_habit_is_not_read_as_a_date(text: str) -> None:
    assert resolve_plan_dates(text, SAID) == text
    assert all("(20" not in t for t in _mined(text)), _mined(text)


@pytest.mark.parametrize(("text", "day"), ONE_OFF)
def test_a_weekday_of_one_plan_still_resolves_to_its_date(text: str, day: str) -> None:
    assert f"({day})" in resolve_plan_dates(text, SAID)


def _model_fact(text: str, said: str, *, attribute: str = "", value: str = "") -> str:
    line = Line(session="s1", id="m1", ts=SAID, role="user", origin="person", text=said)
    answer = {"facts": [{"text": text, "kind": "fact", "subject": "person" if attribute else "",
                         "attribute": attribute, "value": value, "message_ids": ["m1"]}]}  # fmt: skip
    (fact,) = parse_model_facts(answer, [line], UTC).facts
    return fact.text


def test_the_model_path_keeps_a_habits_weekday_as_a_weekday() -> None:
    # The model's own sentence carries no habit cue: the line it cites does.
    said = "Long day. The gym moves to Saturday for me, Tuesday doesn't work any more."
    assert _model_fact("The person's gym day is Saturday.", said) == (
        "The person's gym day is Saturday."
    )
    # A bare weekday as the value of a "day" attribute is a day of every week.
    assert "(20" not in _model_fact(
        "Swimming is on Thursday.", "Swimming is on Thursday.", attribute="swim day",
        value="Thursday",
    )  # fmt: skip
    # A one-off plan from the model still gets its date, even beside a habit in the message.
    said = "I go swimming every Friday. The dinner moves to Saturday."
    assert "(2026-11-28)" in _model_fact("The dinner is on Saturday.", said)


async def test_a_recurring_fact_is_never_retired_as_a_past_plan(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with sleep_home(
            tmp_path / "home", settings=sleep_settings(retire_after_days=7)
        ) as rig:
            facts = rig.memory.facts
            plan = await rig.memory.remember("dentist appointment tomorrow")
            told = await rig.memory.remember("my gym day is Saturday")
            assert "(20" not in told.text  # told, too: a weekday of a habit is kept as said
            # A fact written before the rule, its weekday pinned to one date.
            old = await rig.memory.remember("the gym moves to Saturday (2026-01-10) for me")
            rig.clock.advance(days=40)
            report = await MaintenancePhase().run(rig.context())
            assert [r["id"] for r in report.details["retired"]] == [plan.id]
            assert facts.get(told.id).active  # type: ignore[union-attr]
            assert facts.get(old.id).active  # type: ignore[union-attr]


CHANGES = [
    ("the bike lock combination is 163", "remember that the bike lock combination is now 168"),
    ("my dentist is Dr Moreau", "my dentist is now Dr Lee"),
    ("the book club is at Marta's flat", "the book club is now at the library"),
    ("my locker number is 12", "please remember my locker number is 31 now, not 12"),
    ("the guest wifi password is tulip", "don't forget that the guest wifi password is now orchid"),
]


@pytest.mark.parametrize(("first", "then"), CHANGES)
async def test_a_told_new_value_supersedes_the_old_one_with_history(
    tmp_path: Path, first: str, then: str
) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            facts = rig.memory.facts
            old = await rig.memory.remember(first)
            rig.clock.advance(days=3)
            new = await rig.memory.remember(then)
            assert new.status == "corrected" and new.similar_to == old.id, new
            assert [f.id for f in facts.facts()] == [new.id]  # one current value
            gone, now = facts.get(old.id), facts.get(new.id)
            assert gone is not None and now is not None
            assert gone.superseded_by == new.id and now.supersedes == old.id
            assert gone.invalid_from == now.valid_since == rig.clock.now().replace(microsecond=0)
            assert old.id in [f.id for f in facts.facts(include_retired=True)]  # history kept
            row = await rig.memory.index.get(old.id)
            assert row is not None and row.meta["retired_at"] is not None
            assert old.text not in facts.memory_md.read_text()
            # Said again: nothing new, nothing superseded.
            again = await rig.memory.remember(then)
            assert again.status == "duplicate" and again.id == new.id


async def test_a_weaker_word_never_supersedes_a_stronger_one(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            facts = rig.memory.facts
            old = await rig.memory.remember("the bike lock combination is 163", origin="person")
            refused = await rig.memory.remember(
                "the bike lock combination is now 999", origin="tool"
            )
            assert refused.status == "similar" and refused.id == old.id
            assert "does not change" in refused.message
            assert [f.id for f in facts.facts()] == [old.id]
            # The agent's word changes the agent's fact.
            mine = await rig.memory.remember("the wifi password is tulip", origin="agent")
            newer = await rig.memory.remember("the wifi password is now orchid", origin="agent")
            assert newer.status == "corrected" and newer.similar_to == mine.id


async def test_unrelated_facts_with_a_key_are_both_kept(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            a = await rig.memory.remember("the bike lock combination is 163")
            b = await rig.memory.remember("the garage code is 4471")
            assert b.status == "stored"
            assert {f.id for f in rig.memory.facts.facts()} == {a.id, b.id}


def test_reverie_remember_supersedes_through_the_cli(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_cli("init", str(home)).returncode == 0
    first = run_cli("remember", "the bike lock combination is 163", "--home", str(home))
    assert first.returncode == 0, first.stderr
    then = run_cli(
        "remember", "remember that the bike lock combination is now 168", "--home", str(home)
    )
    assert then.returncode == 0, then.stderr
    assert "in place of fact:1" in then.stdout + then.stderr
    events = [json.loads(x) for x in (home / "memory" / "facts.jsonl").read_text().splitlines()]
    assert [(e["op"], e.get("supersedes")) for e in events] == [
        ("remember", None),
        ("correct", "fact:1"),
    ]
    assert "163" not in (home / "memory" / "MEMORY.md").read_text()
