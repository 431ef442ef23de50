"""The extractive rules of mining: general English constructions over the person's own lines.

Each construction family is one function over a `_Reading` of one sentence — people and how
they relate to the person, changes, choices, names, moves, places and times, the person's own
things, tastes, decisions — applied in the order of `RULES`: each claims the span it read,
so a later one does not read it again. A sentence with no fact of these but a first person
and a date is a plan. Questions and conditionals never reach here (`statements` skips them).
What a phrase is (a value, a place, a time, a subject) is read by `daemon.memory.mining_phrases`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from daemon.memory.mining_phrases import (
    BARE_DAY,
    DATE_LIKE,
    PRONOUNS,
    STATES,
    SUBJECT_STOP,
    TRANSIENT,
    bare_name,
    change_key,
    clean_value,
    is_gerund,
    norm_key,
    opens_clause,
    other_value,
    place_of,
    replaced_value,
    statement_text,
    subject_phrase,
    value_head,
    where_or_when,
)
from daemon.memory.text import STOP_WORDS

# People one has one of at a time: a new name is a change ("my dentist is now Dr Lee").
_SINGULAR = (
    "partner|wife|husband|boyfriend|girlfriend|fiancee|fiancée|fiance|fiancé|spouse|boss|"
    "manager|dentist|doctor|gp|therapist|landlord|landlady|accountant|lawyer|vet|mentor"
)
# People one may have several of: each name is its own fact.
_PLURAL = (
    "sister|brother|mother|mom|mum|father|dad|son|daughter|friend|best friend|colleague|"
    "coworker|co-worker|cousin|aunt|uncle|niece|nephew|grandmother|grandfather|grandma|"
    "grandpa|neighbour|neighbor|roommate|flatmate|teammate|stepmother|stepfather|"
    "sister-in-law|brother-in-law|mother-in-law|father-in-law|child|kid|baby"
)
_RELATION = rf"(?:{_SINGULAR}|{_PLURAL})"
_NAME = r"(?P<name>[A-Z][\w'’-]+(?: [A-Z][\w'’-]+)?)"
_NOT_NAMES = frozenset({"I", "I'm", "It", "The", "This", "That", "He", "She", "They", "We"})
_PLAN_MARK = re.compile(
    r"\b(?:will|'ll|going to|gonna|plan(?:ning)? to|booked|scheduled|have an?|has an?|'ve got|"
    r"am|are|is|'m|'re|meeting|appointment|flight|trip|party|wedding|dinner|interview)\b",
    re.I,
)
_PLAN_DATE = re.compile(
    r"\b(?:on (?:the )?\d{1,2}(?:st|nd|rd|th)?(?: of)? [A-Z][a-z]+|on [A-Z][a-z]+ \d{1,2}(?:st|nd|rd|th)?"
    r"|on (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|on \d{4}-\d{2}-\d{2}"
    r"|tomorrow|next (?:week|month|monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
    r"|in \d+ (?:days|weeks|months))\b",
    re.I,
)
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'll|we|we're|we've|we'll|my|our|me|us)\b", re.I)

_REL_IS_MY = re.compile(
    rf"\b{_NAME} is my (?P<rel>(?:younger |older |little |big |best )?{_RELATION})\b"
)
_MY_REL_NAME = re.compile(
    rf"\b[Mm]y (?P<rel>{_RELATION})(?:'s name is| is called| is named| is|,)? {_NAME}"
)
_MY_X_IS = re.compile(
    r"\bmy (?P<attr>(?:[a-z][\w'’-]* ){0,3}?[a-z][\w'’-]*) (?:is|are|'s) (?:now |still |actually )?"
    r"(?P<val>[^,;:]+)",
    re.I,
)
_CHANGE = re.compile(
    r"\b(?P<subj>(?:my|our|the) (?:[a-z][\w'’-]* ){0,3}?[a-z][\w'’-]*) (?:has |have |had |was |is |got |has been |have been )?"
    r"(?P<verb>moved|moves|moving|changed|changes|changing|switched|switches|shifted|shifts|"
    r"postponed|rescheduled|renamed|pushed|pushed back|brought forward)"
    r"(?: from (?P<old>[^,;]+?))? to (?P<new>[^,;]+)",
    re.I,
)
_THE_X_AT = re.compile(
    r"\b(?:the|our) (?P<subj>(?:[a-z][\w'’-]* ){0,3}?[a-z][\w'’-]*) (?:is|will be|takes place|happens|is happening) "
    r"(?:now |still |actually )?(?P<prep>in|at|on) (?P<val>[^,;]+)",
    re.I,
)
_THE_X_IS = re.compile(
    r"\b(?:the|our) (?P<subj>(?:[a-z][\w'’-]* ){0,3}?[a-z][\w'’-]*) (?:is going to be|are going to be|"
    r"'s going to be|will be|is|are) (?:now |still |actually )?(?P<val>[^,;:]+)",
    re.I,
)
# "I go to the gym on Fridays": the person's gym day.
_HABIT_DAY = re.compile(
    r"\bI (?:usually |always |normally |still )?(?:go|head|swim|train|work out|practise|practice) "
    r"(?:to (?:the )?)?(?P<what>[a-z][\w'’-]*) on (?P<day>(?:monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday)s?)\b",
    re.I,
)
# "I signed up for the Berlin half marathon": the half marathon's value is Berlin.
_SIGNED_UP = re.compile(
    r"\b(?:I|we)(?:'ve| have)? (?:just |finally )?(?:signed up for|registered for|entered|"
    r"enrolled in|joined) the (?P<val>[A-Z][\w'’-]*(?: [A-Z][\w'’-]*)*) "
    r"(?P<subj>[a-z][\w'’-]*(?: [a-z][\w'’-]*){0,2})"
)
# "I moved my gym day from Tuesday to Saturday", "we changed the nursery walls to ochre".
_CHANGED_BY_US = re.compile(
    r"\b(?:I|we)(?:'ve| have)? (?:just |finally |now )?(?P<verb>moved|changed|switched|shifted|"
    r"rescheduled|renamed|postponed|pushed|brought forward) (?P<subj>(?:my|our|the) "
    r"(?:[a-z][\w'’-]* ){0,3}?[a-z][\w'’-]*)(?: from (?P<old>[^,;]+?))? to (?P<new>[^,;]+)",
    re.I,
)
# "we picked terracotta for the nursery walls", "I booked Nomad for our anniversary dinner".
_PICKED_FOR = re.compile(
    r"\b(?:we|I)(?:'ve| have|'re|'m| are| am)? (?:finally |just |now |still )?(?:picked|chose|"
    r"went with|settled on|decided on|booked|got|doing|running|taking|using|choosing|going with|"
    r"sticking with|opting for) (?P<val>[^,;]+?) for (?P<subj>(?:the|our|my) (?:[a-z][\w'’-]* ){0,3}"
    r"[a-z][\w'’-]*)",
    re.I,
)
# The value first, then what it is: "Sunday is my gym day", "Heron is the codename they chose
# for the project", "Piranesi is this month's book club read".
_VALUE_FIRST = re.compile(
    r"^(?:so |well |and |ok |okay )?(?P<val>[A-Z][\w'’-]*(?: (?:of |and |the )*[A-Z][\w'’-]*)*) "
    r"(?:is|are|'s|will be|remains) (?:now |still |actually )?(?P<det>my|our|the|this|these|his|her|their)"
    r"(?: [a-z]+['’]s)? (?P<subj>[a-z][\w'’-]*(?: [a-z][\w'’-]*){0,3})",
)
# A relative clause or a preposition ends the noun phrase a value-first sentence names.
_PHRASE_END = frozenset(
    "i i'm we we're they they're he she you that which who whose where when for with at in on "
    "to from by of this next".split()
)
_JUDGED = re.compile(r"\b(?:\w+est|worst|best|first|last|least|most|only)\b", re.I)
_FOR_WHAT = re.compile(r"\bfor (?:the|our|my) (?P<what>[a-z][\w'’-]*(?: [a-z][\w'’-]*)?)\s*[.!]*$")
# A bare noun opening the sentence: "Gym is on Sunday for me these days".
_BARE_AT = re.compile(
    r"^(?P<subj>[A-Za-z][a-z'’-]+(?: [a-z][\w'’-]+)?) (?:is|are) (?:now |still |usually )?"
    r"(?P<prep>on|in|at) (?P<val>[^,;]+)"
)
# Naming: "we're calling the new project Heron", "they named the boat Skylark".
_CALLING = re.compile(
    r"\b(?i:(?:I|we|they|everyone|people)(?:'re|'ve| are| have)?(?: been| now| just)? "
    r"(?:calling|call|named|name|naming|renamed|christened) )(?P<subj>(?:the|our|my) "
    r"(?:[a-z][\w'’-]* ){0,2}[a-z][\w'’-]*) (?P<val>[A-Z][\w'’-]*(?: [A-Z][\w'’-]*)*)"
)
# Doing a thing somewhere: "we're doing the offsite in Bergen this time", "we're having the
# party at Nomad" — the place (a name) is where the thing is.
_DOING_AT = re.compile(
    r"\b(?i:(?:I|we|they)(?:'re|'ll|'ve| are| will| am|'m| have| just)? (?:be )?"
    r"(?:doing|having|holding|hosting|running|throwing|had|held|got|put|set|[a-z]+ed) )(?P<subj>(?:the|our|my) (?:[a-z][\w'’-]* ){0,2}[a-z][\w'’-]*) "
    r"(?P<prep>in|at) (?P<val>[A-Z][\w'’-]*(?: [A-Z][\w'’-]*)*)"
)
# A thing that went, or was sent, somewhere else: "the offsite got relocated to Kotor", "the
# offsite is going to Kotor", "the airline moved the Lisbon flight to 19 March" — any verb of
# motion in the past, with a new place or time that is a name or a date.
_WENT_TO = re.compile(
    r"\b(?:(?P<subj>(?i:the|our|my) (?:[A-Za-z][\w'’-]* ){0,3}?[a-z][\w'’-]*) (?i:is |was |got |"
    r"has |have |has been |have been )?(?i:[a-z]+ed|is going|going|goes|went|moves|moving)"
    r"|(?i:[a-z]+ed) (?P<obj>(?i:the|our|my) (?:[A-Za-z][\w'’-]* ){0,3}?[a-z][\w'’-]*))"
    r"(?: from (?P<old>[^,;]+?))? to (?P<new>[A-Z][\w'’-]*(?: [A-Z][\w'’-]*)*"
    r"|\d{1,2}(?:st|nd|rd|th)? [A-Z][a-z]+|(?i:(?:monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)s?))(?!['’]s)\b"
)
# Known by a name: "the project goes by Basalt", "the boat is called Skylark".
_GOES_BY = re.compile(
    r"\b(?P<subj>(?i:the|our|my) (?:[a-z][\w'’-]* ){0,2}[a-z][\w'’-]*) "
    r"(?i:goes by|is called|is named|is known as|now goes by) (?P<val>[A-Z][\w'’-]*(?: [A-Z][\w'’-]*)*)"
)
# Signing up for a thing somewhere: "registered for the half marathon in Berlin".
_SIGNED_UP_IN = re.compile(
    r"\b(?i:(?:signed up for|registered for|entered|enrolled in|booked) the )"
    r"(?P<subj>[a-z][\w'’-]*(?: [a-z][\w'’-]*){0,2}) in (?P<val>[A-Z][\w'’-]*(?: [A-Z][\w'’-]*)*)"
)
_FEELING = re.compile(
    r"\bI (?:really |absolutely |just |also |do |still |totally |kind of |kinda )*"
    r"(?P<verb>prefer|like|love|enjoy|adore|hate|dislike|detest|loathe|can't stand|cannot stand|"
    r"can’t stand|don't like|do not like|don’t like|don't mind)\b (?P<obj>[^,;:]+)",
    re.I,
)
_DECISION = re.compile(
    r"\b(?:we|I)(?:'ve| have)? (?:finally |just |now |already )?(?P<verb>decided|agreed|chose|"
    r"picked|settled on|went with|are going with|opted for|signed up for|booked)\b",
    re.I,
)
_RELATIVE = re.compile(
    r"\b(?:something|anything|everything|nothing|stuff|things?|what|which|that|who)\s+$", re.I
)


class _Reading:
    """One sentence as the rules read it: the facts found so far, and the spans they claim (a
    construction does not read again what another has read)."""

    def __init__(self, sentence: str) -> None:
        self.sentence = sentence
        self.found: list[dict[str, str]] = []
        self.taken: list[tuple[int, int]] = []

    def add(self, m: re.Match[str], **fact: str) -> None:
        if fact.get("subject") and not fact.get("replaces"):
            fact["replaces"] = replaced_value(self.sentence[m.start() :]) or other_value(
                self.sentence,
                fact.get("value", ""),
                f"{fact['subject']} {fact.get('attribute', '')}",
            )
        self.found.append({"text": statement_text(self.sentence, m.start()), **fact})
        self.taken.append(m.span())

    def free(self, m: re.Match[str]) -> bool:
        return not any(a < m.end() and m.start() < b for a, b in self.taken)


def _people(r: _Reading) -> None:
    """People and how they relate to the person: "Ana is my sister", "my dentist is Dr Lee"."""
    for m in _REL_IS_MY.finditer(r.sentence):
        name, rel = bare_name(m.group("name")), m.group("rel").lower()
        if name in _NOT_NAMES:
            continue
        single = re.fullmatch(_SINGULAR, rel.split()[-1]) is not None
        key = ("person", rel) if single else (norm_key(name), "relation")
        r.add(m, kind="person", subject=key[0], attribute=key[1],
            value=name if single else f"the person's {rel}")  # fmt: skip
    for m in _MY_REL_NAME.finditer(r.sentence):
        name, rel = bare_name(m.group("name")), m.group("rel").lower()
        if name in _NOT_NAMES or not r.free(m):
            continue
        single = re.fullmatch(_SINGULAR, rel) is not None
        key = ("person", rel) if single else (norm_key(name), "relation")
        r.add(m, kind="person", subject=key[0], attribute=key[1],
            value=name if single else f"the person's {rel}")  # fmt: skip


def _changes(r: _Reading) -> None:
    """A thing that changed, said of it or of what we did: "the offsite moved to Kotor", "I moved my gym day to Saturday"."""
    for m in _CHANGE.finditer(r.sentence):
        if not r.free(m):
            continue
        subj, new = m.group("subj"), clean_value(m.group("new"))
        if not new:
            continue
        key, new = change_key(subj, m.group("verb"), new)
        r.add(m, kind="change", subject=key[0], attribute=key[1], value=new,
            replaces=clean_value(m.group("old") or ""))  # fmt: skip
    for m in _CHANGED_BY_US.finditer(r.sentence):
        subj, new = m.group("subj"), clean_value(m.group("new"))
        if not r.free(m) or not new:
            continue
        key, new = change_key(subj, m.group("verb"), new)
        r.add(m, kind="change", subject=key[0], attribute=key[1], value=new,
            replaces=clean_value(m.group("old") or ""))  # fmt: skip


def _choices(r: _Reading) -> None:
    """What was signed up for, picked or booked, and for what: "we picked terracotta for the nursery walls"."""
    for m in _SIGNED_UP.finditer(r.sentence):
        if r.free(m):
            subj = norm_key(subject_phrase(m.group("subj")))
            r.add(m, kind="decision", subject=subj, attribute="value", value=m.group("val"))
    for m in _PICKED_FOR.finditer(r.sentence):
        val = clean_value(m.group("val"))
        if not r.free(m) or not val or val.split()[0].lower() in PRONOUNS | STATES:
            continue  # "I'm running late for the meeting": how, not what
        subj = subject_phrase(m.group("subj"))
        key = (
            ("person", norm_key(subj))
            if subj.lower().startswith("my ")
            else (norm_key(subj), "value")
        )
        r.add(m, kind="decision", subject=key[0], attribute=key[1], value=val)
    for m in _SIGNED_UP_IN.finditer(r.sentence):
        if r.free(m):
            subj = norm_key(subject_phrase(m.group("subj")))
            r.add(m, kind="decision", subject=subj, attribute="value", value=m.group("val"))


def _naming(r: _Reading) -> None:
    """What a thing is being called: "we're calling the new project Heron"."""
    for m in _CALLING.finditer(r.sentence):
        if r.free(m):
            subj = norm_key(subject_phrase(m.group("subj")))
            r.add(m, kind="fact", subject=subj, attribute="value", value=m.group("val"))


def _moves(r: _Reading) -> None:
    """A thing that went, or was sent, somewhere or to some time else."""
    for m in _WENT_TO.finditer(r.sentence):
        phrase = m.group("subj") or m.group("obj")
        new = clean_value(m.group("new"))
        if not r.free(m) or not new or norm_key(phrase).split()[-1:] in (["way"], ["back"]):
            continue
        if m.group("obj") and not (m.group("old") or DATE_LIKE.search(new)):
            continue  # "I walked the dog to Anna": taking a thing somewhere is no change of it
        if re.fullmatch(_RELATION, norm_key(phrase).split()[-1].removesuffix("s")):
            continue  # "my mum went to Paris": a person's trip, not a value of theirs
        key, new = change_key(phrase, "moved", new)
        r.add(m, kind="change", subject=key[0], attribute=key[1], value=new,
            replaces=clean_value(m.group("old") or ""))  # fmt: skip


def _known_by(r: _Reading) -> None:
    """What a thing goes by: "the boat is called Skylark"."""
    for m in _GOES_BY.finditer(r.sentence):
        if r.free(m):
            subj = norm_key(subject_phrase(m.group("subj")))
            r.add(m, kind="fact", subject=subj, attribute="value", value=m.group("val"))


def _doings(r: _Reading) -> None:
    """Where a thing is being done: "we're having the party at Nomad"."""
    for m in _DOING_AT.finditer(r.sentence):
        val = clean_value(m.group("val"))
        if r.free(m) and val:
            attr = where_or_when(val)
            r.add(m, kind="plan", subject=norm_key(subject_phrase(m.group("subj"))),
                attribute=attr, value=val)  # fmt: skip


def _value_first(r: _Reading) -> None:
    """The value first, then what it is: "Sunday is my gym day"."""
    for m in _VALUE_FIRST.finditer(r.sentence):
        val = m.group("val")
        if (
            not r.free(m)
            or val.split()[0] in _NOT_NAMES
            or (val.lower() in STOP_WORDS and not BARE_DAY.fullmatch(val))
        ):
            continue  # "Anyway is the best": a r.sentence's first word, not a name
        words = m.group("subj").split()
        cut = next((i for i, w in enumerate(words) if w.lower() in _PHRASE_END), len(words))
        phrase = " ".join(words[:cut])
        last = phrase.split()[-1].lower() if phrase else ""
        if not phrase or phrase.lower() in TRANSIENT or last in STATES or _JUDGED.search(phrase):
            continue  # "X is the best", "X is my problem": a judgement, not a value
        if m.group("det") == "my":
            subj, attr = "person", norm_key(phrase)
        else:
            # "the codename they chose for the project": the project's codename.
            what = _FOR_WHAT.search(r.sentence[m.start("subj") :])
            subj = norm_key(f"{what.group('what')} {phrase}" if what else phrase)
            attr = "value"
        if re.fullmatch(_RELATION, norm_key(phrase)):
            continue  # "Tomas is my brother": a relation, read above
        r.add(m, kind="fact", subject=subj, attribute=attr, value=val)


def _places_and_times(r: _Reading) -> None:
    """Where or when a thing is: "Gym is on Sunday for me", "the dinner is at Nomad"."""
    for m in _BARE_AT.finditer(r.sentence):
        val = clean_value(m.group("val"))
        subj = norm_key(m.group("subj"))
        if not r.free(m) or not val or subj.split()[0] in SUBJECT_STOP or subj in PRONOUNS:
            continue
        if m.group("subj").split()[0] in _NOT_NAMES:
            continue
        if not (val[:1].isupper() or DATE_LIKE.match(val)):
            continue  # "work is on fire": a place or a time is a name or a date
        attr = where_or_when(val)
        val = (place_of(val) if attr == "where" else value_head(val)) or val
        r.add(m, kind="plan" if attr == "when" else "fact", subject=subj, attribute=attr,
            value=val)  # fmt: skip
    for m in _THE_X_AT.finditer(r.sentence):
        val = clean_value(m.group("val"))
        if not r.free(m) or not val:
            continue
        attr = where_or_when(val)  # "on Friday" is when; "on Main Street" where
        val = (place_of(val) if attr == "where" else value_head(val)) or val
        r.add(m, kind="plan" if attr == "when" else "fact", subject=norm_key(m.group("subj")),
            attribute=attr, value=val)  # fmt: skip


def _the_x_is(r: _Reading) -> None:
    """What a thing is: "the codename is Heron" (not how it is: "the shop is closed")."""
    for m in _THE_X_IS.finditer(r.sentence):
        val = clean_value(m.group("val"))
        if not r.free(m) or not val or is_gerund(val) or val.split()[0].lower() in STATES:
            continue
        if (
            not opens_clause(r.sentence, m.start())
            or norm_key(m.group("subj")).split()[-1] in TRANSIENT
        ):
            continue
        attr = "value"
        done = re.match(
            r"\w+ed (in|at|on) (.+)", val
        )  # "is booked at Nomad": the place is the value
        if done:
            attr = where_or_when(done.group(2))
            val = (place_of(done.group(2)) if attr == "where" else value_head(done.group(2))) or val
        r.add(m, kind="fact", subject=norm_key(m.group("subj")), attribute=attr, value=val)


def _habits(r: _Reading) -> None:
    """The day of a habit: "I go to the gym on Fridays"."""
    for m in _HABIT_DAY.finditer(r.sentence):
        if r.free(m):
            r.add(m, kind="fact", subject="person", attribute=f"{norm_key(m.group('what'))} day",
                value=m.group("day").capitalize().rstrip("s"))  # fmt: skip


def _my_x_is(r: _Reading) -> None:
    """The person's own things: "my gym is called FitLife", "my flight is on Friday"."""
    for m in _MY_X_IS.finditer(r.sentence):
        attr, val = norm_key(m.group("attr")), clean_value(m.group("val"))
        if not r.free(m) or not val or not attr or attr in TRANSIENT:
            continue
        if not opens_clause(r.sentence, m.start()):
            continue  # "growing my customer base is …": "my X" is not what the r.sentence is about
        if re.fullmatch(_RELATION, attr) and not val[:1].isupper():
            continue  # "my sister is visiting": about the sister, not who she is
        if is_gerund(val):
            continue
        first = val.split()[0].lower()
        if first in ("called", "named") and len(val.split()) > 1:
            attr, val = f"{attr} name", val.split(maxsplit=1)[1]  # "my gym is called FitLife"
            r.add(m, kind="fact", subject="person", attribute=attr, value=val)
            continue
        if first in STATES:
            r.add(
                m, kind="fact"
            )  # a state of the thing ("my gym is open until ten"), not its value
            continue
        if first in ("in", "at", "on"):
            val = (value_head(val) if where_or_when(val) == "when" else place_of(val)) or val
        # "my X": the person's X, whatever the value says (a place, a day, a name).
        r.add(m, kind="fact", subject="person", attribute=attr, value=val)


