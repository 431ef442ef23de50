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

NAMES = [
    "Ana",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Elif",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kemal",
    "Lena",
]
CITIES = [
    "Porto",
    "Lyon",
    "Kraków",
    "Bergen",
    "Valencia",
    "Tallinn",
    "Ghent",
    "Trieste",
    "Aarhus",
    "Split",
]
JOBS = [
    "pharmacist",
    "carpenter",
    "radiologist",
    "translator",
    "sommelier",
    "geologist",
    "librarian",
    "welder",
]
PETS = ["parrot", "tortoise", "ferret", "beagle", "rabbit", "iguana"]
PET_NAMES = ["Biscuit", "Pesto", "Nimbus", "Waffles", "Ziggy", "Tofu", "Marble"]
HOBBIES = [
    "the cello",
    "pottery",
    "rock climbing",
    "Japanese",
    "sourdough baking",
    "chess",
    "woodturning",
]
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
        fill = {
            "adj": r.choice(ADJ),
            "name": r.choice(NAMES),
            "city": r.choice(CITIES),
            "job": r.choice(JOBS),
            "pet": r.choice(PETS),
            "dish": r.choice(DISHES),
            "hobby": r.choice(HOBBIES),
        }
        return r.choice(SMALL_TALK).format(**fill), r.choice(REPLIES).format(**fill)

    def ask(self, question: str, keys: list[str], kind: str) -> None:
        self.data.questions.append({"question": question, "keys": keys, "kind": kind})

    def build(self) -> Dataset:
        for s in range(self.sessions):
            sid = f"conv-{s:03d}"
            day = self.session_day(s)
            planted = list(self.planted.get(s, []))
            slots = sorted(
                self.rng.sample(range(self.per_session), min(len(planted), self.per_session))
            )
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
                    self.data.lines.append(
                        {
                            "session": sid,
                            "id": mid,
                            "ts": (day + timedelta(minutes=2 * n)).isoformat(),
                            "role": role,
                            "speaker": "Sam" if role == "user" else "Robin",
                            "content": text,
                        }
                    )
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
        b.plant(
            next(slot),
            f"Big news: my cousin {person} finally moved to {city} for a job as a {job}.",
            f"move{i}",
        )
        b.ask(f"Which city did {person} relocate to?", [f"move{i}"], "entity")
        b.ask(
            "What does my cousin do for a living?" if i == 0 else f"What is {person}'s profession?",
            [f"move{i}"],
            "fact",
        )
    pet, pet_name = r.choice(PETS), r.choice(PET_NAMES)
    b.plant(next(slot), f"We brought home a little {pet} and named it {pet_name}!", "pet")
    b.ask("What kind of animal did we adopt, and what is it called?", ["pet"], "fact")
    b.plant(
        next(slot), "I found out I'm allergic to shellfish, so no more prawns for me.", "allergy"
    )
    b.ask("Is there any food I should avoid because of an allergy?", ["allergy"], "fact")
    project = r.choice(PROJECTS)
    b.plant(
        next(slot),
        f"I'm leading the {project} migration at work, deadline is end of quarter.",
        "project",
    )
    b.ask(f"What is my role on {project}?", ["project"], "entity")
    # Superseded: an early statement corrected later; only the correction is evidence.
    early, late = at(0.0, 0.3), at(0.6, 1.0)
    old_job, new_job = "Globex", "Initech"
    b.plant(early, f"I work at {old_job} as a data analyst, three days in the office.", "job_old")
    b.plant(
        late,
        f"Update: I left {old_job}. I started at {new_job} this month as an engineer.",
        "job_new",
    )
    b.ask("Who is my current employer?", ["job_new"], "superseded")
    early2, late2 = at(0.1, 0.4), at(0.7, 1.0)
    b.plant(early2, "My partner and I live in a flat on Elm Street.", "home_old")
    b.plant(
        late2,
        "We finally moved out of the Elm Street flat; the new house is on Harbour Road.",
        "home_new",
    )
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
        b.plant(
            next(slot),
            f"Reminder for myself: {name}'s birthday dinner is at the {city} bistro on the {i + 3}th.",
            f"bday{i}",
        )
        b.ask(f"Where is {name}'s birthday dinner happening?", [f"bday{i}"], "entity")
    return b.build()


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(
        description="write a synthetic memory dataset (conversations + questions)"
    )
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--sessions", type=int, default=24)
    a = p.parse_args()
    conv, qs = generate(a.seed, sessions=a.sessions).write(a.out)
    print(f"wrote {conv} and {qs}")


