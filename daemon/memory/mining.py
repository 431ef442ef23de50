"""Facts mined from conversation: the extractive rules, the model's prompt, and what both yield.

Sleep reads the day's sessions line by line (`Line`: who said it, whose word it carries) and
turns what was said in passing into `MinedFact`s: decisions, preferences, people and how
they relate to the person, dates and plans, things that changed. Two sources:

- **rules** (offline, no model): general English patterns over the person's own lines (the
  user side of a conversation) — "my X is Y", "I prefer / love / hate …", "Ana is my sister",
  "we decided …", "the offsite moves to Kotor", "… on Friday". Questions and conditionals
  ("if my flight is late") state nothing and are skipped.
- **the model** (`daemon.memory.mining_model`): the dreams role is shown every line with
  its id and origin and answers through one tool whose input is JSON-schema'd; a fact keeps
  only the ids it cites that were shown, and its origin is the weakest of theirs.

A fact may carry a key — `subject` and `attribute` ("person" / "dentist", "offsite" /
"where") — so a later fact with the same key and another value is a change of the same
knowledge, not a second fact (`daemon.memory.facts.FactStore.record_mined`). A change the
rules cannot read is caught from the stored fact's side (`daemon.memory.slots`).

Size: the extractive rules are one set — the constructions read one sentence together, each
claiming its span so that another does not read it again — and are kept in one module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo

from daemon.memory.dates import resolve_dates
from daemon.memory.slots import says_change, value_shape, values_of_shape
from daemon.memory.text import STOP_WORDS

# Weakest last, as in `daemon.agent.provenance`: a fact is as trusted as its weakest source.
_STRENGTH = ("person", "agent", "tool")
KINDS = ("preference", "person", "decision", "plan", "change", "fact")
MAX_MINED_CHARS = 300


@dataclass(frozen=True, kw_only=True)
class Line:
    """One line of a session as mining reads it."""

    session: str
    id: str  # the message id (a tool result: "tool:<call id>")
    ts: datetime
    role: str  # user | assistant | tool
    origin: str  # person | agent | tool: whose word the text carries
    text: str


@dataclass(frozen=True, kw_only=True)
class MinedFact:
    """A durable fact found in conversation, with where it came from."""

    text: str
    kind: str
    origin: str
    session: str
    message_ids: tuple[str, ...]
    said_at: datetime  # when it was said: the fact's valid-from
    subject: str = ""
    attribute: str = ""
    value: str = ""
    replaces: str = ""  # the value the line says this one replaces ("from Bergen", "not Berlin")
    supersedes: str = ""  # the id of the fact it is known to replace (a slot said again)
    uncertain: bool = False  # the new value could not be told: the sentence stands in for it

    @property
    def key(self) -> tuple[str, str] | None:
        return (self.subject, self.attribute) if self.subject and self.attribute else None


def weakest(origins: Iterable[str]) -> str:
    """The least trusted of `origins` (an unknown origin counts as "tool")."""
    rank = max(
        (_STRENGTH.index(o) if o in _STRENGTH else len(_STRENGTH) - 1 for o in origins),
        default=len(_STRENGTH) - 1,
    )
    return _STRENGTH[rank]


def norm_key(text: str) -> str:
    """A subject or attribute as a key: lower case, no article or possessive, single spaces."""
    bare = re.sub(r"['’]s\b", "", text.lower())  # "the project's codename": project codename
    words = re.sub(r"[^\w\s'-]", " ", bare).split()
    while words and words[0] in ("my", "our", "the", "a", "an", "his", "her", "their"):
        words = words[1:]
    return " ".join(words)[:60]


# --- the rules ------------------------------------------------------------------------------

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
# Words after "my" that name a passing state, not a lasting fact ("my day is going well").
_TRANSIENT = frozenset(
    "day week morning evening night afternoon weekend point question guess bad fault turn "
    "pleasure mind head back stomach phone battery answer idea impression bet problem issue "
    "mistake concern hope plan thought gut feeling understanding apologies god goodness weather "
    "traffic".split()
)
_CUT = re.compile(
    r"\s+(?:and|but|because|so|though|although|which|since|while|unless|whereas|if)\s+"
    r"|\s+[-–—]\s+",
    re.I,
)
_SKIP_SENTENCE = re.compile(
    r"^\s*(?:if|when|whenever|unless|maybe|perhaps|what if|suppose|imagine|in case|do|does|did|"
    r"is|are|can|could|would|should|will|shall)\b",
    re.I,
)
_DATE_LIKE = re.compile(
    r"\b(?:(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?|today|tonight|tomorrow|"
    r"yesterday|next|this|january|february|march|april|may|june|july|august|september|october|"
    r"november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|morning|noon|"
    r"midnight|weekend|week|month|year)\b|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}(?::\d{2})?\s*(?:am|pm)\b"
    r"|\b\d{1,2}(?:st|nd|rd|th)\b|\b\d{1,2}:\d{2}\b",
    re.I,
)
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
_MOVE_VERBS = frozenset(
    "moved moves moving shifted shifts postponed rescheduled pushed brought".split()
)
# Words that say how a thing is, not what it is: such a sentence is a fact, not a value.
_STATES = frozenset(
    "open closed busy free late early good bad great fine ok okay broken sick tired happy sad "
    "done ready full empty available away back out off up down over new old nice lovely awful "
    "terrible amazing beautiful cold hot warm sunny rainy wet dry quiet loud boring fun hard easy "
    "tough crazy weird strange perfect wonderful horrible".split()
)
# Words after which "my X is" opens a clause (so "my X" is its subject).
_CLAUSE_OPENERS = frozenset(
    "and but so because now also actually well oh yes yeah no okay ok anyway btw plus then "
    "still though and, since as i think guess believe know".split()
)
_RELATIVE = re.compile(
    r"\b(?:something|anything|everything|nothing|stuff|things?|what|which|that|who)\s+$", re.I
)


def _opens_clause(sentence: str, start: int) -> bool:
    before = sentence[:start].rstrip()
    if not before or before[-1] in ",;:-–—(\"'":
        return True
    return before.split()[-1].lower() in _CLAUSE_OPENERS


def _bare_name(name: str) -> str:
    """A name without a possessive ("Sara's birthday" names Sara)."""
    return re.sub(r"['’]s$", "", name)


_PRONOUNS = frozenset(
    "it that this these those them you him her one how what when where why to".split()
)
_SENTENCE = re.compile(r"[^.!?;\n]+[.!?]*")


def _clean_value(text: str) -> str:
    value = _CUT.split(text, maxsplit=1)[0]
    # What it is no longer, and when it became so, are not the value ("Sunday now instead of …").
    value = re.split(r",?\s+(?:instead of|rather than|not)\s+|,\s*not\b", value, maxsplit=1)[0]
    value = re.sub(
        r"(?:\s+(?:now|after all|anymore|any more|these days|from now on))+\s*[.!]*\s*$",
        "",
        value,
    )
    value = re.sub(r"\s+", " ", value).strip(" \t\"'“”’.!")
    words = value.split()
    return " ".join(words[:10])


_PREP = re.compile(r"\s+(?:in|on|at|by|for|from|until|till|before|after|during|with)\s+", re.I)


def _head(value: str) -> str:
    """The first phrase of a value ("Bergen" of "Bergen in May"): what a change replaces."""
    value = re.sub(r"^(?:in|on|at)\s+", "", value, flags=re.I)
    return _PREP.split(value, maxsplit=1)[0].strip()


_DAY_MONTH = re.compile(r"\d{1,2}(?:st|nd|rd|th)?(?: of)? [A-Z][a-z]+\b")


def _where_or_when(value: str) -> str:
    head = _head(value)
    return "when" if _DATE_LIKE.match(head) or _DAY_MONTH.match(head) else "where"


def _place(value: str) -> str:
    """A place without the time said with it ("Bergen" of "Bergen this year")."""
    head = _head(value)
    m = _DATE_LIKE.search(head)
    return (head[: m.start()] if m and m.start() > 0 else head).strip()


_SUBJECT_STOP = frozenset(
    "on in at next this tomorrow tonight today with by from to and but so because after before "
    "for of instead".split()
)


def _subject_phrase(phrase: str) -> str:
    """A noun phrase cut where a time or another clause begins ("our dinner next week")."""
    words = phrase.split()
    for i, word in enumerate(words[1:], start=1):
        if word.lower() in _SUBJECT_STOP:
            return " ".join(words[:i])
    return phrase


_NOT_OLD = re.compile(
    r"(?:,?\s+not|\binstead of|\brather than|\bno longer)\s+(?:the\s+|at\s+|in\s+|on\s+)?"
    r"(?P<old>[^,;.!?]+)",
    re.I,
)


def _replaced(text: str) -> str:
    """The value a statement says it replaces: "Copenhagen now, not Berlin" → "Berlin"."""
    m = _NOT_OLD.search(text)
    return " ".join(_clean_value(m.group("old")).split()[:4]) if m else ""


def _change_key(subj: str, verb: str, new: str) -> tuple[tuple[str, str], str]:
    """The key and value a change states: "my X" is the person's X; "the X" moved has a new
    place or time, otherwise a new value."""
    if subj.lower().startswith("my "):
        return ("person", norm_key(subj)), _head(new) or new
    if verb.split()[0].lower() in _MOVE_VERBS:
        attr = _where_or_when(new)
        return (norm_key(subj), attr), (_place(new) if attr == "where" else _head(new)) or new
    return (norm_key(subj), "value"), new


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for m in _SENTENCE.finditer(text):
        s = " ".join(m.group(0).split())
        if not s or s.endswith("?") or _SKIP_SENTENCE.match(s):
            continue  # a question or a condition states nothing
        out.append(s)
    return out


def _statement(sentence: str, start: int) -> str:
    """The fact's text: the sentence, or from the match when the sentence is long."""
    text = sentence if len(sentence) <= 200 else sentence[start:]
    text = text.strip()
    if len(text) > MAX_MINED_CHARS:
        text = text[:MAX_MINED_CHARS].rsplit(" ", 1)[0] + " …"
    return text[:1].upper() + text[1:]


