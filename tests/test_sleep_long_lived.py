"""A long-lived home: an ordinary night supersedes nothing that did not change, and every
supersession names the message that said the change.

Months of talk are built in-process (the daemon's own services, a `FakeClock`, the offline
model: the mining phase's extractive rules), the backlog is mined as the first nights would
mine it, and then one ordinary day and one day with a single change are each mined as a
night would mine them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from daemon.memory.mining import Line, mine_lines
from daemon.sleep.changes import list_changes
from daemon.sleep.maintenance import retire_stale
from daemon.sleep.mine import MiningPhase
from tests.sleep_phase_support import START, SleepRig, sleep_home, sleep_settings

pytestmark = pytest.mark.anyio

DAYS = 84
THINGS = ["garden", "budget", "novel", "choir", "scraper", "sourdough", "running"]
PEOPLE = ["Ana", "Tomas", "Ines", "Rui", "Marta", "Joana", "Pedro", "Helena"]
RELATIONS = ["sister", "colleague", "neighbour", "friend"]
PLACES = ["Bergen", "Kotor", "Porto", "Lyon", "Ghent", "Split", "Graz"]
EVENTS = ["meetup", "book club", "tasting"]


def said_on(day: int) -> list[tuple[str, str]]:
    """One day's talk: facts said in passing, a dated occasion, and, some days, a change."""
    thing, person = THINGS[day % len(THINGS)], PEOPLE[day % len(PEOPLE)]
    relation, place = RELATIONS[day % len(RELATIONS)], PLACES[day % len(PLACES)]
    event = EVENTS[day % len(EVENTS)]
    when = (START + timedelta(days=day + 9)).strftime("%-d %B")
    lines = [
        ("user", f"Let's get back to the {thing}. {person} is my {relation}, by the way."),
        ("assistant", f"Noted. Last time we covered the {thing} basics."),
        ("user", f"I prefer mornings for the {thing}. The {event} is in {place} on {when}."),
        ("assistant", "Understood."),
    ]
    if day % 2:
        moved = PLACES[(day + 3) % len(PLACES)]
        lines.append(("user", f"Change of plan: the {event} moves from {place} to {moved}."))
    return lines


async def mine_night(rig: SleepRig, cycle: str) -> None:
    """Mine what was said since the cursor, in as many nights as the cap needs."""
    for n in range(20):
        report = await MiningPhase().run(rig.context(cycle_id=f"{cycle}-{n}"))
        if not report.details["mined"]["read"]:
            return
    raise AssertionError("the backlog was never read to the end")


async def superseded(rig: SleepRig, cycle: str) -> list:
    return [c for c in await list_changes(rig.db, cycle) if c.kind == "fact_superseded"]