# ----- a LoCoMo-like dialogue: two named friends, dated sessions, single-turn evidence -------

FRIENDS = [("Maya", "Theo"), ("Priya", "Daniel"), ("Lucia", "Marcus"), ("Nora", "Kofi")]
CHATTER = [
    "Work has been hectic, so many meetings this week. How are things with you?",
    "The kids kept me busy all weekend, we barely had a moment to ourselves.",
    "I've been thinking a lot about what makes me happy lately.",
    "We had friends over for dinner on Saturday, it was really nice to catch up.",
    "It rained the whole week, I stayed in and read most evenings.",
    "My mom called yesterday, she says hi! She's doing much better.",
    "I tried a new coffee place near the office, the pastries were amazing.",
    "Honestly I need a holiday, I'm running on empty.",
    "We went for a long walk by the river with the dog, the leaves are turning already.",
    "I finally cleaned out the garage, found so many old photos from college.",
    "The neighbours are renovating again, the drilling starts at 7am!",
    "Did you see the news about the new library downtown? Looks beautiful.",
    "I'm trying to eat healthier, lots of salads this week.",
    "My sister is visiting next month, I can't wait to see her.",
    "We watched a documentary about the ocean last night, so calming.",
]
ANSWERS = [
    "That sounds wonderful, {name}! I'm so happy for you.",
    "Wow, that's amazing. How did it make you feel?",
    "Oh I love that! Tell me more about it next time.",
    "That's so great to hear. You deserve it!",
    "Haha, I can totally picture that. Thanks for sharing!",
    "I hear you. Take care of yourself, okay?",
    "That's really inspiring, {name}. Keep going!",
]
# (what the speaker says, the question, a near-miss the other friend says, kind); {x} and {y}
# come from the slot lists, the near-miss uses other slot values.
EVENTS: list[tuple[str, str, str, str, list[str]]] = [
    (
        "I went to a {x} support group yesterday and it was so powerful, everyone was so welcoming.",
        "When did {who} go to the {x} support group?",
        "A colleague of mine runs a {x} support group, I might go with her sometime.",
        "temporal",
        ["LGBTQ", "grief", "new parents", "cancer survivors", "veterans"],
    ),
    (
        "After a rough day I go {x} — it clears my head and everything calms down.",
        "What does {who} do to destress?",
        "My brother keeps telling me to try {x}, but I never find the time.",
        "single-hop",
        [
            "running by the lake",
            "swimming at the public pool",
            "pottery at the studio",
            "gardening in the backyard",
            "rock climbing at the gym",
        ],
    ),
    (
        "We adopted a {x} from the shelter last weekend, the kids named her {y}!",
        "What is the name of {who}'s new {x}?",
        "My neighbour has a {x} called Biscuit, it barks all night.",
        "single-hop",
        ["puppy", "kitten", "rabbit", "parrot"],
    ),
    (
        "Just got back from camping at {x} with the family — we saw the meteor shower!",
        "Where did {who} go camping with the family?",
        "We drove past {x} once but never stopped.",
        "single-hop",
        ["Yosemite", "Lake Tahoe", "Big Sur", "the Rocky Mountains", "Acadia"],
    ),
    (
        "I'm reading \"{x}\" right now and I can't put it down.",
        "What book is {who} reading?",
        'Someone at book club recommended "{x}" but I found it slow.',
        "single-hop",
        ["Becoming Nicole", "The Overstory", "Circe", "Educated", "Station Eleven"],
    ),
    (
        "I signed the offer! I'll be working as a {x} at the city hospital starting next month.",
        "What new job did {who} accept?",
        "My cousin wants to become a {x} someday.",
        "single-hop",
        ["nurse practitioner", "radiology technician", "hospital pharmacist", "physical therapist"],
    ),
    (
        "My daughter won her first {x} match on Saturday, I screamed so loud!",
        "What sport does {who}'s daughter play?",
        "I used to play {x} in high school, I was terrible at it.",
        "single-hop",
        ["tennis", "soccer", "volleyball", "basketball", "badminton"],
    ),
    (
        "I painted a {x} last week, I'll send you a photo of it.",
        "When did {who} paint a {x}?",
        "I saw a painting of a {x} at the museum, gorgeous colours.",
        "temporal",
        ["sunrise over the sea", "lake at dusk", "field of sunflowers", "portrait of my grandma"],
    ),
    (
        "I've started volunteering at the {x} on Tuesdays, it feels so good to give back.",
        "Where does {who} volunteer?",
        "The {x} is looking for volunteers, I saw a flyer.",
        "single-hop",
        [
            "animal shelter",
            "food bank",
            "homeless shelter",
            "children's hospital",
            "community garden",
        ],
    ),
    (
        "We saw {x} live on Friday night — best concert of my life!",
        "Which band did {who} see in concert?",
        "My friend has tickets to see {x} next year.",
        "single-hop",
        [
            "Coldplay",
            "the Lumineers",
            "Arctic Monkeys",
            "Florence and the Machine",
            "Imagine Dragons",
        ],
    ),
    (
        "I've been researching {x} — I really want to make this happen.",
        "What has {who} been researching?",
        "I read an article about {x} the other day.",
        "single-hop",
        [
            "adoption agencies",
            "counseling degrees",
            "solar panels for the house",
            "moving to Canada",
        ],
    ),
    (
        "For the family dinner I cooked {x} and everyone asked for seconds.",
        "What did {who} cook for the family dinner in {month}?",
        "We ordered {x} from the new place down the street.",
        "dated",
        ["lasagna", "chicken curry", "beef stew", "vegetable paella", "roast salmon"],
    ),
]
MULTI = [
    (
        "I've been practising the {x} every evening, my neighbours must hate me.",
        "I signed up for {y} lessons too — my fingers hurt so much!",
        "What instruments does {who} play?",
        ["violin", "piano", "guitar", "cello", "clarinet"],
    ),
    (
        "I ran my first 5k this morning!",
        "Signed up for a half marathon in {y}, wish me luck.",
        "What running events has {who} done or signed up for?",
        ["spring", "October", "the autumn", "March"],
    ),
]