def _gerund(value: str) -> bool:
    first = value.split()[0].lower() if value.split() else ""
    return first.endswith("ing") or first in (
        "not",
        "so",
        "too",
        "very",
        "really",
        "kinda",
        "a bit",
    )


# A weekday said of a habit ("the gym moves to Saturday", "my gym day is Tuesday", "every
# Friday") names a day of every week, not one date: resolving it would make a lasting fact
# look like a dated plan that sleep retires once that date has passed.
_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_ONE_OFF_DAY = re.compile(rf"\b(?:this|next|last|coming)\s+{_DAY}\b", re.I)
_EVERY_DAY = re.compile(rf"\b(?:every|each)(?: other)?\s+{_DAY}\b", re.I)
_HABIT_CUE = re.compile(
    r"\b(?:usually|always|normally|generally|typically|regularly|weekly|every week|each week|"
    r"any ?more|no longer|from now on|these days|nowadays|most weeks)\b"
    r"|\b(?:my|our|his|her|their) (?!big |special |last |first |wedding )[a-z][\w'’-]* (?:day|night)s?\b"
    r"|\bI (?:usually |always |normally |still )?(?:go|head|swim|train|work out|practise|practice"
    rf"|play|run|cycle|climb|volunteer|teach|work)\b[^.;]*\bon {_DAY}\b",
    re.I,
)
# A move of a habit (not of one event) to another weekday: "the gym moves to Saturday".
_MOVED_TO_DAY = re.compile(
    rf"\b(?P<subj>[a-z][\w'’-]*)(?: day)? (?:has |have |is |was )?(?:moved|moves|moving|shifted|shifts|"
    rf"switched|switches|changed|changes) (?:from {_DAY} )?to {_DAY}\b",
    re.I,
)
_ONE_OFF_THINGS = frozenset(
    "party dinner lunch breakfast wedding flight trip appointment interview meeting offsite "
    "visit date call deadline launch show concert match game exam surgery funeral ceremony "
    "delivery move viewing reservation booking".split()
)
_BARE_DAY = re.compile(rf"\b{_DAY}\b(?!\s*\()", re.I)