def _feelings(r: _Reading) -> None:
    """Tastes: "I prefer tea over coffee", "I hate early meetings"."""
    for m in _FEELING.finditer(r.sentence):
        obj = clean_value(m.group("obj"))
        if not r.free(m) or len(obj) < 4 or obj.split()[0].lower() in PRONOUNS:
            continue  # "I like it", "I love how you …": about something said, not a taste
        if _RELATIVE.search(r.sentence[: m.start()]):
            continue  # "something I love is …": the verb belongs to a relative clause
        verb = m.group("verb").lower().replace("’", "'")
        pair = re.split(r"\s+(?:over|to|rather than|instead of|more than)\s+", obj, maxsplit=1)
        if verb == "prefer" and len(pair) == 2:
            a, b = sorted(norm_key(p) for p in pair)
            attr = f"choice between {a} and {b}"
        else:
            attr = f"feeling about {norm_key(obj)}"
        r.add(m, kind="preference", subject="person", attribute=attr, value=verb)


def _decisions(r: _Reading) -> None:
    """A decision without a value the rules can read: "we decided to go"."""
    for m in _DECISION.finditer(r.sentence):
        if r.free(m):
            r.add(m, kind="decision")


# The constructions in the order they read a sentence: a span one claims, the later ones leave.
RULES: tuple[Callable[[_Reading], None], ...] = (
    _people,
    _changes,
    _choices,
    _naming,
    _moves,
    _known_by,
    _doings,
    _value_first,
    _places_and_times,
    _the_x_is,
    _habits,
    _my_x_is,
    _feelings,
    _decisions,
)


def rules_for(sentence: str) -> list[dict[str, str]]:
    """The facts one sentence of the person's states, by the extractive rules (may be empty)."""
    reading = _Reading(sentence)
    for rule in RULES:
        rule(reading)
    found = reading.found
    if sentence.lower().startswith(("you ", "you'", "your ")):
        return found  # about the listener, not the person's own plan
    if not found and _FIRST_PERSON.search(sentence) and _PLAN_DATE.search(sentence):
        if _PLAN_MARK.search(sentence):
            found.append({"text": statement_text(sentence, 0), "kind": "plan"})
    return found
