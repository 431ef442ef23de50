"""What a phrase of a sentence is, as the mining rules read it: a value, its head, a place or a
time, a subject, what it replaces; and a line's statements (questions and conditions left out).

The word lists here say what a phrase is not: a passing state ("my day"), how a thing is
("closed", "late"), a pronoun. `daemon.memory.mining_rules` reads constructions with these.
"""

from __future__ import annotations

import re

from daemon.memory.slots import says_change, value_shape, values_of_shape

MAX_MINED_CHARS = 300
# Words after "my" that name a passing state, not a lasting fact ("my day is going well").
TRANSIENT = frozenset(
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
DATE_LIKE = re.compile(
    r"\b(?:(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?|today|tonight|tomorrow|"
    r"yesterday|next|this|january|february|march|april|may|june|july|august|september|october|"
    r"november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|morning|noon|"
    r"midnight|weekend|week|month|year)\b|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}(?::\d{2})?\s*(?:am|pm)\b"
    r"|\b\d{1,2}(?:st|nd|rd|th)\b|\b\d{1,2}:\d{2}\b",
    re.I,
)

_MOVE_VERBS = frozenset(
    "moved moves moving shifted shifts postponed rescheduled pushed brought".split()
)
# Words that say how a thing is, not what it is: such a sentence is a fact, not a value.
STATES = frozenset(
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


def opens_clause(sentence: str, start: int) -> bool:
    before = sentence[:start].rstrip()
    if not before or before[-1] in ",;:-–—(\"'":
        return True
    return before.split()[-1].lower() in _CLAUSE_OPENERS


def bare_name(name: str) -> str:
    """A name without a possessive ("Sara's birthday" names Sara)."""
    return re.sub(r"['’]s$", "", name)


PRONOUNS = frozenset(
    "it that this these those them you him her one how what when where why to".split()
)
_SENTENCE = re.compile(r"[^.!?;\n]+[.!?]*")


def clean_value(text: str) -> str:
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


def value_head(value: str) -> str:
    """The first phrase of a value ("Bergen" of "Bergen in May"): what a change replaces."""
    value = re.sub(r"^(?:in|on|at)\s+", "", value, flags=re.I)
    return _PREP.split(value, maxsplit=1)[0].strip()


_DAY_MONTH = re.compile(r"\d{1,2}(?:st|nd|rd|th)?(?: of)? [A-Z][a-z]+\b")


def where_or_when(value: str) -> str:
    head = value_head(value)
    return "when" if DATE_LIKE.match(head) or _DAY_MONTH.match(head) else "where"


def place_of(value: str) -> str:
    """A place without the time said with it ("Bergen" of "Bergen this year")."""
    head = value_head(value)
    m = DATE_LIKE.search(head)
    return (head[: m.start()] if m and m.start() > 0 else head).strip()


SUBJECT_STOP = frozenset(
    "on in at next this tomorrow tonight today with by from to and but so because after before "
    "for of instead".split()
)


def subject_phrase(phrase: str) -> str:
    """A noun phrase cut where a time or another clause begins ("our dinner next week")."""
    words = phrase.split()
    for i, word in enumerate(words[1:], start=1):
        if word.lower() in SUBJECT_STOP:
            return " ".join(words[:i])
    return phrase


_NOT_OLD = re.compile(
    r"(?:,?\s+not|\binstead of|\brather than|\bno longer)\s+(?:the\s+|at\s+|in\s+|on\s+)?"
    r"(?P<old>[^,;.!?]+)",
    re.I,
)


def replaced_value(text: str) -> str:
    """The value a statement says it replaces: "Copenhagen now, not Berlin" → "Berlin"."""
    m = _NOT_OLD.search(text)
    return " ".join(clean_value(m.group("old")).split()[:4]) if m else ""


def change_key(subj: str, verb: str, new: str) -> tuple[tuple[str, str], str]:
    """The key and value a change states: "my X" is the person's X; "the X" moved has a new
    place or time, otherwise a new value."""
    if subj.lower().startswith("my "):
        return ("person", norm_key(subj)), value_head(new) or new
    if verb.split()[0].lower() in _MOVE_VERBS:
        attr = where_or_when(new)
        return (norm_key(subj), attr), (
            place_of(new) if attr == "where" else value_head(new)
        ) or new
    return (norm_key(subj), "value"), new


def statements(text: str) -> list[str]:
    out: list[str] = []
    for m in _SENTENCE.finditer(text):
        s = " ".join(m.group(0).split())
        if not s or s.endswith("?") or _SKIP_SENTENCE.match(s):
            continue  # a question or a condition states nothing
        out.append(s)
    return out


def statement_text(sentence: str, start: int) -> str:
    """The fact's text: the sentence, or from the match when the sentence is long."""
    text = sentence if len(sentence) <= 200 else sentence[start:]
    text = text.strip()
    if len(text) > MAX_MINED_CHARS:
        text = text[:MAX_MINED_CHARS].rsplit(" ", 1)[0] + " …"
    return text[:1].upper() + text[1:]


def is_gerund(value: str) -> bool:
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


DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
BARE_DAY = re.compile(rf"\b{DAY}\b(?!\s*\()", re.I)


def norm_key(text: str) -> str:
    """A subject or attribute as a key: lower case, no article or possessive, single spaces."""
    bare = re.sub(r"['’]s\b", "", text.lower())  # "the project's codename": project codename
    words = re.sub(r"[^\w\s'-]", " ", bare).split()
    while words and words[0] in ("my", "our", "the", "a", "an", "his", "her", "their"):
        words = words[1:]
    return " ".join(words)[:60]


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
