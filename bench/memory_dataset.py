"""A synthetic long multi-session history with planted facts, for recall-quality checks.

Deterministic from a seed. Two people talk over many dated sessions, mostly small talk
(distractors that reuse the same vocabulary: other people's cities, jobs, pets, trips),
with facts planted at known messages. Each question is paraphrased away from its evidence
and labelled with the message ids that answer it. Kinds of question:
- `fact`: a planted fact asked in other words;
- `superseded`: a fact later corrected; only the newer message is evidence;
- `temporal`: "before my trip" / "in <month>" — the evidence is the one inside the window;
- `entity`: asked by a named person, project or place.
Import lines follow the `memory import` format.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

NAMES = ["Ana", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal", "Lena"]
CITIES = ["Porto", "Lyon", "Kraków", "Bergen", "Valencia", "Tallinn", "Ghent", "Trieste", "Aarhus", "Split"]
JOBS = ["pharmacist", "carpenter", "radiologist", "translator", "sommelier", "geologist", "librarian", "welder"]
PETS = ["parrot", "tortoise", "ferret", "beagle", "rabbit", "iguana"]
PET_NAMES = ["Biscuit", "Pesto", "Nimbus", "Waffles", "Ziggy", "Tofu", "Marble"]
HOBBIES = ["the cello", "pottery", "rock climbing", "Japanese", "sourdough baking", "chess", "woodturning"]
DISHES = ["mushroom risotto", "lamb tagine", "pad thai", "shakshuka", "beef bourguignon", "paella"]
PROJECTS = ["Kestrel", "Bluebird", "Ironwood", "Halcyon", "Quartzline"]
SMALL_TALK = [
    "The weather has been {adj} all week, I barely went outside.",
    "Did you watch the match last night? The second half was {adj}.",
    "I'm so tired today, the meeting ran long and the coffee machine broke.",
    "My neighbour {name} keeps parking in front of my garage, it's {adj}.",
    "I read an article about {city} and their new tram line, looks {adj}.",
    "Work was {adj} today, lots of emails and one long call about budgets.",
    "My friend {name} says being a {job} is {adj} but pays well.",
    "{name} adopted a {pet} recently, apparently it is {adj}.",
    "I might cook {dish} this weekend if I find the ingredients.",
    "{name} went on a trip to {city} and sent me {adj} photos.",
    "Thinking of picking up a new hobby, maybe something like {hobby}, not sure.",
    "The train to work was late again, {adj} start to the day.",
]
ADJ = ["great", "awful", "strange", "lovely", "exhausting", "fun", "boring", "wild", "calm", "grey"]
REPLIES = [
    "Ha, that sounds {adj}. Tell me more when you have time.",
    "Oh no, I hope tomorrow is better!",
    "That's {adj}! How did you feel about it?",
    "Interesting — I didn't expect that.",
    "Sounds like a {adj} day, honestly.",
]


@dataclass
class Dataset:
    lines: list[dict[str, str]] = field(default_factory=list)
    questions: list[dict[str, object]] = field(default_factory=list)

    def write(self, folder: Path) -> tuple[Path, Path]:
        folder.mkdir(parents=True, exist_ok=True)
        conv, qs = folder / "conversations.jsonl", folder / "questions.jsonl"
        conv.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        qs.write_text("".join(json.dumps(q) + "\n" for q in self.questions))
        return conv, qs


class _Builder:
    def __init__(self, seed: int, sessions: int, per_session: int) -> None:
        self.rng = random.Random(seed)
        self.sessions = sessions
        self.per_session = per_session
        self.start = datetime(2023, 1, 9, 18, 0, tzinfo=UTC)
        # session index -> list of (position, speaker-role, text, key)
        self.planted: dict[int, list[tuple[str, str, str | None]]] = {}
        self.data = Dataset()
        self.ids: dict[str, str] = {}

    def session_day(self, s: int) -> datetime:
        return self.start + timedelta(days=round(s * 540 / max(1, self.sessions)))

    def plant(self, s: int, text: str, key: str) -> None:
        self.planted.setdefault(s, []).append(("user", text, key))

    def small_talk(self) -> tuple[str, str]:
        r = self.rng
        fill = {"adj": r.choice(ADJ), "name": r.choice(NAMES), "city": r.choice(CITIES), "job": r.choice(JOBS),
                "pet": r.choice(PETS), "dish": r.choice(DISHES), "hobby": r.choice(HOBBIES)}
        return r.choice(SMALL_TALK).format(**fill), r.choice(REPLIES).format(**fill)

    def ask(self, question: str, keys: list[str], kind: str) -> None:
        self.data.questions.append({"question": question, "keys": keys, "kind": kind})

    def build(self) -> Dataset:
        for s in range(self.sessions):
            sid = f"conv-{s:03d}"
            day = self.session_day(s)
            planted = list(self.planted.get(s, []))
            slots = sorted(self.rng.sample(range(self.per_session), min(len(planted), self.per_session)))
            n = 0
            for turn in range(self.per_session):
                if slots and turn == slots[0] and planted:
                    slots.pop(0)
                    _, text, key = planted.pop(0)
                    pair = (text, self.rng.choice(REPLIES).format(adj=self.rng.choice(ADJ)))
                else:
                    pair, key = self.small_talk(), None
                for role, text in zip(("user", "assistant"), pair, strict=True):
                    n += 1
                    mid = f"{sid}:{n}"
                    self.data.lines.append({
                        "session": sid, "id": mid, "ts": (day + timedelta(minutes=2 * n)).isoformat(),
                        "role": role, "speaker": "Sam" if role == "user" else "Robin", "content": text,
                    })
                    if key and role == "user":
                        self.ids[key] = mid
        for q in self.data.questions:
            q["evidence"] = [self.ids[k] for k in q.pop("keys")]  # type: ignore[union-attr]
        return self.data


def generate(seed: int = 7, *, sessions: int = 24, per_session: int = 10) -> Dataset:
    """Generate the dataset: about `sessions * per_session * 2` messages, ~1 question per session."""
    b = _Builder(seed, sessions, per_session)
    r = b.rng
    order = list(range(sessions))
    slot = iter(r.sample(order, len(order)) * 8)

    def at(lo: float = 0.0, hi: float = 1.0) -> int:
        pool = [s for s in order if lo * sessions <= s < max(lo * sessions + 1, hi * sessions)]
        return r.choice(pool)

    people = r.sample(NAMES, 6)
    for i, person in enumerate(people[:3]):
        city, job = CITIES[i], JOBS[i]
        b.plant(next(slot), f"Big news: my cousin {person} finally moved to {city} for a job as a {job}.", f"move{i}")
        b.ask(f"Which city did {person} relocate to?", [f"move{i}"], "entity")
        b.ask("What does my cousin do for a living?" if i == 0 else f"What is {person}'s profession?", [f"move{i}"], "fact")
    pet, pet_name = r.choice(PETS), r.choice(PET_NAMES)
    b.plant(next(slot), f"We brought home a little {pet} and named it {pet_name}!", "pet")
    b.ask("What kind of animal did we adopt, and what is it called?", ["pet"], "fact")
    b.plant(next(slot), "I found out I'm allergic to shellfish, so no more prawns for me.", "allergy")
    b.ask("Is there any food I should avoid because of an allergy?", ["allergy"], "fact")
    project = r.choice(PROJECTS)
    b.plant(next(slot), f"I'm leading the {project} migration at work, deadline is end of quarter.", "project")
    b.ask(f"What is my role on {project}?", ["project"], "entity")
    # Superseded: an early statement corrected later; only the correction is evidence.
    early, late = at(0.0, 0.3), at(0.6, 1.0)
    old_job, new_job = "Globex", "Initech"
    b.plant(early, f"I work at {old_job} as a data analyst, three days in the office.", "job_old")
    b.plant(late, f"Update: I left {old_job}. I started at {new_job} this month as an engineer.", "job_new")
    b.ask("Who is my current employer?", ["job_new"], "superseded")
    early2, late2 = at(0.1, 0.4), at(0.7, 1.0)
    b.plant(early2, "My partner and I live in a flat on Elm Street.", "home_old")
    b.plant(late2, "We finally moved out of the Elm Street flat; the new house is on Harbour Road.", "home_new")
    b.ask("What street do we live on now?", ["home_new"], "superseded")
    # Temporal: "before my trip" — two wishes, one before and one after the trip.
    before_s, trip_s, after_s = at(0.15, 0.35), at(0.45, 0.55), at(0.7, 0.95)
    hob_before, hob_after = r.sample(HOBBIES, 2)
    b.plant(before_s, f"I really want to learn {hob_before} this year.", "wish_before")
    b.plant(trip_s, "Packing tonight — the trip to Iceland starts tomorrow!", "trip")
    b.plant(after_s, f"I really want to learn {hob_after} this year.", "wish_after")
    b.ask("What did I say I wanted to learn before my trip?", ["wish_before"], "temporal")
    b.ask("When did I leave for Iceland?", ["trip"], "fact")
    # Temporal by month: the same kind of event in two different months.
    s1, s2 = at(0.0, 0.45), at(0.55, 1.0)
    d1, d2 = r.sample(DISHES, 2)
    b.plant(s1, f"Tried a new recipe tonight: {d1}, it turned out great.", "cook1")
    b.plant(s2, f"Tried a new recipe tonight: {d2}, it turned out great.", "cook2")
    month = b.session_day(s1).strftime("%B %Y")
    b.ask(f"What new recipe did I try in {month}?", ["cook1"], "temporal")
    # More plain facts scaled with the history length.
    for i in range(max(0, sessions // 6)):
        name, city = r.choice(NAMES), r.choice(CITIES)
        b.plant(next(slot), f"Reminder for myself: {name}'s birthday dinner is at the {city} bistro on the {i + 3}th.", f"bday{i}")
        b.ask(f"Where is {name}'s birthday dinner happening?", [f"bday{i}"], "entity")
    return b.build()


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="write a synthetic memory dataset (conversations + questions)")
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--sessions", type=int, default=24)
    a = p.parse_args()
    conv, qs = generate(a.seed, sessions=a.sessions).write(a.out)
    print(f"wrote {conv} and {qs}")
