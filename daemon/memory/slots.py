"""A known fact's slot said again with another value: a change read from the slot, not the words.

The extractive rules (`daemon.memory.mining`) read a change only in the constructions they
know. A fact already stored tells more: its subject and its value. A later sentence of the
person's that names that subject again and, with a word of change ("no longer", "instead",
"now", "switched", "was", …), either names the old value or gives one value of the same shape
(a weekday for a weekday, a name for a name, a number, a date) says the slot changed —
whatever the construction. When the new value cannot be told, the sentence itself stands in
for the fact (marked uncertain), so the old value is never left asserted alone as current.
Sleep's mining phase applies it to every current fact (`daemon.sleep.mine.said_again`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_WEEKDAY_WORD = re.compile(rf"\b{_DAY}s?\b", re.I)
_MONTH = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
)
_DATE_VALUE = re.compile(
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?(?: of)? {_MONTH}\b|\b{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?\b"
    r"|\b\d{4}-\d{2}-\d{2}\b",
    re.I,
)
_NUMBER_VALUE = re.compile(r"\b[\w-]*\d[\w-]*\b")
_CHANGE_CUE = re.compile(
    r"\b(?:now|no longer|any ?more|instead|rather than|not|from now on|these days|after all|"
    r"actually|turns? out|turned out|ended up|went with|going with|switch\w*|chang\w*|mov(?:e|ed|es|ing)|"
    r"swap\w*|replac\w*|renam\w*|rebook\w*|reschedul\w*|relocat\w*|postpon\w*|pushed back|"
    r"brought forward|drop\w*|ditch\w*|scratch|forget|cancel\w*|quit|gave up|give up|veto\w*|"
    r"transferr?\w*|retired?|became|become|used to|no more|over to)\b|n't\b",
    re.I,
)
# A value of no particular shape ("terracotta", "cello") changes only by words that say the old
# one is gone: "now" or "not" beside a common word is too weak a sign ("I love it now").
_STRONG_CUE = re.compile(
    r"\b(?:no longer|any ?more|instead|rather than|from now on|switch\w*|chang\w*|"
    r"mov(?:e|ed|es|ing)|swap\w*|replac\w*|renam\w*|rebook\w*|reschedul\w*|relocat\w*|"
    r"postpon\w*|pushed back|brought forward|drop\w*|ditch\w*|scratch|forget|cancel\w*|quit|"
    r"gave up|give up|veto\w*|transferr?\w*|retired?|used to|no more|over to|repaint\w*)\b",
    re.I,
)
_NOW = re.compile(r"\b(?:now|these days|nowadays|from now on)\b", re.I)
_NEGATED = re.compile(r"\b(?:not|no|never|can't|cannot|won't)\b|n't\b", re.I)
# A value's slot in a sentence that does not name the old one: after a copula or preposition.
_SLOT_BEFORE = frozenset(
    "to in at is be for on now became become are with by it's its 's: , was".split()
)
_NAME_JOINERS = frozenset("of and the de la van von del da".split())
_GENERIC_ANCHORS = frozenset(
    "value where when day days name names number person the my our your feeling about choice "
    "between and relation new old this that".split()
)
_NOT_VALUES = frozenset(
    "i i'm i've i'll i'd it the this that we they he she you my our mr mrs ms dr ok okay hi hey "
    "morning evening".split()
)


def value_shape(value: str) -> str:
    """What kind of value `value` is: weekday, date, number, name or word."""
    v = value.strip()
    if _WEEKDAY_WORD.fullmatch(v):
        return "weekday"
    if _DATE_VALUE.search(v):
        return "date"
    if re.search(r"\d", v):
        return "number"
    if v[:1].isupper():
        return "name"
    return "word"


def _names(sentence: str) -> list[tuple[int, str]]:
    """Runs of capitalised words ("Brasserie Vaucluse", "Klara and the Sun"), with positions;
    weekdays and months are not names."""
    tokens = list(re.finditer(r"[\w'’-]+", sentence))
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(tokens):
        word = tokens[i].group(0)
        if (
            not word[:1].isupper()
            or _WEEKDAY_WORD.fullmatch(word)
            or re.fullmatch(_MONTH, word, re.I)
        ):
            i += 1
            continue
        j = i + 1
        end = i
        while j < len(tokens):
            w = tokens[j].group(0)
            if sentence[tokens[j - 1].end() : tokens[j].start()] != " ":
                break  # "Thanks, I": punctuation ends a name
            if w[:1].isupper() and not _WEEKDAY_WORD.fullmatch(w):
                end = j
                j += 1
            elif w.lower() in _NAME_JOINERS and j + 1 < len(tokens):
                j += 1
            else:
                break
        text = sentence[tokens[i].start() : tokens[end].end()]
        text = re.sub(r"['’]s$", "", text)
        if text.lower() not in _NOT_VALUES:
            out.append((tokens[i].start(), text))
        if i == 0 and end > 0:
            # A sentence's capital may open a name or stand before one ("Scratch Bergen, …"):
            # the name without its first word is a candidate too.
            rest = re.sub(r"['’]s$", "", sentence[tokens[1].start() : tokens[end].end()])
            if rest.lower() not in _NOT_VALUES and rest.split()[0] not in _NAME_JOINERS:
                out.append((tokens[1].start(), rest))
        i = end + 1
    return out


def values_of_shape(sentence: str, shape: str) -> list[tuple[int, str]]:
    if shape == "weekday":
        return [(m.start(), m.group(0)) for m in _WEEKDAY_WORD.finditer(sentence)]
    if shape == "date":
        return [(m.start(), m.group(0)) for m in _DATE_VALUE.finditer(sentence)]
    if shape == "number":
        return [(m.start(), m.group(0)) for m in _NUMBER_VALUE.finditer(sentence)]
    if shape == "name":
        return _names(sentence)
    return []


def _fold(text: str) -> str:
    words = re.sub(r"[^\w\s-]", " ", text.lower()).split()
    while words and words[0] in ("the", "a", "an"):
        words = words[1:]
    return " ".join(w[:-1] if w in _WEEKDAYS_PLURAL else w for w in words)


_WEEKDAYS_PLURAL = frozenset(
    f"{d}s" for d in "monday tuesday wednesday thursday friday saturday sunday".split()
)


def _contains(haystack: str, needle: str) -> bool:
    return bool(needle) and f" {needle} " in f" {haystack} "


def slot_anchors(subject: str, attribute: str) -> frozenset[str]:
    """The words that name a keyed fact's subject in a later sentence ("offsite", "gym")."""
    words = (attribute if subject in ("", "person") else f"{subject} {attribute}").lower().split()
    return frozenset(w for w in words if len(w) > 2 and w not in _GENERIC_ANCHORS)


