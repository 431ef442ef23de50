"""Query decomposition: turn a message into a few short searches, entities and a time window.

No model is involved: clauses and noun-phrase-ish runs of content words become sub-queries,
capitalised names / quoted strings / project-like tokens become entities looked up directly,
and obvious time words ("yesterday", "last week", "in May 2023", "3 days ago", "before my
trip") become `after`/`before` bounds or an anchor to resolve against memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from daemon.text import QUERY_STOP_WORDS as STOP_WORDS
from daemon.text import asked_stems as asked_stems
from daemon.text import mentioned_stems as mentioned_stems
from daemon.text import terms as terms
from daemon.text import words as words

_SPLIT = re.compile(r"[.?!;:\n]+|,\s+|\s+(?:and|but|or|also|then|because)\s+", re.IGNORECASE)
_QUOTED = re.compile(r"[\"“”]([^\"“”]{2,80})[\"“”]")
_PROJECTISH = re.compile(r"\b(?:[A-Za-z]+[-_./][\w./-]+|[a-z]+[A-Z]\w*|[A-Za-z]+\d+\w*)\b")
_CAPSRUN = re.compile(r"\b[A-Z][\w'’]*(?:\s+(?:of\s+|the\s+|de\s+)?[A-Z][\w'’]*)*")
_QUESTION_WORDS = frozenset(
    "what when where who whom which why how did do does is are was were can could would should "
    "will have has had tell remind please i my the a an in on at yesterday today tomorrow last "
    "this next".split()
)
MONTHS = {
    m: i
    for i, m in enumerate(
        "january february march april may june july august september october november december".split(),
        1,
    )
}
MONTHS.update({m[:3]: i for m, i in list(MONTHS.items())})
_UNITS = {
    "day": 1,
    "days": 1,
    "week": 7,
    "weeks": 7,
    "month": 30,
    "months": 30,
    "year": 365,
    "years": 365,
}
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "few": 3,
    "couple": 2,
}


def match_terms(text: str) -> list[str]:
    """Return the FTS5 phrases for the content words of `text` (plus a prefix for long words)."""
    parts = []
    for w in terms(text):
        w = w.replace('"', "")
        parts.append(f'"{w}"')
        if len(w) >= 7 and w.isalpha():
            # Porter leaves some derivations apart: "allergy" also finds "allergic".
            parts.append(f'"{w[:5]}"*')
    return parts


def fts_match(text: str, *, phrase: bool = False) -> str | None:
    """Build an FTS5 MATCH expression: content words OR'd (or one phrase); None when empty."""
    found = terms(text)
    if not found:
        return None
    if phrase:
        return '"' + " ".join(w.replace('"', "") for w in found) + '"'
    return " OR ".join(match_terms(text))


@dataclass(frozen=True, kw_only=True)
class TimeAnchor:
    """A time bound given relative to something remembered: "before my trip"."""

    relation: Literal["before", "after"]
    text: str


@dataclass(frozen=True, kw_only=True)
class QueryPlan:
    """What to search for one message."""

    text: str
    queries: tuple[str, ...]
    entities: tuple[str, ...] = ()
    after: datetime | None = None
    before: datetime | None = None
    anchor: TimeAnchor | None = None
    # (entity, the question with the entity said as "they"): what is asked about someone,
    # searched among the memories that name them.
    about: tuple[tuple[str, str], ...] = ()

    def all_queries(self) -> list[str]:
        """The full text, the sub-queries and the entities, deduplicated, in that order."""
        seen: dict[str, None] = {}
        for q in (self.text, *self.queries, *self.entities):
            key = q.strip()
            if key and key.lower() not in {s.lower() for s in seen}:
                seen[key] = None
        return list(seen)

    def vector_queries(self, first: int | None = None) -> list[str]:
        """Every text the plan's search may embed: `all_queries` (only the `first` n when the
        search gives only those a vector pass, as `search_plan(vector_queries=n)` does) and the
        `about` questions."""
        return list(dict.fromkeys([*self.all_queries()[:first], *(q for _, q in self.about)]))