# Bridged multi-hop: the first fact names a bridge ({n}: a person or place); the second fact,
# later, speaks of the bridge only. The question asks through the first fact's words, so the
# evidence (the second fact) is reachable only by a second hop from the first fact's entities.
BRIDGES = [
    (
        "My brother {n} just got into medical school, we're all so proud!",
        "{n} already complains about the anatomy exams, he studies every single night.",
        "How is {who}'s brother getting on at medical school?",
        ["Tomas", "Ezra", "Jonah", "Felix"],
    ),
    (
        "My best friend {n} moved away last year, I miss her a lot.",
        "Called {n} for two hours yesterday — she's learning to sail and loves it.",
        "What new hobby did {who}'s best friend pick up?",
        ["Ines", "Clara", "Hana", "Rosa"],
    ),
    (
        "We finally moved to {n}! Boxes everywhere, but the view is worth it.",
        "Found a tiny bakery in {n} that makes the best cinnamon buns, I go every Sunday.",
        "Which bakery treat does {who} love in the town they moved to?",
        ["Ashford", "Millbrook", "Kingsport", "Elmwood"],
    ),
]
# Inference (open-domain): the answer follows from what was said, in other words entirely.
INFERENCES = [
    (
        "Every summer we take the tent up into the mountains for a week, no phones, just trails.",
        "Would {who} enjoy an outdoor holiday?",
    ),
    (
        "My son started kindergarten today and my daughter is already in second grade.",
        "Does {who} have children?",
    ),
    (
        "I have been shaping mugs and bowls at the clay studio every Sunday for a year now.",
        "Is {who} into any crafts?",
    ),
    (
        "Honestly the big parties drain me, I'd rather stay in with a book and tea.",
        "Is {who} an introvert or an extrovert?",
    ),
    # Work, tastes, means and plans, said in passing; asked as a judgement about the person.
    (
        "I teach maths to fourteen-year-olds, and marking their tests eats all my weekends.",
        "What might {who} do for a living?",
    ),
    (
        "I spend my days drawing floor plans and arguing with builders about load-bearing walls.",
        "What might {who} do for a living?",
    ),
    (
        "I've been vegetarian for ten years now, I can't even stand the smell of bacon.",
        "Would {who} like a steakhouse for a birthday dinner?",
    ),
    (
        "Our flat is tiny and the landlord doesn't allow any animals, not even a goldfish.",
        "Is {who} likely to adopt a dog soon?",
    ),
    (
        "Every spare penny goes to the mortgage and the car loan, we haven't eaten out in months.",
        "Is {who} likely to book a luxury cruise this year?",
    ),
    (
        "I get seasick just looking at boats, even the short ferry ride made me ill.",
        "Would {who} enjoy a sailing trip?",
    ),
    (
        "I've read every Agatha Christie novel at least twice, whodunits are my comfort reading.",
        "What kind of book would make a good present for {who}?",
    ),
    (
        "I grew up on a farm and I still wake up at five every morning without an alarm.",
        "Is {who} an early riser?",
    ),
    (
        "I'm terrified of heights, I couldn't even climb the church tower on holiday.",
        "Would {who} enjoy skydiving?",
    ),
    (
        "I hum show tunes all day, and I've seen Les Misérables on stage four times.",
        "Would {who} like tickets to a musical?",
    ),
    (
        "I volunteer at the crisis hotline and read every psychology book I can find, "
        "I'd love to make it my job one day.",
        "What field might {who} study if they went back to school?",
    ),
    (
        "We both sneeze the moment we walk into a house with a cat, the allergy is that bad.",
        "Would {who} want to look after a friend's kitten for a week?",
    ),
]
# Joined multi-hop: two facts said in different sessions (the first in the first half of the
# history, the second in the second half); the question needs both, and its words touch each
# only in part. Both are evidence. The other friend says a near-miss on the first one's topic.
# (first fact, second fact, question, near-miss, values for {x})
JOINS: list[tuple[str, str, str, str, list[str]]] = [
    (
        "My sister finally found a flat in {x}, she loves the neighbourhood.",
        "Booked my flights to visit my sister for her birthday, I can't wait to see her new place!",
        "Which city is {who} flying to for their sister's birthday?",
        "My cousin keeps saying I should visit {x} sometime.",
        ["Lisbon", "Edinburgh", "Montreal", "Seattle", "Dublin"],
    ),
    (
        "My knee has been bad since I fell on the {x}, the doctor says no more running for now.",
        "I've started swimming laps before work instead, it's so much gentler on my joints.",
        "What exercise did {who} switch to after hurting their knee?",
        "My coworker fell on the {x} last winter, he was on crutches for weeks.",
        ["ski slope", "icy stairs", "hiking trail", "basketball court"],
    ),
    (
        "My daughter says she'll be a {x} when she grows up, she practises on her stuffed animals.",
        "My son announced at dinner that he's going to build rockets, he's seven!",
        "What do {who}'s kids want to be when they grow up?",
        "When I was little I wanted to be a {x}, now look at me.",
        ["vet", "doctor", "dentist", "nurse"],
    ),
    (
        "We're putting money aside every month for a trip to {x}, I've dreamed of it since I was a kid.",
        "The plane tickets are bought! We leave in three weeks and I'm already packing in my head.",
        "Where is {who} going on the trip they saved up for?",
        "My boss just came back from {x}, she said it was too crowded.",
        ["Japan", "Peru", "Iceland", "Kenya", "New Zealand"],
    ),
    (
        "My grandmother turns ninety this spring, the whole family is planning a surprise for her.",
        "The party was perfect, Grandma danced with every one of the great-grandkids.",
        "How did {who}'s grandmother's ninetieth birthday go?",
        "My neighbour's grandfather just turned a hundred, there was cake out on the {x}.",
        ["street", "porch", "lawn"],
    ),
    (
        "I've started reading with kids at the {x} library on Wednesdays, as a volunteer tutor.",
        "One of my little readers got through a whole chapter book on his own today, I nearly cried.",
        "Where does {who} help the boy who finished a chapter book?",
        "The {x} library is closing for renovation next month.",
        ["Riverside", "Oakwood", "Maplewood", "Hillcrest"],
    ),
    (
        "My partner got offered a job in {x}, we have to decide by the end of the month.",
        "We said yes! The movers come in the autumn, the kids are nervous but excited.",
        "Which city is {who}'s family moving to?",
        "A friend of mine moved to {x} last year and hated the winters.",
        ["Denver", "Toronto", "Melbourne", "Austin", "Oslo"],
    ),
    (
        "My dad and I bought an old {x} together, she needs a lot of work but she's ours.",
        "We finally got her on the water, and the sails we stitched ourselves held up!",
        "Did {who} and their dad get the boat they bought working?",
        "There's an old {x} for sale at the marina, nobody wants it.",
        ["sailboat", "wooden dinghy", "fishing boat"],
    ),
]


