"""Continuity over a simulated month and a half, through the real daemon and the offline model.

The check of issue 22: a seeded scenario of ~45 days of a person's messages — facts said in
passing inside ordinary conversation, a few facts the person asks to keep (`remember that …`
in the chat, or `reverie remember` on the command line), people named once and referred to
later only by their relation or by what they did, plans that change (a value said, later
replaced), and a few long days that reach the compaction mark — is driven day by day through a
real daemon subprocess (`tests.harness.DaemonProcess` + `Client`, no key: the offline model),
with a sleep cycle (`reverie sleep --wait`) after each day. The daemon has no injectable clock,
so the days run back to back on real time: every message and every night carries today's date,
and the scenario's dates ("on 14 March") are written as absolute dates after the start.

After the last wake-up, the first turn's context is assembled with `reverie context --prompt P
--json` (the same assembler a turn runs; nothing has been said in the new session yet, so there
is no live conversation for it to skip) for:

- a neutral first message, "good morning" — what the always-on layers carry;
- one question per fact, asking for it the way a person would later (by relation, by what
  someone did, by the plan's subject) — automatic recall is per prompt, so a fact counts as
  held when the neutral context or its own question's context shows it.

A fact is *shown* in a context when one sentence of it holds the fact's value together with one
of its anchor words (the subject: "offsite", "ladder", "neighbour"), so a value that only
happens to occur elsewhere does not count. A superseded value is *alone* in a context when it is
shown there and the current value is not. The four numbers:

- `current_values`: share of all facts (said in passing or remembered) whose current value is
  held (target ≥ 0.95);
- `superseded_alone`: contexts × facts where an old value is shown without its current one
  (target 0);
- `remembered`: share of the facts the person asked to keep that are held (target 1.0);
- `passing`: share of the facts said in passing that are held (target ≥ 0.90);

and `tokens`: the largest context of the protocol against the default budget.

    nice -n 10 .venv/bin/python -m bench.continuity_sim                 # 45 days, seed 7
    nice -n 10 .venv/bin/python -m bench.continuity_sim --days 6 --seed 3 --keep /tmp/home
    nice -n 10 .venv/bin/python -m bench.continuity_sim --wording heldout   # same facts, other words

Three wordings say the same facts on the same days: `tuning` (the first, which the rules
were once fitted to), `heldout` (the set to tune on now) and `unseen` (written once, never
tuned on, its misses never read one by one: only its numbers are reported).

Prints one JSON object (and writes `bench/results/continuity_sim.json`); `--details` adds each
fact with where it was found or why it was missed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.harness import Client, DaemonProcess, daemon_env, run_cli  # noqa: E402

NEUTRAL_PROMPT = "good morning"
# Small enough that a long day reaches the compaction mark (agent.compaction_threshold of the
# window) and winds down on its own; the context's default budget (8,000) is left as shipped.
TRUNK_WINDOW = 12_000
DEFAULT_BUDGET = 8000

# --------------------------------------------------------------------------- the scenario

NAMES = [
    "Tomas",
    "Ines",
    "Marek",
    "Aiko",
    "Sunniva",
    "Delphine",
    "Rafael",
    "Oksana",
    "Birgit",
    "Kwame",
    "Lucinda",
    "Henrik",
    "Priya",
    "Zoltan",
    "Maren",
    "Ignacio",
    "Yusuf",
    "Carys",
    "Leopold",
    "Anouk",
    "Teodor",
    "Malin",
    "Bastian",
    "Wanjiru",
]
# (relation, what they did said the first time, how a later message refers to it, the question)
PEOPLE = [
    (
        "neighbour",
        "lent us his ladder",
        "I still have to give the ladder back",
        "who lent us the ladder?",
    ),
    (
        "physiotherapist",
        "sorted out my knee",
        "my knee is holding up since the physio sessions",
        "what's the name of my physiotherapist?",
    ),
    (
        "cousin",
        "is getting married in the spring",
        "I need a suit for my cousin's wedding",
        "which cousin of mine is getting married?",
    ),
    (
        "landlord",
        "finally fixed the leaking boiler",
        "the boiler has been fine since the repair",
        "who fixed the leaking boiler?",
    ),
    (
        "colleague",
        "took over the billing migration",
        "the billing migration is going well",
        "who took over the billing migration?",
    ),
    (
        "sister",
        "just started a pottery course",
        "the pottery course sounds like fun",
        "who started the pottery course?",
    ),
    (
        "old climbing partner",
        "is back in town from Chile",
        "we might go bouldering this week",
        "which friend is back from Chile?",
    ),
    (
        "accountant",
        "found the missing receipts for the tax return",
        "the tax return is almost done now",
        "who found the missing receipts?",
    ),
    (
        "daughter's teacher",
        "suggested extra reading at home",
        "the extra reading is going well",
        "what's the name of my daughter's teacher?",
    ),
    (
        "mechanic",
        "replaced the clutch on the van",
        "the van drives like new",
        "who replaced the clutch on the van?",
    ),
]

CITIES = [
    "Bergen",
    "Kotor",
    "Ljubljana",
    "Tallinn",
    "Porto",
    "Gdansk",
    "Valencia",
    "Trieste",
    "Aarhus",
    "Bruges",
    "Lucerne",
    "Split",
]
COLOURS = ["terracotta", "sage green", "ochre", "dusty blue", "charcoal", "mustard", "lilac"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
BOOKS = [
    "Piranesi",
    "Middlemarch",
    "Station Eleven",
    "The Overstory",
    "Klara and the Sun",
    "Stoner",
    "The Remains of the Day",
]
RESTAURANTS = ["Bistro Ela", "Nomad", "Casa Lupo", "The Gannet", "Sora", "Brasserie Vaucluse"]
CODENAMES = ["Heron", "Juniper", "Basalt", "Kestrel", "Marigold", "Quarry"]
RACES = ["Lisbon", "Berlin", "Valencia", "Copenhagen", "Prague"]
INSTRUMENTS = ["cello", "banjo", "ukulele", "clarinet", "harmonica"]


@dataclass(frozen=True)
class Attribute:
    """A plan, a preference or a circumstance: one subject with a value that may change."""

    key: str
    anchors: tuple[str, ...]
    pool: tuple[str, ...]
    said: tuple[str, ...]  # "{v}" the value
    changed: tuple[str, ...]  # "{old}" and "{v}"
    question: str


ATTRIBUTES = [
    Attribute(
        "offsite",
        ("offsite",),
        tuple(CITIES),
        ("the team offsite is in {v} this year", "they told us the offsite will be in {v}"),
        (
            "change of plan: the offsite moves from {old} to {v}",
            "the offsite is now in {v}, not {old}",
        ),
        "where is the team offsite?",
    ),
    Attribute(
        "gym",
        ("gym",),
        tuple(WEEKDAYS),
        ("my gym day is {v} now", "I go to the gym on {v} evenings"),
        ("I moved my gym day from {old} to {v}", "my gym day is {v} now instead of {old}"),
        "which day do I go to the gym?",
    ),
    Attribute(
        "book",
        ("book club",),
        tuple(BOOKS),
        ("for book club we're reading {v}", "the book club picked {v} for this round"),
        (
            "book club switched from {old} to {v}",
            "book club changed its pick to {v} instead of {old}",
        ),
        "what are we reading for book club?",
    ),
    Attribute(
        "nursery",
        ("nursery",),
        tuple(COLOURS),
        ("we picked {v} for the nursery walls", "the nursery walls are going to be {v}"),
        (
            "we changed the nursery walls from {old} to {v}",
            "the nursery will be {v} after all, not {old}",
        ),
        "what colour are the nursery walls going to be?",
    ),
    Attribute(
        "dinner",
        ("anniversary",),
        tuple(RESTAURANTS),
        ("our anniversary dinner is booked at {v}", "I booked {v} for our anniversary dinner"),
        (
            "the anniversary dinner moved from {old} to {v}",
            "we cancelled {old} and the anniversary dinner is at {v} now",
        ),
        "where is our anniversary dinner?",
    ),
    Attribute(
        "codename",
        ("codename", "project"),
        tuple(CODENAMES),
        ("the new project's codename is {v}", "the project got its codename, {v}"),
        (
            "the project was renamed from {old} to {v}",
            "the project's codename is now {v} instead of {old}",
        ),
        "what is the new project's codename?",
    ),
    Attribute(
        "race",
        ("marathon",),
        tuple(RACES),
        ("I signed up for the {v} half marathon", "the half marathon I'm training for is {v}"),
        (
            "I switched from the {old} half marathon to {v}",
            "the half marathon is {v} now, not {old}",
        ),
        "which half marathon am I running?",
    ),
    Attribute(
        "instrument",
        ("lessons",),
        tuple(INSTRUMENTS),
        ("I started {v} lessons on weekends", "the weekend lessons are {v}"),
        (
            "I dropped the {old} and my lessons are {v} now",
            "my weekend lessons switched from {old} to {v}",
        ),
        "what instrument lessons am I taking?",
    ),
]

# A second set of wordings for the same facts, kept apart from the first: `--wording heldout`
# measured whether what reads the first set reads everyday English or only those sentences.
# The rules were fitted to the first set, so this one is the set to tune on now.
HELDOUT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "offsite": (
        ("we're doing the offsite in {v} this time", "{v} won the vote for the offsite"),
        (
            "scratch {old}, the offsite is going to {v}",
            "the offsite got relocated to {v} (it was {old})",
        ),
    ),
    "gym": (
        ("gym is on {v} for me these days", "{v} is my gym day"),
        (
            "the gym moves to {v} for me, {old} doesn't work any more",
            "from now on I hit the gym on {v}, no longer {old}",
        ),
    ),
    "book": (
        ("{v} is this month's book club read", "at book club we started on {v}"),
        (
            "book club dropped {old}; we're onto {v}",
            "turns out book club is doing {v} rather than {old}",
        ),
    ),
    "nursery": (
        ("the paint for the nursery arrived: {v}", "{v} it is for the nursery"),
        (
            "we went with {v} for the nursery, {old} looked wrong on the wall",
            "forget {old} for the nursery, it's {v}",
        ),
    ),
    "dinner": (
        ("got a table at {v} for the anniversary", "{v} has our anniversary reservation"),
        (
            "{old} cancelled on us, so the anniversary is at {v}",
            "we rebooked the anniversary at {v} instead of {old}",
        ),
    ),
    "codename": (
        ("we're calling the new project {v}", "{v} is the codename they chose for the project"),
        (
            "marketing vetoed {old}, the project codename is {v}",
            "the project goes by {v} from today, {old} is retired",
        ),
    ),
    "race": (
        ("{v} is the half marathon I'm aiming at", "registered for the half marathon in {v}"),
        (
            "I'm doing {v} for the half marathon, {old} sold out",
            "transferred my half marathon entry from {old} to {v}",
        ),
    ),
    "instrument": (
        ("weekend lessons: {v}, finally", "I'm learning the {v} at weekend lessons"),
        (
            "I gave up on {old}, weekend lessons are {v} from now on",
            "swapped {old} lessons for {v}",
        ),
    ),
    "flight": (
        ("Lisbon flight booked, {v}", "flying to Lisbon on {v}, the flight is booked"),
        (
            "the airline moved the Lisbon flight to {v} (was {old})",
            "Lisbon: the flight now leaves {v} rather than {old}",
        ),
    ),
}
# A third set, written once and never tuned on (`--wording unseen`): nobody reads its misses
# sentence by sentence; it is measured and reported beside the other two. Some changes name the
# value they replace, some do not.
UNSEEN: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "offsite": (
        ("the company retreat, our offsite, is happening in {v}", "offsite venue confirmed: {v}"),
        (
            "HR emailed that the offsite is in {v} now",
            "they ditched {old}: the offsite will take place in {v}",
        ),
    ),
    "gym": (
        ("I do my gym sessions on {v}", "{v} evenings are for the gym"),
        (
            "I can't make {old} anymore, so the gym is on {v} now",
            "my gym slot changed: it's {v} these days",
        ),
    ),
    "book": (
        ("book club chose {v} for this month", "our book club book right now is {v}"),
        (
            "book club voted {old} out and {v} in",
            "the book club is reading {v} next, we abandoned {old}",
        ),
    ),
    "nursery": (
        ("the nursery is being painted {v}", "we settled on {v} paint for the nursery"),
        (
            "the nursery walls ended up {v}",
            "we repainted the nursery in {v} because {old} was too dark",
        ),
    ),
    "dinner": (
        ("we have a reservation at {v} for our anniversary", "the anniversary meal is at {v}"),
        (
            "we moved our anniversary reservation over to {v}",
            "no more {old}, the anniversary dinner will be at {v}",
        ),
    ),
    "codename": (
        ("internally the project is called {v}", "the codename for the new project: {v}"),
        (
            "the project's been renamed, it's {v} now",
            "legal made us drop {old}, so the project codename became {v}",
        ),
    ),
    "race": (
        ("I entered the {v} half marathon", "my half marathon this season is {v}"),
        (
            "I'm running the {v} half marathon now instead",
            "I swapped the {old} half marathon for the one in {v}",
        ),
    ),
    "instrument": (
        ("I take {v} lessons on weekends", "weekends I have my {v} lessons"),
        (
            "I quit {old} and started {v} lessons at the weekend",
            "the weekend lessons are now for {v}",
        ),
    ),
    "flight": (
        ("my Lisbon flight is on {v}", "I'm on the Lisbon flight on {v}"),
        (
            "the Lisbon flight got rebooked for {v}",
            "they changed my Lisbon flight from {old} to {v}",
        ),
    ),
}
WORDINGS = ("tuning", "heldout", "unseen")


# The facts a person asks to keep: (anchors, text with {v}, value maker, question).
REMEMBERED = [
    (("garage",), "the garage door code is {v}", "digits4", "what is the garage door code?"),
    (("wifi",), "the guest wifi password is {v}", "password", "what's the guest wifi password?"),
    (
        ("passport",),
        "my passport number ends in {v}",
        "digits4",
        "what does my passport number end in?",
    ),
    (
        ("bike lock",),
        "the bike lock combination is {v}",
        "digits3",
        "what's the bike lock combination?",
    ),
    (
        ("insurance",),
        "the home insurance policy number is {v}",
        "policy",
        "what's the home insurance policy number?",
    ),
    (
        ("locker",),
        "my locker at the pool is number {v}",
        "digits2",
        "which locker is mine at the pool?",
    ),
]
WORDS = ["amber", "falcon", "willow", "copper", "meadow", "harbour", "lantern", "cobalt"]

FILLER = [
    "Work was hectic today, back-to-back meetings until six.",
    "I'm trying to write the quarterly report and the introduction keeps coming out flat.",
    "Can you suggest a simple dinner with whatever is left in the fridge?",
    "It rained all afternoon, so the walk got cut short.",
    "I've been sleeping badly this week and I feel it in the afternoons.",
    "The kids were wild at bedtime again.",
    "I finally cleared my inbox, which feels like a small miracle.",
    "How do I politely decline a meeting that has no agenda?",
    "The train was late both ways, so I listened to a podcast about soil.",
    "We spent the evening sorting out the cupboard under the stairs.",
    "I want to get better at saying no to side projects.",
    "Any ideas for a quick lunch I can prepare the night before?",
    "The heating makes a clicking noise at night, probably nothing.",
    "I read an article about urban beekeeping and now I'm curious.",
    "My back is stiff from sitting all day.",
    "Could you help me structure a short talk about onboarding?",
    "The supermarket had no eggs, of all things.",
    "I think I need a proper weekly review habit.",
    "We watched an old film tonight and it held up surprisingly well.",
    "Tomorrow is going to be another long one.",
]
LONG_FILLER = [
    "Let me think out loud about the roadmap for a moment. We have three streams competing for "
    "the same two people: the reporting rewrite, the mobile fixes and the data export that sales "
    "keeps asking about. Each one has a good argument, and each one slips if we split the team, "
    "so what I really need is a way to say which one waits without the others feeling ignored.",
    "About the kitchen: the quotes came back and they are all over the place. One includes the "
    "plumbing and the electrics, one leaves out the worktops, and the third is cheap but cannot "
    "start before the summer. I keep rereading them and comparing line by line, which is "
    "probably not the best use of an evening, but I want to understand what we are paying for.",
    "I spent an hour on the performance problem again. The slow page loads fine on my machine, "
    "times out for some customers, and the logs show nothing unusual except a burst of retries "
    "from one region. It might be the cache, it might be the third-party script, and I am "
    "starting to suspect the load balancer's health checks are part of it as well.",
    "Thinking about the weekend plans: the weather looks mixed, the kids want the swimming pool, "
    "and I would like at least one afternoon without screens. Maybe the morning at the pool, "
    "lunch at home, and a walk in the woods if it stays dry; if not, a board game and an early "
    "night sounds fine too, honestly.",
    "The hiring round is dragging. We saw six candidates, two were strong, one withdrew, and the "
    "other wants more than the band allows. I need to write up the case for stretching the band "
    "or reopening the search, and either way someone will be unhappy with the decision.",
]
OPENERS = ["Morning!", "Hi again.", "Evening.", "Quick one.", "Hey.", "Back again.", ""]
TAILS = ["Anyway.", "That's all for now.", "Right, back to it.", "Thoughts?", ""]


@dataclass
class Fact:
    """A fact of the ground truth: its current value and the values it replaced."""

    fid: str
    kind: str  # "passing" (said in passing) or "remembered" (the person asked to keep it)
    category: str  # person, plan, remembered
    anchors: tuple[str, ...]
    value: str
    superseded: list[str] = field(default_factory=list)
    question: str = ""
    said_on: list[int] = field(default_factory=list)


@dataclass
class Event:
    """One thing the person does on a day: a chat message, or `reverie remember TEXT`."""

    day: int
    text: str
    via: str = "chat"  # chat | cli
    fact: str = ""


@dataclass
class Scenario:
    seed: int
    days: int
    start: date
    facts: list[Fact]
    events: list[Event]
    long_days: list[int]

    def day_events(self, day: int) -> list[Event]:
        return [e for e in self.events if e.day == day]


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def _make_value(kind: str, rng: random.Random) -> str:
    if kind == "digits4":
        return str(rng.randint(1000, 9999))
    if kind == "digits3":
        return str(rng.randint(100, 999))
    if kind == "digits2":
        return str(rng.randint(11, 99))
    if kind == "password":
        return f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{rng.randint(10, 99)}"
    return f"HX-{rng.randint(100000, 999999)}"


def generate(
    seed: int = 7, days: int = 45, start: date | None = None, wording: str = "tuning"
) -> Scenario:
    """A deterministic scenario for (seed, days, start, wording); the counts of each kind scale
    with days. The wording changes how facts are said, never which facts or when."""
    if wording not in WORDINGS:
        raise ValueError(f"wording must be one of {WORDINGS}, not {wording!r}")
    heldout = wording != "tuning"
    other_forms = UNSEEN if wording == "unseen" else HELDOUT
    rng = random.Random(seed)
    start = start or datetime.now(UTC).date()
    scale = days / 45
    n_people = max(2, round(len(PEOPLE) * scale))
    n_attrs = max(2, round((len(ATTRIBUTES) + 1) * scale))
    n_remembered = max(2, round(len(REMEMBERED) * scale))
    long_days = sorted(rng.sample(range(2, days), k=max(1, days // 11))) if days > 3 else []
    facts: list[Fact] = []
    events: list[Event] = []

    # Ordinary days carry a few facts; most messages carry none.
    def intro_day() -> int:
        return rng.randrange(0, max(1, days - 2))

    names = rng.sample(NAMES, n_people)
    for i, (relation, deed, later, question) in enumerate(rng.sample(PEOPLE, n_people)):
        name = names[i]
        fact = Fact(
            f"person-{i}",
            "passing",
            "person",
            (relation.split()[-1], *_deed_anchors(deed)),
            name,
            question=question,
        )
        day = intro_day()
        said = rng.choice(
            [f"{name} (my {relation}) {deed}", f"my {relation}, {name}, {deed}"]
            if wording == "unseen"
            else [
                f"{name}, who is my {relation}, {deed}",
                f"it was {name}, my {relation}, who {deed}",
            ]
            if heldout
            else [f"my {relation} {name} {deed}", f"{name}, my {relation}, {deed}"]
        )
        events.append(Event(day, said, fact=fact.fid))
        fact.said_on.append(day)
        # Referred to later by relation or deed only, once or twice, never by name.
        for _ in range(rng.randint(1, 2)):
            if day + 1 < days:
                events.append(Event(rng.randrange(day + 1, days), later))
        facts.append(fact)

    # A dated plan: absolute dates after the start, as the days run on real time.
    dates = [(start + timedelta(days=days + k)).strftime("%-d %B") for k in range(10, 70, 7)]
    flight = Attribute(
        "flight",
        ("flight",),
        tuple(dates),
        ("my flight to Lisbon is on {v}", "I booked the Lisbon flight for {v}"),
        (
            "my flight to Lisbon moved from {old} to {v}",
            "the Lisbon flight is on {v} now, not {old}",
        ),
        "when is my flight to Lisbon?",
    )
    for attr in rng.sample([*ATTRIBUTES, flight], n_attrs):
        values = rng.sample(attr.pool, 3)
        changes = rng.choice([0, 1, 1, 2]) if days >= 4 else 1
        day = rng.randrange(0, max(1, days // 2))
        fact = Fact(
            f"{attr.key}", "passing", "plan", attr.anchors, values[0], question=attr.question
        )
        said_forms, changed_forms = other_forms[attr.key] if heldout else (attr.said, attr.changed)
        events.append(Event(day, rng.choice(said_forms).format(v=values[0]), fact=fact.fid))
        fact.said_on.append(day)
        for c in range(changes):
            if day + 1 >= days:
                break
            day = rng.randrange(day + 1, min(days, day + 1 + max(2, days // 3)))
            old, new = fact.value, values[c + 1]
            events.append(
                Event(day, rng.choice(changed_forms).format(old=old, v=new), fact=fact.fid)
            )
            fact.superseded.append(old)
            fact.value = new
            fact.said_on.append(day)
        facts.append(fact)

    for i, (anchors, text, maker, question) in enumerate(rng.sample(REMEMBERED, n_remembered)):
        value = _make_value(maker, rng)
        day = intro_day()
        via = "cli" if i % 2 else "chat"
        fact = Fact(
            f"remembered-{i}", "remembered", "remembered", anchors, value, question=question
        )
        body = text.format(v=value)
        ask = {"tuning": "remember that", "heldout": "don't forget that"}.get(
            wording, "please keep in mind that"
        )
        events.append(Event(day, body if via == "cli" else f"{ask} {body}", via, fact.fid))
        fact.said_on.append(day)
        if i == 0 and day + 2 < days:
            # A remembered value the person updates later, the same way they told it.
            new = _make_value(maker, rng)
            while new == value:
                new = _make_value(maker, rng)
            update_day = rng.randrange(day + 1, days)
            updated = text.format(v=new)
            updated = (
                updated.replace(" is ", " is now ", 1)
                if " is " in updated
                else f"actually {updated}"
            )
            events.append(
                Event(
                    update_day,
                    updated if via == "cli" else f"{ask} {updated}",
                    via,
                    fact.fid,
                )
            )
            fact.superseded.append(value)
            fact.value = new
            fact.said_on.append(update_day)
        facts.append(fact)

    events.sort(key=lambda e: e.day)
    return Scenario(seed, days, start, facts, events, long_days)


def _deed_anchors(deed: str) -> tuple[str, ...]:
    words = [w for w in re.findall(r"[a-z]+", deed.lower()) if len(w) > 4]
    return tuple(words[-2:])


def day_messages(scenario: Scenario, day: int, rng: random.Random) -> list[Event]:
    """The day as the person lives it: fact events wrapped in ordinary conversation."""
    out: list[Event] = []
    facts = scenario.day_events(day)
    long_day = day in scenario.long_days
    n = max(len(facts), rng.randint(36, 44) if long_day else rng.randint(3, 6))
    slots = sorted(rng.sample(range(n), k=len(facts)))
    pending = dict(zip(slots, facts, strict=False))
    for i in range(n):
        event = pending.get(i)
        if event is not None and (event.via == "cli" or event.text.startswith("remember that")):
            out.append(event)
            continue
        parts = [rng.choice(OPENERS), rng.choice(LONG_FILLER if long_day else FILLER)]
        if event is not None:
            # Said in passing: the fact sits between ordinary sentences.
            parts.insert(rng.randint(1, 2), _sentence(event.text))
        parts.append(rng.choice(FILLER) if long_day or rng.random() < 0.5 else rng.choice(TAILS))
        out.append(Event(day, " ".join(p for p in parts if p), "chat", event.fact if event else ""))
    return out


# --------------------------------------------------------------------------- the daemon run

CONFIG = f"""
[models.trunk]
context_window = {TRUNK_WINDOW}
"""


def _sleep(home: Path, log: list[str]) -> None:
    """One night: `reverie sleep --wait`; when a wind-down cycle is still running, wait for it."""
    for _ in range(120):
        out = run_cli("sleep", "--wait", "--home", str(home), timeout=600)
        if out.returncode == 0:
            log.append(out.stdout.splitlines()[0] if out.stdout else "")
            return
        if "busy" not in (out.stdout + out.stderr):
            raise RuntimeError(f"reverie sleep failed: {out.stdout}\n{out.stderr}")
        time.sleep(0.5)
    raise RuntimeError("the daemon stayed busy for a minute; no night could start")


def live(scenario: Scenario, home: Path, *, progress: bool = False) -> dict[str, Any]:
    """Drive every day of the scenario through a real daemon, a sleep cycle after each."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "reverie.toml").write_text(CONFIG)
    rng = random.Random(scenario.seed * 7919 + 1)
    nights: list[str] = []
    turns = 0
    daemon = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        for day in range(scenario.days):
            with Client(daemon.socket_path, timeout=600) as client:
                client.hello()
                for event in day_messages(scenario, day, rng):
                    if event.via == "cli":
                        out = run_cli("remember", event.text, "--home", str(home))
                        if out.returncode != 0:
                            raise RuntimeError(f"reverie remember failed: {out.stderr}")
                        continue
                    _, frames = client.chat(event.text)
                    if frames[-1]["type"] != "done":
                        raise RuntimeError(f"day {day}: the turn failed: {frames[-1]}")
                    turns += 1
            _sleep(home, nights)
            if progress:
                print(f"day {day + 1}/{scenario.days}: {turns} turns", file=sys.stderr)
        cycles = [e for e in daemon.log_events() if e.get("event") == "sleep cycle finished"]
        reasons: dict[str, int] = {}
        for e in cycles:
            reasons[str(e.get("reason", "?"))] = reasons.get(str(e.get("reason", "?")), 0) + 1
        return {"turns": turns, "nights": len(nights), "cycles": len(cycles), "reasons": reasons}
    finally:
        daemon.stop()