def entities(text: str) -> list[str]:
    """Extract names, quoted strings and project-like tokens from `text`."""
    found: dict[str, None] = {}
    for m in _QUOTED.finditer(text):
        found[m.group(1).strip()] = None
    for m in _CAPSRUN.finditer(text):
        run = m.group(0).strip()
        parts = run.split()
        while parts and parts[0].lower() in _QUESTION_WORDS:
            parts = parts[1:]
        run = " ".join(parts).removesuffix("'s").removesuffix("’s")
        if run and run.lower() not in STOP_WORDS and run.lower() not in MONTHS and len(run) > 1:
            found[run] = None
    for m in _PROJECTISH.finditer(text):
        tok = m.group(0).strip("./-")
        if len(tok) > 2:
            found[tok] = None
    return list(found)


# Entities a question is searched "about" (each costs a query vector and a matrix pass).
ABOUT_ENTITIES = 2
_SPEAKER_PREFIX = re.compile(r"(?m)^[^\n:()]{1,60}?(?:\s*\([^)\n]{1,40}\))?:\s+")
# A sentence starts a line (after a heading's hashes, a bullet or a number: a summary's
# "# Hi" and "## Decisions" name no one), follows a full stop or a speaker's label ("Reverie:
# Noted."), or opens a quote.
_SENTENCE_START = re.compile(r"(?:^\s*(?:#{1,6}|[-*•>]|\d{1,3}[.)])?\s*|[.!?…:]\s+|[\"“(]\s*)$")
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())


def bridge_entities(text: str) -> list[str]:
    """Names, places and quoted titles inside a remembered passage, for a second search hop.

    Speaker labels ("Maya (8 May 2023): ") and capitalised sentence openers are not names;
    months and weekdays are dates, not bridges.
    """
    found: dict[str, None] = {}
    for line in _SPEAKER_PREFIX.sub("", text).splitlines():
        for m in _QUOTED.finditer(line):
            found[m.group(1).strip()] = None
        for m in _CAPSRUN.finditer(line):
            parts = m.group(0).split()
            if _SENTENCE_START.search(line[: m.start()]):
                parts = parts[1:]  # a sentence's first word is capitalised whatever it is
            run = " ".join(parts).removesuffix("'s").removesuffix("’s").strip()
            low = run.lower()
            if (
                len(run) > 1
                and low not in STOP_WORDS
                and low not in MONTHS
                and low not in _WEEKDAYS
                and low != "i"
            ):
                found[run] = None
    return list(found)