@dataclass(frozen=True, kw_only=True)
class Restated:
    """A later sentence's word on a known slot: the value it now holds ("" when unclear)."""

    value: str
    old: str


def restated(
    sentence: str,
    *,
    value: str,
    anchors: frozenset[str],
    avoid: str = "",
    old_required: bool = False,
) -> Restated | None:
    """What `sentence` says of a slot holding `value` whose subject `anchors` name, or None.

    A change needs a word of change and the subject named again. Then: the old value named
    and one other value of its shape → that value; the old value named and no other (or
    several) → unclear (""), the sentence stands in; the old value not named (allowed unless
    `old_required`) and exactly one value of its shape in a value's slot ("… the gym is on
    Sunday now") → that value. Words of `avoid` (the old fact's own text: "Lisbon" of the
    Lisbon flight) are never the new value.
    """
    value = value.strip()
    if not value or not anchors or not _CHANGE_CUE.search(sentence):
        return None
    folded = _fold(sentence)
    if not any(a in folded.split() or f"{a}s" in folded.split() for a in anchors):
        return None
    old = _fold(value)
    named = _contains(folded, old)
    if old_required and not named:
        return None
    shape = value_shape(value)
    if shape == "word" and (len(value.split()) > 3 or not _STRONG_CUE.search(sentence)):
        return None
    kept = _fold(avoid)
    others: list[tuple[int, str]] = []
    for start, found in values_of_shape(sentence, shape):
        f = _fold(found)
        if not f or f == old or _contains(kept, f) or set(f.split()) & anchors:
            continue
        if f in (_fold(o) for _, o in others):
            continue
        others.append((start, found))
    if len(others) > 1:
        # A capital at the start of a sentence is the sentence's, not a name's ("Scratch …").
        others = [(start, found) for start, found in others if start > 0]
    if named:
        new = others[0][1] if len(others) == 1 else ""
        return Restated(value=_as_value(new, shape), old=value)
    if not says_it_changed(sentence):
        # The old value not named: only a word that the value changed, or "now" unnegated
        # ("the gym is on Sunday now"), makes another value a change ("I can't go to the gym
        # on Friday" is one day, not a new gym day).
        return None
    slotted = [
        (start, found)
        for start, found in others
        if (sentence[:start].split() or [""])[-1].lower() in _SLOT_BEFORE
        or sentence[:start].rstrip().endswith((":", ","))
    ]
    if len(others) == 1 and slotted:
        new = slotted[0][1]
        return Restated(value=_as_value(new, shape), old=value)
    return None


def _as_value(found: str, shape: str) -> str:
    return found.rstrip("sS").capitalize() if shape == "weekday" and found else found


def says_change(sentence: str) -> bool:
    """True when `sentence` has a word of change (a cheap first test before `restated`)."""
    return _CHANGE_CUE.search(sentence) is not None


def says_it_changed(sentence: str) -> bool:
    """True when `sentence` says something changed without naming what it was: a word that a
    value changed ("renamed", "moved", "instead") or "now" unnegated ("it's Heron now")."""
    return bool(
        _STRONG_CUE.search(sentence) or (_NOW.search(sentence) and not _NEGATED.search(sentence))
    )


def sentence_words(sentence: str) -> frozenset[str]:
    """The folded words of `sentence`, to test a slot's anchors against."""
    return frozenset(_fold(sentence).split())
