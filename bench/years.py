"""Continuity over three years, through the real daemon on a faked clock (libfaketime).

The check of issue 34: a seeded life of 1,000+ calendar days — about eighty days of talk spread
across three years, the daemon off for days or weeks between them — is driven through a real
daemon subprocess (`tests.harness.DaemonProcess` + `Client`, the offline model) whose clock is
Debian's libfaketime (`LD_PRELOAD` + `FAKETIME="@YYYY-MM-DD HH:MM:SS"`: the daemon starts at
that instant and its clock then runs on in real time). Each talk day the daemon is started on
that day's morning; a nightly run missed while it was off is caught up (once) at that start and
waited for; the day's messages are sent over the socket (and `reverie remember` on the command
line); some days end with `reverie sleep --wait` (standing for the night), some long days reach
the compaction mark and wind down by themselves, some nights the daemon is "left on": started
again at 03:29:50 the next morning so the nightly job fires on its own; the rest are caught up
at the next start, days or weeks later.

What the life holds (all wordings and values drawn from a seed; questions never reuse the
telling's words for what they ask about):

- `said`: facts said in passing inside a longer message about something else, asked later in
  other words ("my sister Ada moved to Lisbon" → "which city is my sister in these days?");
- `person`: people named once and asked about later by what they did ("who was it that fixed
  my bike?"), referred to in between by the deed alone, never by name;
- `plan`: plans that change months later (asked for the current plan; an old value shown
  without the current one counts as *superseded alone*);
- `remembered`: things the person asks to keep (in the chat, or `reverie remember`), one of
  them updated later;
- `two_hop`: a person's relation said one day, a property of that person (by name only) said
  on another; asked by relation ("what does my brother-in-law do for a living?") — held only
  when one context shows both the relation and the property.

At months 1, 6, 12, 24 and 36 (the checkpoint's morning: started, caught up, stopped) the first
turn's context is assembled as `reverie context --prompt Q --json` does (the CLI's own code,
run in one process under the same faked clock) for a neutral "good morning" and for every
question due (facts told before the checkpoint). A fact is *held* when the neutral context or
its question's context shows its current value in one sentence with one of its anchor words;
*superseded alone* counts contexts where an old value is shown so and the current one is not.
Per checkpoint also: the nightly cycles' wall time (`sleep_cycles`), model calls and tokens of
those cycles (the usage ledger), memory counts (`reverie memory stats --json`) and the
first-turn context's tokens against its budget.

    nice -n 10 .venv/bin/python -m bench.years                 # 1,100 days, seed 11
    nice -n 10 .venv/bin/python -m bench.years --quick         # 200 days, months 1 and 6
    nice -n 10 .venv/bin/python -m bench.years --seed 5 --keep /tmp/years --details

Needs libfaketime: `apt-get install faketime` (Debian/Ubuntu). Prints a table and one JSON
object (also `bench/results/years.json`). With `--keep DIR` the home is `DIR/home`, and each
checkpoint's home is copied to `DIR/month-M` as it was measured, so another tree's code can
assemble the same questions on it (`python -m bench.years --assemble DIR/month-M`, prompts as
a JSON list on stdin, under the checkpoint's FAKETIME).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.continuity_sim import sentences, shown  # noqa: E402
from tests.harness import Client, DaemonProcess, daemon_env, run_cli  # noqa: E402

FAKETIME_LIBS = (
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/faketime/libfaketime.so.1"),
    Path("/usr/local/lib/faketime/libfaketime.so.1"),
)
NEUTRAL = "good morning"
TRUNK_WINDOW = 12_000  # small enough that a long day reaches the compaction mark
CHECKPOINT_MONTHS = (1, 6, 12, 24, 36)
KINDS = ("said", "person", "plan", "remembered", "two_hop")

CONFIG = f"""
[models.trunk]
context_window = {TRUNK_WINDOW}

[scheduler]
timezone = "UTC"
nightly_sleep = "03:30"