def generate_dialogue(seed: int = 3, *, sessions: int = 28, turns: int = 22) -> Dataset:
    """Generate a LoCoMo-like conversation: two friends, dated sessions, evidence turns.

    Evidence ids look like LoCoMo's ("D<session>:<turn>"). Every event is planted once for
    each friend with different details, and the other friend says a near-miss on the same
    topic elsewhere, so speaker names and details must both match. Question kinds:
    `single-hop`, `temporal` (asks "when"; answered by the session's date), `dated` (names a
    month), `multi-hop` (evidence in two sessions: an aggregate, "what instruments does X
    play?", or a join whose answer needs both facts, "which city is X's family moving to?";
    recalled when either is in the top k, complete when both are), `bridge` (multi-hop
    through an entity: only the second fact is evidence, and it shares the bridge, not the
    question's words) and `inference` (open-domain: the answer follows from what the person
    said about their work, tastes, means or plans, phrased entirely differently).
    """
    rng = random.Random(seed)
    a, b = rng.choice(FRIENDS)
    start = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    days = [
        start + timedelta(days=sum(rng.randint(6, 20) for _ in range(s))) for s in range(sessions)
    ]
    planted: dict[int, list[tuple[str, str, str | None]]] = {}  # session -> (speaker, text, key)
    questions: list[tuple[str, list[str], str]] = []
    slots = list(range(sessions))

    def put(who: str, text: str, key: str | None, lo: int = 0, hi: int = sessions) -> int:
        s = rng.choice([s for s in slots if lo <= s < hi])
        planted.setdefault(s, []).append((who, text, key))
        return s

    for e, (said, asked, near, kind, values) in enumerate(EVENTS):
        picks = rng.sample(values, 3)
        for i, who in enumerate((a, b)):
            other = b if who == a else a
            x, y = picks[i], rng.choice(PET_NAMES)
            key = f"e{e}{who}"
            s = put(who, said.format(x=x, y=y), key)
            put(other, near.format(x=picks[2 - i] if i == 0 else picks[0]), None)
            month = days[s].strftime("%B %Y")
            questions.append((asked.format(who=who, x=x, month=month), [key], kind))
    for m, (first, second, asked, values) in enumerate(MULTI):
        who = (a, b)[m % 2]
        x, y = rng.sample(values, 2)
        put(who, first.format(x=x), f"m{m}a", 0, sessions // 2)
        put(who, second.format(y=y), f"m{m}b", sessions // 2, sessions)
        questions.append((asked.format(who=who), [f"m{m}a", f"m{m}b"], "multi-hop"))

    for m, (first, second, asked, values) in enumerate(BRIDGES):
        for i, who in enumerate((a, b)):
            n = values[(m + i) % len(values)] if i == 0 else values[(m + i + 1) % len(values)]
            put(who, first.format(n=n), f"b{m}{who}a", 0, sessions // 2)
            put(who, second.format(n=n), f"b{m}{who}b", sessions // 2, sessions)
            questions.append((asked.format(who=who), [f"b{m}{who}b"], "bridge"))
    for m, (said, asked) in enumerate(INFERENCES):
        who = (a, b)[m % 2]
        put(who, said, f"i{m}")
        questions.append((asked.format(who=who), [f"i{m}"], "inference"))
    for m, (first, second, asked, near, values) in enumerate(JOINS):
        who = (a, b)[m % 2]
        other = b if who == a else a
        x, y = rng.sample(values, 2)
        put(who, first.format(x=x), f"j{m}a", 0, sessions // 2)
        put(who, second, f"j{m}b", sessions // 2, sessions)
        put(other, near.format(x=y), None)
        questions.append((asked.format(who=who), [f"j{m}a", f"j{m}b"], "multi-hop"))

    data = Dataset()
    ids: dict[str, str] = {}
    for s in range(sessions):
        todo = list(planted.get(s, []))
        rng.shuffle(todo)
        turn, speaker = 0, rng.choice((a, b))
        while turn < turns or todo:
            turn += 1
            other = b if speaker == a else a
            if todo and todo[0][0] == speaker and rng.random() < 0.5:
                _, text, key = todo.pop(0)
            else:
                key = None
                text = (
                    rng.choice(CHATTER)
                    if rng.random() < 0.5
                    else rng.choice(ANSWERS).format(name=other)
                )
            mid = f"D{s + 1}:{turn}"
            data.lines.append(
                {
                    "session": f"session_{s + 1}",
                    "id": mid,
                    "ts": (days[s] + timedelta(seconds=30 * turn)).isoformat(),
                    "role": "user" if speaker == a else "assistant",
                    "speaker": speaker,
                    "content": text,
                }
            )
            if key:
                ids[key] = mid
            speaker = other
    for question, keys, kind in questions:
        data.questions.append(
            {"question": question, "evidence": [ids[k] for k in keys], "kind": kind}
        )
    return data