def _month_window(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def time_window(
    text: str, now: datetime
) -> tuple[datetime | None, datetime | None, TimeAnchor | None]:
    """Resolve the obvious time words of `text` into (after, before, anchor)."""
    low = text.lower()
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if "yesterday" in low:
        return day - timedelta(days=1), day, None
    if re.search(r"\btoday\b|\bthis morning\b|\btonight\b", low):
        return day, day + timedelta(days=1), None
    m = re.search(
        r"\b(\d+|a|an|one|two|three|four|five|six|few|couple)\s+(?:of\s+)?(days?|weeks?|months?|years?)\s+ago\b",
        low,
    )
    if m:
        n = int(m.group(1)) if m.group(1).isdigit() else _NUMBERS[m.group(1)]
        span = _UNITS[m.group(2)]
        centre = day - timedelta(days=n * span)
        slack = timedelta(days=max(1, span * n // 2))
        return centre - slack, centre + slack + timedelta(days=1), None
    m = re.search(r"\b(last|this|past)\s+(week|month|year)\b", low)
    if m:
        span = _UNITS[m.group(2)]
        if m.group(1) == "this":
            return day - timedelta(days=span), now + timedelta(seconds=1), None
        return (
            day - timedelta(days=2 * span if m.group(1) == "last" else span),
            now + timedelta(seconds=1),
            None,
        )
    m = re.search(
        r"\b(?:in|during|since|before|after|of)\s+(" + "|".join(MONTHS) + r")\b\.?(?:\s+(\d{4}))?",
        low,
    )
    if m:
        month = MONTHS[m.group(1)]
        year = int(m.group(2)) if m.group(2) else (now.year if month <= now.month else now.year - 1)
        start, end = _month_window(year, month)
        word = low[m.start() : m.start() + 6].split()[0]
        if word == "since" or word == "after":
            return (start if word == "since" else end), None, None
        if word == "before":
            return None, start, None
        return start, end, None
    m = re.search(r"\b(?:in|during)\s+((?:19|20)\d\d)\b", low)
    if m:
        year = int(m.group(1))
        return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC), None
    # "after my trip", and "after moving to Lisbon": the remembered event's date is the bound.
    m = re.search(
        r"\b(before|after)\s+(?:my|our|the|his|her|their)\s+([\w' -]{2,40})", low
    ) or re.search(r"\b(before|after)\s+(\w{3,}ing\b[\w' -]{2,40})", low)
    if m:
        what = re.split(r"[?.!,;]", m.group(2))[0].strip()
        if terms(what):
            return None, None, TimeAnchor(relation=m.group(1), text=what)  # type: ignore[arg-type]
    return None, None, None


def about(text: str, entity: str) -> str | None:
    """`text` with `entity` said as "they" ("their" for "X's"); None when nothing else is asked.

    "Would Priya enjoy skydiving?" asks about Priya: the memories that name her hold the
    answer, and among them the name is no evidence, while it pulls a question's vector
    towards every line that merely mentions her.
    """
    pattern = re.compile(rf"(?<!\w){re.escape(entity)}(?:['’]s\b)?(?!\w)")
    if not pattern.search(text):
        return None
    rest = pattern.sub(lambda m: "their" if m.group(0) != entity else "they", text)
    rest = " ".join(rest.split())
    return rest if terms(rest) else None


def placed(text: str, entity: str) -> bool:
    """Say whether `text` names `entity` as a place ("moving to Leeds", "in Lisbon")."""
    return (
        re.search(rf"\b(?:to|in|at|from|near|into)\s+{re.escape(entity)}\b", text, re.IGNORECASE)
        is not None
    )


def decompose(message: str, *, now: datetime | None = None, max_queries: int = 4) -> QueryPlan:
    """Split `message` into at most `max_queries` short searches plus entities and time bounds."""
    text = message.strip()
    clauses: list[str] = []
    for part in _SPLIT.split(text):
        content = terms(part)
        if len(content) >= 2:
            query = " ".join(content[:8])
            if query not in clauses:
                clauses.append(query)
    all_terms = terms(text)
    if len(clauses) <= 1 and len(all_terms) > 6:
        # One long clause: search it in overlapping runs of content words as well.
        clauses = [" ".join(all_terms[i : i + 4]) for i in range(0, len(all_terms) - 2, 3)]
    after, before, anchor = time_window(text, now or datetime.now(UTC))
    found = entities(text)[:6]
    # The time window carries "after moving to Leeds"; in the about question it is noise.
    asked = text
    if anchor is not None:
        asked = re.sub(
            rf"\s*\b{anchor.relation}\s+(?:\w+\s+)?{re.escape(anchor.text)}",
            "",
            text,
            flags=re.IGNORECASE,
        )
    focus = [
        (e, q) for e in found if e[:1].isupper() and not placed(text, e) and (q := about(asked, e))
    ]
    return QueryPlan(
        text=text,
        queries=tuple(q for q in clauses[:max_queries] if q != " ".join(all_terms)),
        entities=tuple(found),
        after=after,
        before=before,
        anchor=anchor,
        about=tuple(focus[:ABOUT_ENTITIES]),
    )