async def test_an_ordinary_night_on_a_long_lived_home_supersedes_only_what_changed(
    tmp_path: Path,
) -> None:
    # A small nightly cap, so the backlog takes several nights as a long history does.
    settings = sleep_settings(mining_max_messages=120)
    with anyio.fail_after(120):
        async with sleep_home(tmp_path / "home", settings=settings) as rig:
            for day in range(DAYS):
                at = START + timedelta(days=day, hours=1)
                rig.clock.set(at)
                await rig.add_session(f"d{day:03d}", said_on(day), started=at, summarise=False)
                if day % 3 == 0:
                    await rig.memory.remember(f"my {THINGS[day % 7]} notes live in notebook {day}")
            rig.clock.set(START + timedelta(days=DAYS, hours=20))
            await mine_night(rig, "backlog")
            facts = rig.memory.facts
            await facts.load()
            # The backlog's last word on each occasion holds: the last odd day's move.
            last = DAYS - 1 if (DAYS - 1) % 2 else DAYS - 2
            moved_to = PLACES[(last + 3) % len(PLACES)]
            assert any(
                f.value == moved_to and f.active and f.session == f"d{last:03d}"
                for f in facts.facts()
            )
            before = {f.id for f in facts.facts()}

            # An ordinary day: the same people and tastes again, a new dated occasion of each
            # event, nothing said to have changed.
            day = DAYS
            at = START + timedelta(days=day, hours=1)
            rig.clock.set(at)
            ordinary = [
                ("user", "Let's get back to the garden. Ana is my sister, by the way."),
                ("user", "I prefer mornings for the garden. The meetup is in Split on 30 May."),
                ("user", "The book club is in Ghent on 2 June. The tasting is in Graz on 4 June."),
            ]
            await rig.add_session("ordinary", ordinary, started=at, summarise=False)
            rig.clock.set(at + timedelta(hours=19))
            await MiningPhase().run(rig.context(cycle_id="ordinary-night"))
            assert await superseded(rig, "ordinary-night") == []
            await facts.load()
            still = {f.id for f in facts.facts()}
            assert before <= still, f"facts lost on an ordinary night: {before - still}"

            # One change: exactly that fact is superseded, and the change names its message.
            [book_club] = [
                f for f in facts.facts() if f.subject == "book club" and f.session == "ordinary"
            ]
            at = at + timedelta(days=1)
            rig.clock.set(at)
            await rig.add_session(
                "change",
                [
                    ("user", "Morning! I prefer mornings for the garden."),
                    ("user", "Change of plan: the book club moves from Ghent to Bergen."),
                ],
                started=at,
                summarise=False,
            )
            rig.clock.set(at + timedelta(hours=19))
            await MiningPhase().run(rig.context(cycle_id="change-night"))
            [change] = await superseded(rig, "change-night")
            assert change.target == book_club.id
            assert change.after is not None
            assert change.after["changed_by"]["message_id"] == "change-m1"
            assert change.after["changed_by"]["session"] == "change"
            assert "message change-m1" in change.note
            await facts.load()
            assert facts.get(book_club.id).superseded_by == change.after["id"]
            assert still - {book_club.id} <= {f.id for f in facts.facts()}


def test_the_same_words_in_two_sessions_are_two_statements() -> None:
    """A backlog read in one night: "moves to Lyon" said on two days is said twice."""
    at = datetime(2026, 1, 5, 9, tzinfo=UTC)
    said = [
        ("s1", "Change of plan: the meetup moves from Porto to Lyon.", 0),
        ("s2", "The meetup is in Porto on 20 January.", 1),
        ("s3", "Change of plan: the meetup moves from Porto to Lyon.", 2),
        ("s3", "Change of plan: the meetup moves from Porto to Lyon.", 2),
    ]
    lines = [
        Line(session=s, id=f"{s}-{i}", ts=at + timedelta(days=d), role="user", origin="person",
             text=text)
        for i, (s, text, d) in enumerate(said)
    ]  # fmt: skip
    facts = mine_lines(lines, UTC)
    moves = [f for f in facts if f.kind == "change"]
    assert [(f.session, f.message_ids) for f in moves] == [
        ("s1", ("s1-0",)),
        ("s3", ("s3-2", "s3-3")),  # a repeat within one session is one statement
    ]


async def test_a_change_of_a_dated_occasion_retires_with_that_occasion(tmp_path: Path) -> None:
    """ "The meetup moves to Lyon" names no date: it is of the meetup it moved, and goes with it."""
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            said = [
                ("user", "The meetup is in Porto on 2026-01-20."),
                ("user", "Change of plan: the meetup moves from Porto to Lyon."),
                ("user", "The tasting is in Graz on 2026-03-30."),
            ]
            await rig.add_session("d1", said, started=START, summarise=False)
            await MiningPhase().run(rig.context(cycle_id="mine"))
            facts = rig.memory.facts
            [moved] = [f for f in facts.facts() if f.value == "Lyon"]
            assert facts.get(moved.supersedes or "").value == "Porto"
            rig.clock.set(START + timedelta(days=30))
            retired = await retire_stale(rig.context(cycle_id="upkeep"))
            assert [r["id"] for r in retired] == [moved.id]
            assert "2026-01-20 passed" in retired[0]["reason"]
            await facts.load()
            assert not facts.get(moved.id).active
            assert [f.value for f in facts.facts() if f.mined and f.subject] == ["Graz"]