# --------------------------------------------------------------------------- the measurement

_SPLIT = re.compile(r"(?<=[.!?;])\s+|\n+")


def sentences(text: str) -> list[str]:
    return [s.lower() for s in _SPLIT.split(text) if s.strip()]


def _has(sentence: str, words: str) -> bool:
    return (
        re.search(r"(?<![a-z0-9])" + re.escape(words.lower()) + r"(?![a-z0-9])", sentence)
        is not None
    )


def shown(text_sentences: list[str], anchors: tuple[str, ...], value: str) -> bool:
    """The value and one of its anchors in one sentence of the context."""
    return any(_has(s, value) and any(_has(s, a) for a in anchors) for s in text_sentences)


def assemble(home: Path, prompt: str) -> dict[str, Any]:
    """`reverie context --prompt PROMPT --json` on the home (read-only, daemon running or not)."""
    out = run_cli("context", "--prompt", prompt, "--json", "--home", str(home), timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"reverie context failed: {out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _found_in(context: dict[str, Any], fact: Fact, value: str) -> list[str]:
    return [
        b["layer"] for b in context["blocks"] if shown(sentences(b["text"]), fact.anchors, value)
    ]


def _stated_as_current(context: dict[str, Any], fact: Fact, old: str) -> bool:
    """An old value in a sentence of its own ("the code is 163"), not in the sentence of the
    change ("moved from Nomad to Brasserie Vaucluse"), which says that it changed."""
    return any(
        shown([s], fact.anchors, old) and not _has(s, fact.value)
        for b in context["blocks"]
        for s in sentences(b["text"])
    )


def measure(scenario: Scenario, home: Path) -> dict[str, Any]:
    """The first turn after the last wake-up: neutral and per-fact contexts against the truth."""
    neutral = assemble(home, NEUTRAL_PROMPT)
    contexts = {NEUTRAL_PROMPT: neutral}
    for fact in scenario.facts:
        contexts.setdefault(fact.question, assemble(home, fact.question))
    rows: list[dict[str, Any]] = []
    alone = side_by_side = 0
    for fact in scenario.facts:
        own = contexts[fact.question]
        in_neutral = _found_in(neutral, fact, fact.value)
        in_question = _found_in(own, fact, fact.value)
        stale: list[dict[str, str]] = []
        # An old value stated as if current while the current one is shown too: allowed by
        # the check, but the context then holds two answers.
        beside: list[dict[str, str]] = []
        for prompt in sorted({NEUTRAL_PROMPT, fact.question}):
            ctx = contexts[prompt]
            current = bool(_found_in(ctx, fact, fact.value))
            for old in fact.superseded:
                if not current and _found_in(ctx, fact, old):
                    stale.append({"prompt": prompt, "old": old})
                elif current and _stated_as_current(ctx, fact, old):
                    beside.append({"prompt": prompt, "old": old})
        alone += len(stale)
        side_by_side += len(beside)
        rows.append(
            {
                "fact": fact.fid,
                "kind": fact.kind,
                "category": fact.category,
                "value": fact.value,
                "superseded": fact.superseded,
                "said_on": fact.said_on,
                "question": fact.question,
                "held": bool(in_neutral or in_question),
                "neutral_layers": in_neutral,
                "question_layers": in_question,
                "superseded_alone": stale,
                "superseded_beside_current": beside,
            }
        )

    def share(kind: str | None) -> float | None:
        group = [r for r in rows if kind is None or r["kind"] == kind]
        return round(sum(r["held"] for r in group) / len(group), 3) if group else None

    tokens = {p: c["total_tokens"] for p, c in contexts.items()}
    return {
        "current_values": share(None),
        "superseded_alone": alone,
        "superseded_beside_current": side_by_side,
        "remembered": share("remembered"),
        "passing": share("passing"),
        "tokens": {
            "max": max(tokens.values()),
            "neutral": neutral["total_tokens"],
            "budget": neutral["budget"],
            "default_budget": DEFAULT_BUDGET,
        },
        "by_category": {
            cat: round(
                sum(r["held"] for r in rows if r["category"] == cat)
                / max(1, sum(1 for r in rows if r["category"] == cat)),
                3,
            )
            for cat in sorted({r["category"] for r in rows})
        },
        "in_neutral_context": round(sum(bool(r["neutral_layers"]) for r in rows) / len(rows), 3),
        "facts": len(rows),
        "changed": sum(1 for r in rows if r["superseded"]),
        "rows": rows,
    }


def stored_facts(home: Path) -> list[dict[str, Any]]:
    """The fact store as `reverie memory facts --all --json` shows it (for diagnosing misses)."""
    out = run_cli("memory", "facts", "--all", "--json", "--home", str(home), timeout=120)
    if out.returncode != 0:
        return []
    try:
        data = json.loads(out.stdout)
    except json.JSONDecodeError:
        return []
    return data if isinstance(data, list) else []


def diagnose(scenario: Scenario, result: dict[str, Any], home: Path) -> None:
    """For each missed fact: is its value in the fact store at all (and current there)?"""
    facts = stored_facts(home)
    by_id = {f.fid: f for f in scenario.facts}
    for row in result["rows"]:
        if row["held"] and not row["superseded_alone"]:
            continue
        fact = by_id[row["fact"]]
        hits = [
            {k: f.get(k) for k in ("id", "text", "status", "origin", "mined") if k in f}
            for f in facts
            if shown(sentences(str(f.get("text", ""))), fact.anchors, fact.value)
        ]
        row["in_fact_store"] = hits


def daemon_first_turn(home: Path) -> dict[str, Any]:
    """The neutral first message sent for real after the measurement: the daemon's own record
    of that turn's context (`reverie status --json`), a cross-check of the assembled size."""
    days_log = home.parent / "daemon-0.log"
    if days_log.exists():
        days_log.rename(home.parent / "daemon-days.log")  # the harness names each run's log -0
    daemon = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(daemon.socket_path, timeout=120) as client:
            client.hello()
            _, frames = client.chat(NEUTRAL_PROMPT)
        status = json.loads(run_cli("status", "--json", "--home", str(home)).stdout)
    finally:
        daemon.stop()
    last = status.get("context", {}).get("last_turn") or {}
    return {"done": frames[-1]["type"] == "done", "context_tokens": last.get("context_tokens")}


def run(
    days: int,
    seed: int,
    start: date | None,
    keep: Path | None,
    progress: bool,
    wording: str = "tuning",
) -> dict[str, Any]:
    scenario = generate(seed, days, start, wording)
    root = keep or Path(tempfile.mkdtemp(prefix="continuity-"))
    if keep and root.exists():
        shutil.rmtree(root)
    home = root / "home"
    t0 = time.monotonic()
    try:
        lived = live(scenario, home, progress=progress)
        result = measure(scenario, home)
        diagnose(scenario, result, home)
        result["daemon_first_turn"] = daemon_first_turn(home)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return {
        "days": days,
        "seed": seed,
        "wording": wording,
        "start": scenario.start.isoformat(),
        "clock": "real (no injectable daemon clock): days back to back, `reverie sleep` nightly",
        "long_days": [d + 1 for d in scenario.long_days],
        **lived,
        **result,
        "wall_s": round(time.monotonic() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--days", type=int, default=45)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--start",
        type=date.fromisoformat,
        default=None,
        help="the scenario's first day (default today: the daemon runs on real time)",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the home in this directory")
    p.add_argument(
        "--wording",
        choices=WORDINGS,
        default="tuning",
        help="how facts are said: the first set, the one to tune on (heldout), or the one "
        "never tuned on (unseen)",
    )
    p.add_argument("--details", action="store_true", help="each fact: where found or missed")
    p.add_argument("--quiet", action="store_true", help="no per-day progress on stderr")
    args = p.parse_args(argv)
    out = run(args.days, args.seed, args.start, args.keep, not args.quiet, args.wording)
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "continuity_sim.json").write_text(json.dumps(out, indent=2, ensure_ascii=False))
    if not args.details:
        out = {**out, "rows": [r for r in out["rows"] if not r["held"] or r["superseded_alone"]]}
        out["missed"] = out.pop("rows")
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