def recurring_days(text: str) -> bool:
    """True when the weekdays in `text` name a day of every week, not one date."""
    if _ONE_OFF_DAY.search(text):
        return False  # "this Saturday", "next Tuesday": a date, whatever else is said
    if _EVERY_DAY.search(text) or _HABIT_CUE.search(text):
        return True
    moved = _MOVED_TO_DAY.search(text)
    return moved is not None and moved.group("subj").lower() not in _ONE_OFF_THINGS


def resolve_plan_dates(text: str, now: datetime, *, recurring: bool | None = None) -> str:
    """`resolve_dates`, except that a weekday of a habit stays a weekday (see `recurring_days`;
    `recurring` says so when the caller knows better than the text, as from the line it cites)."""
    if not (recurring_days(text) if recurring is None else recurring):
        return resolve_dates(text, now)
    days: list[str] = []

    def hold(m: re.Match[str]) -> str:
        days.append(m.group(0))
        return f"\ue000{len(days) - 1}\ue001"

    held = resolve_dates(_BARE_DAY.sub(hold, text), now)
    return re.sub("\ue000(\\d+)\ue001", lambda m: days[int(m.group(1))], held)


def other_value(sentence: str, value: str, subject: str) -> str:
    """The value a sentence of change replaces when it names two of one shape: "scratch Bergen,
    the offsite is going to Kotor" — Kotor the new, so Bergen the old ("" when not exactly one)."""
    if not value or not says_change(sentence):
        return ""
    shape = value_shape(value)
    new, words = norm_key(value), set(norm_key(subject).split())
    others = [
        (start, found)
        for start, found in values_of_shape(sentence, shape)
        if norm_key(found) != new
        and norm_key(found) not in new
        and not set(norm_key(found).split()) & words
    ]
    if len(others) > 1:
        others = [(start, found) for start, found in others if start > 0]
    return others[0][1] if len(others) == 1 else ""