[sleep]
jitter_minutes = 0.0
"""

# --------------------------------------------------------------------------- the life's words

NAMES = [
    "Ada", "Bruno", "Céline", "Dmitri", "Elif", "Fergus", "Greta", "Hamid", "Ingrid", "Jonas",
    "Katja", "Luca", "Mireille", "Nikolai", "Odile", "Pavel", "Quentin", "Rosalind", "Sanne",
    "Tobias", "Ulla", "Viggo", "Wenona", "Xavier", "Yara", "Zeno", "Alvar", "Beatriz", "Cosimo",
    "Dagny", "Emrys", "Florin", "Gudrun", "Hollis", "Isolde", "Jarek",
]  # fmt: skip

# (key, anchors, values, tellings with {v} (and {n}: a name), questions)
SAID = [
    ("sister", ("sister",), ["Lisbon", "Tromsø", "Valparaíso", "Leipzig", "Galway", "Nantes"],
     ["my sister {n} moved to {v} in the spring", "{n}, my sister, has been living in {v} since the move"],
     ["which city is my sister in these days?", "where does my sister live now?"]),
    ("dog", ("dog", "puppy"), ["Pepper", "Biscuit", "Juno", "Waffles", "Clementine", "Ziggy"],
     ["we adopted a dog at last and she's called {v}", "the new puppy's name is {v}"],
     ["what did we name our dog?", "remind me what our pet is called"]),
    ("blood", ("blood",), ["O negative", "AB positive", "B negative", "A positive"],
     ["the clinic finally told me my blood type is {v}", "turns out my blood group is {v}"],
     ["do you know my blood type?", "which blood group am I?"]),
    ("allergy", ("allergic", "allergy", "allergist"), ["hazelnuts", "penicillin", "shellfish", "birch pollen", "latex"],
     ["the allergist confirmed I'm allergic to {v}", "so it's {v} I'm allergic to, apparently"],
     ["is there anything I react badly to?", "what did the allergy tests find?"]),
    ("language", ("learning", "studying", "lessons"), ["Japanese", "Portuguese", "Finnish", "Welsh", "Turkish"],
     ["I've started learning {v} on the commute", "my evening lessons are in {v} now, I'm studying it properly"],
     ["which language have I been picking up?", "what am I studying in the evenings?"]),
    ("car", ("car",), ["Skoda Octavia", "Volvo V60", "Renault Zoe", "Mazda 3", "Kia Niro"],
     ["we traded the old car for a {v}", "the new family car is a {v}"],
     ["what are we driving these days?", "which model did we buy when we replaced the old one?"]),
    ("school", ("school",), ["Greenhill Primary", "St Brigid's", "Elmwood Academy", "Riverside Montessori"],
     ["our son starts at {v} school in September", "we got the letter: the boy goes to {v} school from autumn"],
     ["where does our son go to school?", "which school did the boy get into?"]),
    ("employer", ("job", "offer", "work", "working"), ["Halvorsen Logistics", "Brightwater Labs", "Quillmate", "Northgate Energy"],
     ["I accepted the job offer from {v}", "from next month I'm working at {v}"],
     ["who's my employer now?", "which company did I join?"]),
    ("choir", ("choir",), ["Tuesday", "Wednesday", "Thursday"],
     ["I joined a choir that rehearses on {v} evenings", "choir practice is every {v} night now"],
     ["when do I have choir?", "what evening do I go singing?"]),
    ("tea", ("tea",), ["lapsang souchong", "genmaicha", "rooibos", "earl grey"],
     ["honestly my favourite tea lately is {v}", "I've gone through a whole tin of {v} tea this month"],
     ["what should I brew if I want my usual cuppa?", "which tea do I like best?"]),
]  # fmt: skip

# (anchors, what they did, a later mention by the deed alone, questions)
PEOPLE = [
    (("bike",), "fixed my bike when the gears jammed", "the bike has been shifting perfectly since the repair",
     ["who was it that fixed my bike?", "the person who repaired my bicycle, what was their name?"]),
    (("piano",), "helped us carry the piano up three floors", "the piano is still slightly out of tune after the move",
     ["who helped us move the piano?", "name of the one who carried the piano with us?"]),
    (("sourdough",), "taught me how to bake sourdough", "my sourdough starter is still alive",
     ["who showed me how to make sourdough?", "who was my bread-baking teacher?"]),
    (("tent",), "lent me the tent for the festival", "I must return that tent before summer",
     ["who lent me the tent?", "whose tent did I borrow for the festival?"]),
    (("wallet",), "found my lost wallet at the station", "I still can't believe the wallet turned up",
     ["who found my wallet when I lost it?", "remind me who returned my lost wallet"]),
    (("invitations",), "designed our wedding invitations", "people still mention the invitations",
     ["who designed the invitations for our wedding?", "which friend made our wedding invitations?"]),
    (("airport",), "drove me to the airport at four in the morning", "I owe a favour for that airport run",
     ["who gave me a lift to the airport that early morning?", "who drove me to the airport?"]),
    (("cat",), "looked after our cat in August", "the cat clearly missed her August sitter",
     ["who cat-sat for us in August?", "who looked after the cat when we were away?"]),
    (("thesis",), "proofread my thesis", "the thesis corrections were spot on",
     ["who proofread my thesis?", "who checked my thesis for mistakes?"]),
    (("roof",), "repaired the leaking roof", "no drips since the roof repair",
     ["who fixed the leak in our roof?", "the roofer who stopped the leak, what's their name?"]),
    (("chess",), "beat me at chess three times in a row", "I've been practising chess openings since that humiliation",
     ["who keeps beating me at chess?", "who was my chess nemesis?"]),
    (("garden", "hedge"), "trimmed the hedge while we were away", "the garden looks tidy since the hedge was cut",
     ["who trimmed our hedge?", "who did the hedge trimming for us?"]),
]  # fmt: skip
RELATIONS = ["a friend from the running club", "my neighbour", "a colleague", "my old flatmate",
             "a cousin of mine", "a friend of a friend", "the guy from the allotment", "my brother's friend"]  # fmt: skip

# (key, anchors, values, tellings {v}, changes {old} {v}, questions)
PLANS = [
    ("holiday", ("holiday",), ["Crete", "Sardinia", "the Azores", "Lofoten", "Madeira", "Sicily"],
     ["we're booking the summer holiday in {v}", "this year's holiday will be {v}, we decided"],
     ["change of plan, the holiday is {v} now, {old} fell through", "we cancelled {old}; the holiday goes to {v} instead"],
     ["where are we going on our summer trip?", "what's the destination for our vacation?"]),
    ("marathon", ("marathon",), ["Rotterdam", "Vienna", "Seville", "Dublin", "Munich"],
     ["I signed up for the {v} marathon", "the marathon I'm training for is {v}"],
     ["I switched to the {v} marathon instead of {old}", "no more {old}, my marathon is {v} now"],
     ["which race am I training for?", "where is my big 42k run going to be?"]),
    ("flat", ("flat", "flats", "neighbourhood"), ["Vesterbro", "Kreuzberg", "Ruskeala", "Leith", "Grünerløkka"],
     ["we're looking at flats in {v}", "the plan is to buy a flat in {v}"],
     ["we gave up on {old}, now we're looking at flats in {v}", "forget {old}, the flat hunt moved to {v}"],
     ["which area are we house-hunting in?", "where are we hoping to buy a place?"]),
    ("bookclub", ("book club",), ["Middlemarch", "Piranesi", "Stoner", "The Overstory", "Beloved", "Lanny"],
     ["the book club is reading {v} next", "next up for book club: {v}"],
     ["book club dropped {old} and picked {v}", "the book club switched to {v}, {old} was too long"],
     ["what's the next read for my reading group?", "which novel are we discussing at the next club meeting?"]),
    ("kitchen", ("kitchen",), ["Nordbygg", "Calloway & Sons", "Hearth Works", "Ferro Kitchens"],
     ["we chose {v} for the kitchen renovation", "the kitchen will be done by {v}"],
     ["we fired {old}, the kitchen job goes to {v}", "{v} took over the kitchen from {old}"],
     ["who's renovating our cooking space?", "which firm is doing the renovation at home?"]),
    ("instrument", ("lessons", "instrument"), ["cello", "banjo", "clarinet", "accordion", "harp"],
     ["our daughter wants {v} lessons this year", "we signed our daughter up for {v} lessons"],
     ["our daughter quit {old} and wants {v} lessons now", "the lessons switched from {old} to {v}"],
     ["what is our daughter learning to play?", "which instrument does our girl practise?"]),
    ("christmas", ("christmas",), ["Oslo", "Bologna", "Edinburgh", "Kraków", "Lyon"],
     ["we'll spend Christmas in {v} with the in-laws", "Christmas this year is in {v}"],
     ["Christmas moved from {old} to {v}", "we're doing Christmas in {v} now, not {old}"],
     ["where will we be for the holidays in December?", "where are we celebrating the end of the year?"]),
    ("offsite", ("offsite",), ["Bruges", "Tallinn", "Ghent", "Porto", "Annecy"],
     ["the team offsite will be in {v}", "work's offsite is going to {v}"],
     ["they moved the offsite from {old} to {v}", "the offsite is in {v} now, {old} got cancelled"],
     ["where is the work retreat happening?", "which city is the company trip to?"]),
]  # fmt: skip

# (key, anchors, text {v}, value kind, questions)
KEEP = [
    ("storage", ("storage",), "the storage unit code is {v}", "digits4",
     ["what's the number to open our storage unit?", "I'm at the storage place, what do I type in?"]),
    ("wifi", ("wifi",), "the guest wifi password is {v}", "password",
     ["what do visitors use to get online here?", "a friend wants the wifi password for guests, what is it?"]),
    ("locker", ("locker",), "my locker at the climbing gym is number {v}", "digits2",
     ["which locker did I get at the gym?", "what's my gym locker number?"]),
    ("passport", ("passport",), "my passport expires on {v}", "date",
     ["when do I need to renew my passport?", "what's the expiry of my travel document?"]),
    ("policy", ("policy",), "the car insurance policy number is {v}", "policy",
     ["what's our motor insurance reference?", "I need the policy number for the car cover"]),
    ("alarm", ("alarm",), "the house alarm code is {v}", "digits4",
     ["how do I switch off the burglar alarm?", "what's the code for the alarm at home?"]),
    ("doctor", ("doctor", "GP"), "my GP is Dr {v}", "surname",
     ["who's my family doctor?", "what's the name of my GP?"]),
]  # fmt: skip
KEEP_ASKS = ["remember that {t}", "please keep this for me: {t}", "note for later, {t}"]
SURNAMES = ["Okafor", "Lindqvist", "Moreau", "Hashemi", "Kowalczyk", "Brennan", "Takeda"]

# (relations, property key, anchors-free property telling {n} {v}, values, question by relation)
TWO_HOP_REL = [
    "brother-in-law",
    "godmother",
    "stepfather",
    "niece",
    "best friend from school",
    "aunt",
]
TWO_HOP_PROP = [
    ("job", ["vet", "harbour pilot", "sound engineer", "pharmacist", "tax inspector"],
     ["{n} just started working as a {v}", "{n} finally qualified as a {v}"],
     "what does my {r} do for a living?"),
    ("town", ["Bergamo", "Aberdeen", "Tartu", "Granada", "Utrecht"],
     ["{n} bought a house in {v}", "{n} has settled down in {v} for good"],
     "where did my {r} settle?"),
    ("sport", ["fencing", "curling", "water polo", "orienteering", "archery"],
     ["{n} is obsessed with {v} these days", "{n} took up {v} and competes now"],
     "what sport does my {r} do?"),
]  # fmt: skip
TWO_HOP_INTRO = ["my {r} {n} came over for dinner", "{n}, my {r}, called this afternoon",
                 "had coffee with {n}, my {r}"]  # fmt: skip

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
    "I'm trying to get better at weekly reviews.",
    "We spent the evening sorting the garage shelves.",
    "My back is stiff from sitting all day.",
    "Any ideas for a birthday present under thirty euros?",
    "I read an article on urban beekeeping and now I'm curious.",
    "The heating clicks at night, probably nothing.",
    "Tomorrow is going to be another long one.",
    "Could you help me outline a short talk on onboarding?",
]
LONG_FILLER = [
    "Let me think aloud about the quarter. Three projects compete for the same two people — the "
    "reporting rewrite, the mobile fixes and the export that sales keeps asking about — and each "
    "slips if we split the team, so what I need is a way to say which waits without the others "
    "feeling ignored, and a way to explain it upward without sounding like I'm dodging.",
    "About the house: the quotes for the windows came back all over the place. One includes the "
    "frames and sills, one leaves out the fitting, the third is cheap but cannot start before "
    "winter. I keep comparing them line by line, which is probably not the best use of an "
    "evening, but I want to understand exactly what we would be paying for before deciding.",
    "I spent another hour on the flaky test. It passes on my machine, fails in the pipeline one "
    "time in five, and the logs show nothing except a burst of retries from the database pool. "
    "Might be a timeout, might be ordering, and I'm starting to suspect the fixture that builds "
    "the temporary directory is shared between workers when it shouldn't be.",
    "Weekend thoughts: the forecast is mixed, the kids want the pool, and I'd like one afternoon "
    "without screens. Maybe the pool in the morning, lunch at home, a walk if it stays dry; if "
    "not, a board game and an early night sounds fine, honestly, we've been running on empty.",
]
OPENERS = ["Morning!", "Hi.", "Evening.", "Quick one.", "Hey.", "Back again.", ""]
TAILS = ["Anyway.", "That's all for now.", "Right, back to it.", "Thoughts?", ""]


# --------------------------------------------------------------------------- the ground truth


@dataclass
class Fact:
    fid: str
    kind: str  # said | person | plan | remembered | two_hop
    anchors: tuple[str, ...]
    question: str
    timeline: list[tuple[int, str]] = field(default_factory=list)  # (day, value) as told
    # two_hop: the person's name and the relation (a sentence must tie them), told on `bridge_day`
    name: str = ""
    relation: str = ""
    bridge_day: int = -1

    def told(self) -> int:
        return min(self.timeline[0][0], self.bridge_day if self.bridge_day >= 0 else 10**9)

    def due(self, day: int) -> bool:
        """Every part of it told before `day` (the checkpoint's morning)."""
        return self.timeline[0][0] < day and self.bridge_day < day

    def value_at(self, day: int) -> tuple[str, list[str]]:
        """The current value before `day`, and the values it replaced by then."""
        told = [v for d, v in self.timeline if d < day]
        return told[-1], [v for v in told[:-1] if v != told[-1]]


@dataclass
class Event:
    day: int
    text: str
    via: str = "chat"  # chat | cli | remember (a chat message asking to keep it)
    fact: str = ""


@dataclass
class Life:
    seed: int
    days: int
    start: date
    talk_days: list[int]
    long_days: set[int]
    sleep_days: set[int]  # days ending with `reverie sleep --wait`
    overnight: set[int]  # nights the daemon is left on (the nightly job fires by itself)
    facts: list[Fact]
    events: list[Event]
    checkpoints: list[tuple[int, int]]  # (month, day)

    def events_on(self, day: int) -> list[Event]:
        return [e for e in self.events if e.day == day]


def _value(kind: str, rng: random.Random, start: date) -> str:
    if kind == "digits4":
        return str(rng.randint(1000, 9999))
    if kind == "digits2":
        return str(rng.randint(11, 99))
    if kind == "password":
        return f"{rng.choice(['amber', 'falcon', 'willow', 'cobalt'])}-{rng.choice(['river', 'stone', 'lantern'])}-{rng.randint(10, 99)}"
    if kind == "date":
        return (start + timedelta(days=rng.randint(1500, 3000))).strftime("%-d %B %Y")
    if kind == "surname":
        return rng.choice(SURNAMES)
    return f"MX-{rng.randint(100000, 999999)}"


def _talk_days(rng: random.Random, days: int) -> list[int]:
    """Dense in the first month, then two or three days a month with gaps of days to weeks."""
    first = sorted(rng.sample(range(0, min(29, days)), k=min(8, days)))
    rest: set[int] = set()
    month = 30
    while month < days - 1:
        for _ in range(rng.choice([2, 2, 3])):
            d = month + rng.randrange(0, 30)
            if d < days - 1:
                rest.add(d)
        month += 30
    return sorted(set(first) | rest)


def generate(seed: int = 11, days: int = 1100, start: date = date(2027, 3, 1)) -> Life:
    """A deterministic life for (seed, days, start). Counts scale with its length."""
    if days < 40:
        raise ValueError("a life needs at least 40 days")
    rng = random.Random(seed)
    talk = _talk_days(rng, days)
    checkpoints = [(m, round(m * 30.44)) for m in CHECKPOINT_MONTHS if round(m * 30.44) <= days]
    scale = min(1.0, days / 1100)
    names = rng.sample(NAMES, len(NAMES))
    facts: list[Fact] = []
    events: list[Event] = []

    def talk_between(lo: int, hi: int) -> int:
        options = [d for d in talk if lo <= d < hi]
        return rng.choice(options) if options else talk[min(len(talk) - 1, 0)]

    # Introductions spread so every checkpoint has facts told before it, most of them early
    # (the ones a person is asked about years later).
    def intro() -> int:
        r = rng.random()
        hi = days - 15
        if r < 0.35:
            return talk_between(0, min(30, hi))
        if r < 0.6:
            return talk_between(30, min(183, hi))
        return talk_between(183 if hi > 200 else 0, hi)

    n = lambda full: max(2, round(full * scale))  # noqa: E731

    for key, anchors, values, tells, questions in rng.sample(SAID, n(len(SAID))):
        v = rng.choice(values)
        name = names.pop()
        fact = Fact(f"said-{key}", "said", (*anchors, name), rng.choice(questions))
        day = intro()
        fact.timeline.append((day, v))
        events.append(Event(day, rng.choice(tells).format(v=v, n=name), fact=fact.fid))
        facts.append(fact)

    for i, (anchors, deed, later, questions) in enumerate(rng.sample(PEOPLE, n(len(PEOPLE)))):
        name = names.pop()
        rel = rng.choice(RELATIONS)
        said = rng.choice(
            [
                f"{name}, {rel}, {deed}",
                f"it was {name} ({rel}) who {deed}",
                f"shout-out to {name}, {rel}, who {deed}",
            ]
        )
        fact = Fact(f"person-{i}", "person", anchors, rng.choice(questions))
        day = intro()
        fact.timeline.append((day, name))
        events.append(Event(day, said, fact=fact.fid))
        for _ in range(rng.randint(1, 2)):
            later_days = [d for d in talk if d > day]
            if later_days:
                events.append(Event(rng.choice(later_days), later))
        facts.append(fact)

    for key, anchors, values, tells, changes, questions in rng.sample(PLANS, n(len(PLANS))):
        vals = rng.sample(values, 3)
        day = intro()
        fact = Fact(f"plan-{key}", "plan", anchors, rng.choice(questions))
        fact.timeline.append((day, vals[0]))
        events.append(Event(day, rng.choice(tells).format(v=vals[0]), fact=fact.fid))
        for c in range(rng.choice([1, 1, 2])):
            # Changed months later: 2 to 10 months after the last word on it.
            later_days = [d for d in talk if day + 60 <= d <= day + 300]
            if not later_days:
                break
            new_day = rng.choice(later_days)
            old, new = vals[c], vals[c + 1]
            events.append(Event(new_day, rng.choice(changes).format(old=old, v=new), fact=fact.fid))
            fact.timeline.append((new_day, new))
            day = new_day
        facts.append(fact)

    for i, (key, anchors, text, kind, questions) in enumerate(rng.sample(KEEP, n(len(KEEP)))):
        v = _value(kind, rng, start)
        day = intro()
        via = "cli" if i % 2 else "remember"
        ask = rng.choice(KEEP_ASKS)
        fact = Fact(f"remembered-{key}", "remembered", anchors, rng.choice(questions))
        fact.timeline.append((day, v))
        body = text.format(v=v)
        events.append(Event(day, body if via == "cli" else ask.format(t=body), via, fact.fid))
        if i == 0:
            later_days = [d for d in talk if day + 60 <= d]
            if later_days:
                new = _value(kind, rng, start)
                while new == v:
                    new = _value(kind, rng, start)
                new_day = rng.choice(later_days)
                body = text.format(v=new).replace(" is ", " is now ", 1)
                events.append(
                    Event(new_day, body if via == "cli" else ask.format(t=body), via, fact.fid)
                )
                fact.timeline.append((new_day, new))
        facts.append(fact)

    rels = rng.sample(TWO_HOP_REL, n(len(TWO_HOP_REL)))
    for i, rel in enumerate(rels):
        key, values, tells, question = TWO_HOP_PROP[i % len(TWO_HOP_PROP)]
        name = names.pop()
        v = rng.choice(values)
        intro_day = intro()
        later_days = [d for d in talk if intro_day + 20 <= d < days - 15]
        prop_day = rng.choice(later_days) if later_days else intro_day
        fact = Fact(
            f"two_hop-{i}",
            "two_hop",
            (name,),
            question.format(r=rel),
            name=name,
            relation=rel.split()[-1],
            bridge_day=intro_day,
        )
        fact.timeline.append((prop_day, v))
        events.append(Event(intro_day, rng.choice(TWO_HOP_INTRO).format(r=rel, n=name)))
        events.append(Event(prop_day, rng.choice(tells).format(n=name, v=v), fact=fact.fid))
        facts.append(fact)

    events.sort(key=lambda e: e.day)
    busy = [d for d in talk if d > 2]
    long_days = set(rng.sample(busy, k=min(len(busy), max(1, len(talk) // 14))))
    sleep_days = {d for d in talk if d not in long_days and rng.random() < 0.3}
    overnight = {talk[2]} | {d for d in talk[3:] if d not in long_days and rng.random() < 0.1}
    return Life(
        seed, days, start, talk, long_days, sleep_days, overnight, facts, events, checkpoints
    )


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def day_messages(life: Life, day: int, rng: random.Random) -> list[Event]:
    """The day as lived: each fact said in passing between ordinary sentences."""
    todays = life.events_on(day)
    long_day = day in life.long_days
    n = max(len(todays), rng.randint(34, 42) if long_day else rng.randint(3, 6))
    slots = dict(zip(sorted(rng.sample(range(n), k=len(todays))), todays, strict=True))
    out: list[Event] = []
    for i in range(n):
        event = slots.get(i)
        if event is not None and event.via in ("cli", "remember"):
            out.append(event)
            continue
        parts = [rng.choice(OPENERS), rng.choice(LONG_FILLER if long_day else FILLER)]
        if event is not None:
            parts.insert(rng.randint(1, 2), _sentence(event.text))
        parts.append(rng.choice(FILLER) if long_day or rng.random() < 0.5 else rng.choice(TAILS))
        out.append(Event(day, " ".join(p for p in parts if p), "chat", event.fact if event else ""))
    return out


# --------------------------------------------------------------------------- scoring


def score(life: Life, day: int, contexts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every fact due at `day` against the contexts assembled that morning."""
    rows = []
    stale_alone = 0

    def texts(ctx: dict[str, Any]) -> list[str]:
        return [s for b in ctx["blocks"] for s in sentences(b["text"])]

    for fact in life.facts:
        if not fact.due(day):
            continue
        value, superseded = fact.value_at(day)
        held_in: list[str] = []
        stale: list[dict[str, str]] = []
        for prompt in (NEUTRAL, fact.question):
            ctx = contexts[prompt]
            sents = texts(ctx)
            current = shown(sents, fact.anchors, value)
            if fact.kind == "two_hop":
                current = current and shown(sents, (fact.relation,), fact.name)
            if current:
                held_in.append("neutral" if prompt == NEUTRAL else "question")
            for old in superseded:
                if not current and shown(sents, fact.anchors, old):
                    stale.append({"prompt": prompt, "old": old})
        stale_alone += len(stale)
        row: dict[str, Any] = {
            "fact": fact.fid,
            "kind": fact.kind,
            "question": fact.question,
            "expected": value,
            "superseded": superseded,
            "told_on": fact.told(),
            "held": bool(held_in),
            "held_in": held_in,
            "superseded_alone": stale,
        }
        if not held_in:
            row["context_had"] = _nearest(texts(contexts[fact.question]), fact)
        rows.append(row)

    def share(kind: str | None) -> dict[str, Any]:
        group = [r for r in rows if kind is None or r["kind"] == kind]
        held = sum(r["held"] for r in group)
        return {
            "held": held,
            "of": len(group),
            "share": round(held / len(group), 3) if group else None,
        }

    return {
        "held": share(None),
        "by_kind": {k: share(k) for k in KINDS},
        "superseded_alone": stale_alone,
        "rows": rows,
    }


def _nearest(sents: list[str], fact: Fact) -> list[str]:
    """What the question's context said near the fact (its anchor's sentences), for the report."""
    words = [a.lower() for a in fact.anchors] + ([fact.relation] if fact.relation else [])
    return [s[:200] for s in sents if any(w in s for w in words)][:3]


# --------------------------------------------------------------------------- driving the daemon


def faketime_lib() -> Path:
    for lib in FAKETIME_LIBS:
        if lib.exists():
            return lib
    found = shutil.which("faketime")
    raise SystemExit(
        "bench.years needs libfaketime (libfaketime.so.1), not found"
        + (f" (the faketime command is at {found} but its library is not)" if found else "")
        + ": install Debian's `faketime` package (`sudo apt-get install faketime`)."
    )


class Driver:
    def __init__(self, life: Life, home: Path, lib: Path, progress: bool, embedder: str) -> None:
        self.life, self.home, self.lib, self.progress = life, home, lib, progress
        self.embedder = embedder
        self.starts = 0
        self.catch_ups: list[str] = []
        self.turns = 0
        self.remembered_cli = 0
        self.snapshots: Path | None = None  # with --keep: each checkpoint's home, copied

    def env(self, when: datetime) -> dict[str, str]:
        return daemon_env(
            {
                "LD_PRELOAD": str(self.lib),
                "FAKETIME": "@" + when.strftime("%Y-%m-%d %H:%M:%S"),
                "TZ": "UTC",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "REVERIE_EMBEDDER": self.embedder,
            }
        )

    def at(self, day: int, hh: int, mm: int = 0, ss: int = 0) -> datetime:
        d = self.life.start + timedelta(days=day)
        return datetime(d.year, d.month, d.day, hh, mm, ss)

    def log(self, msg: str) -> None:
        if self.progress:
            print(msg, file=sys.stderr, flush=True)

    def start(self, when: datetime) -> DaemonProcess:
        daemon = DaemonProcess(home=self.home, env=self.env(when))
        # The harness names each run's log daemon-N.log by its own count: one object per start.
        daemon.started = [0.0] * self.starts
        daemon.start(timeout=120)
        self.starts += 1
        return daemon

    def settle(self, daemon: DaemonProcess, timeout: float = 900) -> None:
        """Wait until a nightly run caught up at start (if any) has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = daemon.log_events()
            caught = any("catching up once" in str(e.get("event", "")) for e in events)
            if not caught:
                time.sleep(0.5)
                events = daemon.log_events()
                caught = any("catching up once" in str(e.get("event", "")) for e in events)
                if not caught:
                    return
            done = [
                e
                for e in events
                if e.get("event") == "job finished" and e.get("job") == "nightly_sleep"
            ]
            if done:
                self.catch_ups.append(str(done[-1].get("result", ""))[:120])
                self._wait_awake()
                return
            time.sleep(0.5)
        raise RuntimeError(f"the caught-up night did not finish in {timeout}s")

    def _wait_awake(self) -> None:
        for _ in range(600):
            out = run_cli("status", "--json", "--home", str(self.home), timeout=60)
            if out.returncode == 0 and json.loads(out.stdout).get("state") == "awake":
                return
            time.sleep(0.5)

    def sleep_now(self) -> None:
        for _ in range(240):
            out = run_cli("sleep", "--wait", "--home", str(self.home), timeout=900)
            if out.returncode == 0:
                return
            if "busy" not in (out.stdout + out.stderr) and "already running" not in (
                out.stdout + out.stderr
            ):
                raise RuntimeError(f"reverie sleep failed: {out.stdout}\n{out.stderr}")
            time.sleep(0.5)
        raise RuntimeError("the daemon stayed busy; no night could start")

    def talk_day(self, day: int, rng: random.Random) -> None:
        daemon = self.start(self.at(day, 8, 30))
        try:
            self.settle(daemon)
            with Client(daemon.socket_path, timeout=900) as client:
                client.hello()
                for event in day_messages(self.life, day, rng):
                    if event.via == "cli":
                        out = run_cli("remember", event.text, "--home", str(self.home))
                        if out.returncode != 0:
                            raise RuntimeError(f"reverie remember failed: {out.stderr}")
                        self.remembered_cli += 1
                        continue
                    _, frames = client.chat(event.text)
                    if frames[-1]["type"] != "done":
                        raise RuntimeError(f"day {day}: the turn failed: {frames[-1]}")
                    self.turns += 1
            if day in self.life.long_days:
                self._wait_awake()  # a wind-down begun by the long day finishes first
            if day in self.life.sleep_days:
                self.sleep_now()
        finally:
            daemon.stop()
        if day in self.life.overnight:
            # Left on overnight: the next morning at 03:29:50 the nightly job fires by itself.
            daemon = self.start(self.at(day + 1, 3, 29, 50))
            try:
                deadline = time.monotonic() + 900
                while time.monotonic() < deadline:
                    if any(
                        e.get("event") == "job finished" and e.get("job") == "nightly_sleep"
                        for e in daemon.log_events()
                    ):
                        break
                    time.sleep(0.5)
                self._wait_awake()
            finally:
                daemon.stop()

    def checkpoint(self, month: int, day: int) -> dict[str, Any]:
        """The checkpoint's morning: started (the missed night caught up), stopped, measured."""
        daemon = self.start(self.at(day, 8, 0))
        try:
            self.settle(daemon)
        finally:
            daemon.stop()
        if self.snapshots is not None:
            # The home as this checkpoint measured it, to assemble again with other code.
            shutil.copytree(self.home, self.snapshots / f"month-{month}", dirs_exist_ok=True)
        due = [f for f in self.life.facts if f.due(day)]
        prompts = [NEUTRAL, *dict.fromkeys(f.question for f in due)]
        contexts = assemble_all(self.home, prompts, self.env(self.at(day, 8, 30)))
        result = score(self.life, day, contexts)
        # On the home's own clock and embedder (the harness's default environment has none).
        stats = run_cli(
            "memory", "stats", "--json", "--home", str(self.home),
            env=self.env(self.at(day, 8, 30)), timeout=120,
        )  # fmt: skip
        memory = json.loads(stats.stdout) if stats.returncode == 0 else {"error": stats.stderr}
        tokens = [c["total_tokens"] for c in contexts.values()]
        result.update(
            {
                "month": month,
                "day": day,
                "date": (self.life.start + timedelta(days=day)).isoformat(),
                "first_turn": {
                    "neutral_tokens": contexts[NEUTRAL]["total_tokens"],
                    "max_tokens": max(tokens),
                    "budget": contexts[NEUTRAL]["budget"],
                    "over_budget": sum(1 for c in contexts.values() if c.get("over_budget")),
                },
                "memory": memory,
                "nights": nights(self.home, self.life.start, day),
            }
        )
        return result


def assemble_all(home: Path, prompts: list[str], env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """`reverie context --prompt P --json` for each prompt, in one process on the faked clock."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.years", "--assemble", str(home)],
        cwd=REPO,
        env=env,
        input=json.dumps(prompts),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"context assembly failed:\n{proc.stderr[-3000:]}")
    out: dict[str, dict[str, Any]] = json.loads(proc.stdout)
    return out


def _assemble_main(home: str) -> int:
    from daemon.cli import main as cli_main

    prompts = json.loads(sys.stdin.read())
    out: dict[str, Any] = {}
    for prompt in prompts:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = cli_main(["context", "--prompt", prompt, "--json", "--home", home])
        if rc != 0:
            print(f"reverie context failed for {prompt!r}", file=sys.stderr)
            return 1
        out[prompt] = json.loads(buf.getvalue())
    sys.stdout.write(json.dumps(out))
    return 0


def nights(home: Path, start: date, day: int, window: int = 61) -> dict[str, Any]:
    """The cycles that finished in the `window` days before `day`: wall time, calls, tokens."""
    lo = (start + timedelta(days=max(0, day - window))).isoformat()
    hi = (start + timedelta(days=day + 1)).isoformat()
    con = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        cycles = con.execute(
            "SELECT id, reason, started_at, finished_at FROM sleep_cycles"
            " WHERE status = 'done' AND started_at >= ? AND started_at < ? ORDER BY started_at",
            (lo, hi),
        ).fetchall()
        rows = []
        for cid, reason, started, finished in cycles:
            calls, tin, tout = con.execute(
                "SELECT COUNT(*), COALESCE(SUM(input_tokens),0), COALESCE(SUM(output_tokens),0)"
                " FROM usage_ledger WHERE ts >= ? AND ts <= ? AND role != 'trunk'",
                (started, finished),
            ).fetchone()
            phases = dict(
                con.execute(
                    "SELECT phase, (julianday(finished_at) - julianday(started_at)) * 86400"
                    " FROM sleep_phases WHERE cycle_id = ? AND finished_at IS NOT NULL",
                    (cid,),
                ).fetchall()
            )
            wall = (
                datetime.fromisoformat(finished) - datetime.fromisoformat(started)
            ).total_seconds()
            rows.append(
                {"id": cid, "reason": reason, "wall_s": round(wall, 2), "calls": calls,
                 "input_tokens": tin, "output_tokens": tout, "phases": phases}
            )  # fmt: skip
        total = con.execute("SELECT COUNT(*) FROM sleep_cycles WHERE status = 'done'").fetchone()[0]
    finally:
        con.close()
    # A night that met a day of talk (model calls made) is the one that tells the cost; an idle
    # catch-up after a manual sleep makes none.
    worked = [r for r in rows if r["calls"]] or rows

    def med(key: str) -> float | None:
        return round(statistics.median(r[key] for r in worked), 2) if worked else None

    return {
        "cycles_in_window": len(rows),
        "worked": len(worked),
        "wall_s_median": med("wall_s"),
        "wall_s_max": max((r["wall_s"] for r in worked), default=None),
        "calls_median": med("calls"),
        "input_tokens_median": med("input_tokens"),
        "output_tokens_median": med("output_tokens"),
        "phase_s_median": {
            p: round(statistics.median(r["phases"].get(p, 0.0) for r in worked), 2)
            for p in sorted({p for r in worked for p in r["phases"]})
        },
        "cycles_total": total,
        "by_reason": {
            k: sum(1 for r in rows if r["reason"] == k) for k in {r["reason"] for r in rows}
        },
    }


# --------------------------------------------------------------------------- the run


def run(
    seed: int,
    days: int,
    start: date,
    keep: Path | None,
    progress: bool,
    embedder: str = "auto",
) -> dict[str, Any]:
    lib = faketime_lib()
    life = generate(seed, days, start)
    root = keep or Path(tempfile.mkdtemp(prefix="years-"))
    if keep and root.exists():
        shutil.rmtree(root)
    home = root / "home"
    home.mkdir(parents=True)
    (home / "reverie.toml").write_text(CONFIG)
    driver = Driver(life, home, lib, progress, embedder)
    driver.snapshots = root if keep else None
    rng = random.Random(seed * 7919 + 3)
    t0 = time.monotonic()
    checkpoints: list[dict[str, Any]] = []
    pending = list(life.checkpoints)
    try:
        for i, day in enumerate(life.talk_days):
            while pending and pending[0][1] <= day:
                month, cday = pending.pop(0)
                checkpoints.append(driver.checkpoint(month, cday))
                driver.log(_line(checkpoints[-1]))
                _partial(checkpoints)
            driver.talk_day(day, rng)
            driver.log(
                f"day {day} ({i + 1}/{len(life.talk_days)} talk days): {driver.turns} turns,"
                f" {driver.starts} starts, {len(driver.catch_ups)} catch-ups,"
                f" {time.monotonic() - t0:.0f} s"
            )
        for month, cday in pending:
            checkpoints.append(driver.checkpoint(month, cday))
            driver.log(_line(checkpoints[-1]))
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return {
        "seed": seed,
        "days": days,
        "start": start.isoformat(),
        "embedder": embedder,
        "talk_days": len(life.talk_days),
        "long_days": len(life.long_days),
        "sleep_days": len(life.sleep_days),
        "overnight": len(life.overnight),
        "facts": {k: sum(1 for f in life.facts if f.kind == k) for k in KINDS},
        "turns": driver.turns,
        "daemon_starts": driver.starts,
        "catch_ups": len(driver.catch_ups),
        "catch_up_results": driver.catch_ups[:5],
        "checkpoints": checkpoints,
        "targets": targets(checkpoints),
        "wall_s": round(time.monotonic() - t0, 1),
    }


def _partial(checkpoints: list[dict[str, Any]]) -> None:
    """The checkpoints so far, written as each is measured (a long run stopped part way)."""
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "years.partial.json").write_text(json.dumps(checkpoints, ensure_ascii=False))


def _line(cp: dict[str, Any]) -> str:
    h = cp["held"]
    return (
        f"month {cp['month']}: held {h['held']}/{h['of']}, superseded alone"
        f" {cp['superseded_alone']}, night {cp['nights']['wall_s_median']} s"
    )


def targets(cps: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, each with the figures it was judged on."""
    out: dict[str, Any] = {
        "held_95_every_checkpoint": all((c["held"]["share"] or 0) >= 0.95 for c in cps),
        "superseded_alone_0": all(c["superseded_alone"] == 0 for c in cps),
        "first_turn_within_budget": all(
            c["first_turn"]["max_tokens"] <= c["first_turn"]["budget"] for c in cps
        ),
    }
    by_month = {c["month"]: c for c in cps}
    if 12 in by_month and 36 in by_month:
        w12, w36 = by_month[12]["nights"]["wall_s_median"], by_month[36]["nights"]["wall_s_median"]
        out["nightly_wall_1000_vs_365"] = round(w36 / w12, 2) if w12 and w36 else None
        out["nightly_wall_within_2x"] = bool(w12 and w36 and w36 <= 2 * w12)
    calls = [c["nights"]["calls_median"] for c in cps if c["nights"]["calls_median"] is not None]
    out["calls_per_night"] = calls
    out["calls_flat"] = bool(calls) and max(calls) <= min(calls) + 1
    return out


def table(result: dict[str, Any]) -> str:
    head = (
        "| month | held | said | person | plan | remembered | two-hop | superseded alone |"
        " night wall s (median) | calls / night | tokens in / out | memories | first turn tokens / budget |"
    )
    lines = [head, "|" + "---|" * 13]
    for c in result["checkpoints"]:
        k = c["by_kind"]
        n = c["nights"]
        mem = c["memory"]
        count = mem.get("total", mem.get("memories", mem.get("count", "?")))
        lines.append(
            f"| {c['month']} | {c['held']['held']}/{c['held']['of']} ({c['held']['share']:.0%}) | "
            + " | ".join(f"{k[x]['held']}/{k[x]['of']}" for x in KINDS)
            + f" | {c['superseded_alone']} | {n['wall_s_median']} | {n['calls_median']} |"
            f" {n['input_tokens_median']} / {n['output_tokens_median']} | {count} |"
            f" {c['first_turn']['neutral_tokens']}–{c['first_turn']['max_tokens']} / {c['first_turn']['budget']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--assemble"]:
        return _assemble_main(argv[1])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--days", type=int, default=1100)
    p.add_argument("--start", type=date.fromisoformat, default=date(2027, 3, 1))
    p.add_argument("--quick", action="store_true", help="a 200-day smoke run (months 1 and 6)")
    p.add_argument("--keep", type=Path, default=None, help="keep the home in this directory")
    p.add_argument("--details", action="store_true", help="every fact at every checkpoint")
    p.add_argument(
        "--embedder",
        default="auto",
        help="REVERIE_EMBEDDER for the daemon and the assembly (default auto: as installed;"
        " none: lexical recall alone)",
    )
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    days = 200 if args.quick else args.days
    result = run(args.seed, days, args.start, args.keep, not args.quiet, args.embedder)
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "years.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    if not args.details:
        for c in result["checkpoints"]:
            c["missed"] = [r for r in c.pop("rows") if not r["held"] or r["superseded_alone"]]
    print(json.dumps(result, indent=2, ensure_ascii=False))
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
