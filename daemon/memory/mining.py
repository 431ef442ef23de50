"""Facts mined from conversation: the extractive rules, the model's prompt, and what both yield.

Sleep reads the day's sessions line by line (`Line`: who said it, whose word it carries) and
turns what was said in passing into `MinedFact`s: decisions, preferences, people and how
they relate to the person, dates and plans, things that changed. Two sources:

- **rules** (offline, no model; `daemon.memory.mining_rules`): general English patterns over
  the person's own lines (the user side of a conversation) — "my X is Y", "I prefer / love /
  hate …", "Ana is my sister", "we decided …", "the offsite moves to Kotor", "… on Friday".
  Questions and conditionals ("if my flight is late") state nothing and are skipped.
- **the model** (`daemon.memory.mining_model`): the dreams role is shown every line with
  its id and origin and answers through one tool whose input is JSON-schema'd; a fact keeps
  only the ids it cites that were shown, and its origin is the weakest of theirs.

A fact may carry a key — `subject` and `attribute` ("person" / "dentist", "offsite" /
"where") — so a later fact with the same key and another value is a change of the same
knowledge, not a second fact (`daemon.memory.facts.FactStore.record_mined`). A change the
rules cannot read is caught from the stored fact's side (`daemon.memory.slots`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo

from daemon.memory.dates import resolve_dates
from daemon.memory.mining_phrases import BARE_DAY, DAY, MAX_MINED_CHARS, norm_key, statements

__all__ = [
    "KINDS",
    "MAX_MINED_CHARS",
    "Line",
    "MinedFact",
    "merge_repeats",
    "mine_lines",
    "norm_key",
    "person_sentences",
    "recurring_days",
    "resolve_plan_dates",
    "rules_for",
    "weakest",
]

# Weakest last, as in `daemon.agent.provenance`: a fact is as trusted as its weakest source.
_STRENGTH = ("person", "agent", "tool")
KINDS = ("preference", "person", "decision", "plan", "change", "fact")


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


# A weekday said of a habit ("the gym moves to Saturday", "my gym day is Tuesday", "every
# Friday") names a day of every week, not one date: resolving it would make a lasting fact
# look like a dated plan that sleep retires once that date has passed.
_ONE_OFF_DAY = re.compile(rf"\b(?:this|next|last|coming)\s+{DAY}\b", re.I)
_EVERY_DAY = re.compile(rf"\b(?:every|each)(?: other)?\s+{DAY}\b", re.I)
_HABIT_CUE = re.compile(
    r"\b(?:usually|always|normally|generally|typically|regularly|weekly|every week|each week|"
    r"any ?more|no longer|from now on|these days|nowadays|most weeks)\b"
    r"|\b(?:my|our|his|her|their) (?!big |special |last |first |wedding )[a-z][\w'’-]* (?:day|night)s?\b"
    r"|\bI (?:usually |always |normally |still )?(?:go|head|swim|train|work out|practise|practice"
    rf"|play|run|cycle|climb|volunteer|teach|work)\b[^.;]*\bon {DAY}\b",
    re.I,
)
# A move of a habit (not of one event) to another weekday: "the gym moves to Saturday".
_MOVED_TO_DAY = re.compile(
    rf"\b(?P<subj>[a-z][\w'’-]*)(?: day)? (?:has |have |is |was )?(?:moved|moves|moving|shifted|shifts|"
    rf"switched|switches|changed|changes) (?:from {DAY} )?to {DAY}\b",
    re.I,
)
_ONE_OFF_THINGS = frozenset(
    "party dinner lunch breakfast wedding flight trip appointment interview meeting offsite "
    "visit date call deadline launch show concert match game exam surgery funeral ceremony "
    "delivery move viewing reservation booking".split()
)


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

    held = resolve_dates(BARE_DAY.sub(hold, text), now)
    return re.sub("\ue000(\\d+)\ue001", lambda m: days[int(m.group(1))], held)


def rules_for(sentence: str) -> list[dict[str, str]]:
    """The facts one sentence of the person's states, by the extractive rules (may be empty).

    The rules (`daemon.memory.mining_rules`, some hundred patterns) are imported by the first
    sentence read — a night's mining, or the first `remember` — not by the daemon's start.
    """
    from daemon.memory.mining_rules import rules_for as read

    return read(sentence)


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
        for sentence in statements(line.text):
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
    return statements(text)