def rules_for(sentence: str) -> list[dict[str, str]]:
    """The facts one sentence of the person's states, by the extractive rules (may be empty)."""
    found: list[dict[str, str]] = []
    taken: list[tuple[int, int]] = []

    def add(m: re.Match[str], **fact: str) -> None:
        if fact.get("subject") and not fact.get("replaces"):
            fact["replaces"] = _replaced(sentence[m.start() :]) or other_value(
                sentence, fact.get("value", ""), f"{fact['subject']} {fact.get('attribute', '')}"
            )
        found.append({"text": _statement(sentence, m.start()), **fact})
        taken.append(m.span())

    def free(m: re.Match[str]) -> bool:
        return not any(a < m.end() and m.start() < b for a, b in taken)

    for m in _REL_IS_MY.finditer(sentence):
        name, rel = _bare_name(m.group("name")), m.group("rel").lower()
        if name in _NOT_NAMES:
            continue
        single = re.fullmatch(_SINGULAR, rel.split()[-1]) is not None
        key = ("person", rel) if single else (norm_key(name), "relation")
        add(m, kind="person", subject=key[0], attribute=key[1],
            value=name if single else f"the person's {rel}")  # fmt: skip
    for m in _MY_REL_NAME.finditer(sentence):
        name, rel = _bare_name(m.group("name")), m.group("rel").lower()
        if name in _NOT_NAMES or not free(m):
            continue
        single = re.fullmatch(_SINGULAR, rel) is not None
        key = ("person", rel) if single else (norm_key(name), "relation")
        add(m, kind="person", subject=key[0], attribute=key[1],
            value=name if single else f"the person's {rel}")  # fmt: skip
    for m in _CHANGE.finditer(sentence):
        if not free(m):
            continue
        subj, new = m.group("subj"), _clean_value(m.group("new"))
        if not new:
            continue
        key, new = _change_key(subj, m.group("verb"), new)
        add(m, kind="change", subject=key[0], attribute=key[1], value=new,
            replaces=_clean_value(m.group("old") or ""))  # fmt: skip
    for m in _CHANGED_BY_US.finditer(sentence):
        subj, new = m.group("subj"), _clean_value(m.group("new"))
        if not free(m) or not new:
            continue
        key, new = _change_key(subj, m.group("verb"), new)
        add(m, kind="change", subject=key[0], attribute=key[1], value=new,
            replaces=_clean_value(m.group("old") or ""))  # fmt: skip
    for m in _SIGNED_UP.finditer(sentence):
        if free(m):
            subj = norm_key(_subject_phrase(m.group("subj")))
            add(m, kind="decision", subject=subj, attribute="value", value=m.group("val"))
    for m in _PICKED_FOR.finditer(sentence):
        val = _clean_value(m.group("val"))
        if not free(m) or not val or val.split()[0].lower() in _PRONOUNS | _STATES:
            continue  # "I'm running late for the meeting": how, not what
        subj = _subject_phrase(m.group("subj"))
        key = (
            ("person", norm_key(subj))
            if subj.lower().startswith("my ")
            else (norm_key(subj), "value")
        )
        add(m, kind="decision", subject=key[0], attribute=key[1], value=val)
    for m in _SIGNED_UP_IN.finditer(sentence):
        if free(m):
            subj = norm_key(_subject_phrase(m.group("subj")))
            add(m, kind="decision", subject=subj, attribute="value", value=m.group("val"))
    for m in _CALLING.finditer(sentence):
        if free(m):
            subj = norm_key(_subject_phrase(m.group("subj")))
            add(m, kind="fact", subject=subj, attribute="value", value=m.group("val"))
    for m in _WENT_TO.finditer(sentence):
        phrase = m.group("subj") or m.group("obj")
        new = _clean_value(m.group("new"))
        if not free(m) or not new or norm_key(phrase).split()[-1:] in (["way"], ["back"]):
            continue
        if m.group("obj") and not (m.group("old") or _DATE_LIKE.search(new)):
            continue  # "I walked the dog to Anna": taking a thing somewhere is no change of it
        if re.fullmatch(_RELATION, norm_key(phrase).split()[-1].removesuffix("s")):
            continue  # "my mum went to Paris": a person's trip, not a value of theirs
        key, new = _change_key(phrase, "moved", new)
        add(m, kind="change", subject=key[0], attribute=key[1], value=new,
            replaces=_clean_value(m.group("old") or ""))  # fmt: skip
    for m in _GOES_BY.finditer(sentence):
        if free(m):
            subj = norm_key(_subject_phrase(m.group("subj")))
            add(m, kind="fact", subject=subj, attribute="value", value=m.group("val"))
    for m in _DOING_AT.finditer(sentence):
        val = _clean_value(m.group("val"))
        if free(m) and val:
            attr = _where_or_when(val)
            add(m, kind="plan", subject=norm_key(_subject_phrase(m.group("subj"))),
                attribute=attr, value=val)  # fmt: skip
    for m in _VALUE_FIRST.finditer(sentence):
        val = m.group("val")
        if (
            not free(m)
            or val.split()[0] in _NOT_NAMES
            or (val.lower() in STOP_WORDS and not _BARE_DAY.fullmatch(val))
        ):
            continue  # "Anyway is the best": a sentence's first word, not a name
        words = m.group("subj").split()
        cut = next((i for i, w in enumerate(words) if w.lower() in _PHRASE_END), len(words))
        phrase = " ".join(words[:cut])
        last = phrase.split()[-1].lower() if phrase else ""
        if not phrase or phrase.lower() in _TRANSIENT or last in _STATES or _JUDGED.search(phrase):
            continue  # "X is the best", "X is my problem": a judgement, not a value
        if m.group("det") == "my":
            subj, attr = "person", norm_key(phrase)
        else:
            # "the codename they chose for the project": the project's codename.
            what = _FOR_WHAT.search(sentence[m.start("subj") :])
            subj = norm_key(f"{what.group('what')} {phrase}" if what else phrase)
            attr = "value"
        if re.fullmatch(_RELATION, norm_key(phrase)):
            continue  # "Tomas is my brother": a relation, read above
        add(m, kind="fact", subject=subj, attribute=attr, value=val)
    for m in _BARE_AT.finditer(sentence):
        val = _clean_value(m.group("val"))
        subj = norm_key(m.group("subj"))
        if not free(m) or not val or subj.split()[0] in _SUBJECT_STOP or subj in _PRONOUNS:
            continue
        if m.group("subj").split()[0] in _NOT_NAMES:
            continue
        if not (val[:1].isupper() or _DATE_LIKE.match(val)):
            continue  # "work is on fire": a place or a time is a name or a date
        attr = _where_or_when(val)
        val = (_place(val) if attr == "where" else _head(val)) or val
        add(m, kind="plan" if attr == "when" else "fact", subject=subj, attribute=attr,
            value=val)  # fmt: skip
    for m in _THE_X_AT.finditer(sentence):
        val = _clean_value(m.group("val"))
        if not free(m) or not val:
            continue
        attr = _where_or_when(val)  # "on Friday" is when; "on Main Street" where
        val = (_place(val) if attr == "where" else _head(val)) or val
        add(m, kind="plan" if attr == "when" else "fact", subject=norm_key(m.group("subj")),
            attribute=attr, value=val)  # fmt: skip
    for m in _THE_X_IS.finditer(sentence):
        val = _clean_value(m.group("val"))
        if not free(m) or not val or _gerund(val) or val.split()[0].lower() in _STATES:
            continue
        if (
            not _opens_clause(sentence, m.start())
            or norm_key(m.group("subj")).split()[-1] in _TRANSIENT
        ):
            continue
        attr = "value"
        done = re.match(
            r"\w+ed (in|at|on) (.+)", val
        )  # "is booked at Nomad": the place is the value
        if done:
            attr = _where_or_when(done.group(2))
            val = (_place(done.group(2)) if attr == "where" else _head(done.group(2))) or val
        add(m, kind="fact", subject=norm_key(m.group("subj")), attribute=attr, value=val)
    for m in _HABIT_DAY.finditer(sentence):
        if free(m):
            add(m, kind="fact", subject="person", attribute=f"{norm_key(m.group('what'))} day",
                value=m.group("day").capitalize().rstrip("s"))  # fmt: skip
    for m in _MY_X_IS.finditer(sentence):
        attr, val = norm_key(m.group("attr")), _clean_value(m.group("val"))
        if not free(m) or not val or not attr or attr in _TRANSIENT:
            continue
        if not _opens_clause(sentence, m.start()):
            continue  # "growing my customer base is …": "my X" is not what the sentence is about
        if re.fullmatch(_RELATION, attr) and not val[:1].isupper():
            continue  # "my sister is visiting": about the sister, not who she is
        if _gerund(val):
            continue
        first = val.split()[0].lower()
        if first in ("called", "named") and len(val.split()) > 1:
            attr, val = f"{attr} name", val.split(maxsplit=1)[1]  # "my gym is called FitLife"
            add(m, kind="fact", subject="person", attribute=attr, value=val)
            continue
        if first in _STATES:
            add(m, kind="fact")  # a state of the thing ("my gym is open until ten"), not its value
            continue
        if first in ("in", "at", "on"):
            val = (_head(val) if _where_or_when(val) == "when" else _place(val)) or val
        # "my X": the person's X, whatever the value says (a place, a day, a name).
        add(m, kind="fact", subject="person", attribute=attr, value=val)
    for m in _FEELING.finditer(sentence):
        obj = _clean_value(m.group("obj"))
        if not free(m) or len(obj) < 4 or obj.split()[0].lower() in _PRONOUNS:
            continue  # "I like it", "I love how you …": about something said, not a taste
        if _RELATIVE.search(sentence[: m.start()]):
            continue  # "something I love is …": the verb belongs to a relative clause
        verb = m.group("verb").lower().replace("’", "'")
        pair = re.split(r"\s+(?:over|to|rather than|instead of|more than)\s+", obj, maxsplit=1)
        if verb == "prefer" and len(pair) == 2:
            a, b = sorted(norm_key(p) for p in pair)
            attr = f"choice between {a} and {b}"
        else:
            attr = f"feeling about {norm_key(obj)}"
        add(m, kind="preference", subject="person", attribute=attr, value=verb)
    for m in _DECISION.finditer(sentence):
        if free(m):
            add(m, kind="decision")
    if sentence.lower().startswith(("you ", "you'", "your ")):
        return found  # about the listener, not the person's own plan
    if not found and _FIRST_PERSON.search(sentence) and _PLAN_DATE.search(sentence):
        if _PLAN_MARK.search(sentence):
            found.append({"text": _statement(sentence, 0), "kind": "plan"})
    return found


def mine_lines(lines: Sequence[Line], tz: tzinfo) -> list[MinedFact]:
    """Facts the extractive rules find in the person's lines (user-side lines only), in order.

    Only what someone says of themselves is mined: a reply or a tool's text is not the
    person's word (the model path reads those, with their origin).
    """
    out: list[MinedFact] = []
    for line in lines:
        if line.role != "user":
            continue
        local = line.ts.astimezone(tz)
        for sentence in _sentences(line.text):
            for raw in rules_for(sentence):
                out.append(
                    MinedFact(
                        text=resolve_plan_dates(raw["text"], local),
                        kind=raw["kind"],
                        origin=line.origin,
                        session=line.session,
                        message_ids=(line.id,),
                        said_at=line.ts,
                        subject=raw.get("subject", ""),
                        attribute=raw.get("attribute", ""),
                        value=raw.get("value", ""),
                        replaces=raw.get("replaces", ""),
                    )
                )
    return merge_repeats(out)


def merge_repeats(facts: Sequence[MinedFact]) -> list[MinedFact]:
    """One fact per wording and session: a repeat in the same session adds its message ids to
    the first. The same words said in another session are another statement (a night reading
    a backlog of months sees "the meetup moves to Lyon" said on many days, each after its own
    "the meetup is in …"): merged into the first, the later ones would be lost and the last
    value said would not be the one left current."""
    out: dict[tuple[str, str], MinedFact] = {}
    for fact in facts:
        key = (fact.session, " ".join(re.sub(r"[^\w\s]", " ", fact.text.lower()).split()))
        first = out.get(key)
        if first is None:
            out[key] = fact
        else:
            ids = tuple(dict.fromkeys((*first.message_ids, *fact.message_ids)))
            out[key] = replace(first, message_ids=ids, origin=weakest([first.origin, fact.origin]))
    return list(out.values())


def person_sentences(text: str) -> list[str]:
    """The statements of a line, as the rules read them (questions and conditions left out)."""
    return _sentences(text)
