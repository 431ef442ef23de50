"""Find open threads in a turn's words, and the words that close them: offline, no model call.

Three kinds, each read from one side of a turn:

- a *promise* — the agent's reply commits to do something later: a first-person "I'll …",
  "I will …", "I'm going to …", "let me …" sentence that also says *later* (a day, "later",
  "tomorrow", "next week", "get back to you", "follow up"). "I'll explain" is not one: it is
  done in the same reply. Offers and conditionals ("If you like, I'll …", "Shall I …?") are
  not promises. One that does not say what ("I'll look into it tomorrow") is about the
  person's message it answered, quoted with it.
- a *question* — the person asked (a sentence ending in "?") and the reply said it could not
  answer ("I don't know", "I'm not sure", "I can't check", "I couldn't find", "I have no way
  to …").
- a *plan* — the person's first-person plan ("I'm going to …", "I'll …", "I have to …",
  "we're …ing") with a date the schedule's time-phrase parser reads ("on Friday", "tomorrow",
  "next Monday", "on 12 May"); the date is the thread's due day.

A question is answered when the person asks it again (its key words, a "?") and the reply
does not say it cannot answer. A thread is closed by a person's message that says it is done — a completion word ("done",
"finished", "sorted", "did", "fixed", "never mind", …) together with the thread's own key words
(two of them, or its only one) — or, said alone ("done", "that's sorted"), it closes the
newest thread of the conversation. What these rules do not catch is in docs/context.md.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, tzinfo

from daemon.when import Resolved, read_prefix

KINDS = ("promise", "question", "plan")
MAX_TEXT = 240

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_FIRST_PERSON_FUTURE = re.compile(
    r"\b(?:i'll|i\s+will|i\s+shall|i'm\s+going\s+to|i\s+am\s+going\s+to|i\s+promise\s+to"
    r"|let\s+me(?!\s+know\b))\s+(?P<rest>.+)",
    re.IGNORECASE,
)
# Said of a later time: without one, "I'll …" is done in the reply itself.
_LATER = re.compile(
    r"\b(?:later|tomorrow|tonight|this\s+(?:evening|afternoon|weekend|week)"
    r"|next\s+(?:week|month|year|weekend|monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
    r"|first\s+thing|in\s+the\s+morning|on\s+(?:monday|tuesday|wednesday|thursday|friday"
    r"|saturday|sunday)|by\s+(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|tomorrow|tonight|the\s+end)|get\s+back\s+to\s+you|follow\s+up|report\s+back"
    r"|when\s+i\s+(?:wake|can|have))\b",
    re.IGNORECASE,
)
# Sign-offs, and what a schedule already keeps (a reminder is the schedule's, not a thread).
_NOT_A_TASK = re.compile(
    r"\b(?:(?:talk|speak|see|catch)\s+(?:to\s+|with\s+)?you|remind\s+you|be\s+(?:here|around))\b",
    re.IGNORECASE,
)
# Offers and conditions are not commitments.
_NOT_COMMITTED = re.compile(
    r"^\s*(?:if\b|shall\s+i\b|should\s+i\b|would\s+you\b|do\s+you\s+want\b|want\s+me\b"
    r"|unless\b|once\s+you\b|when\s+you\b)",
    re.IGNORECASE,
)
_CANNOT_ANSWER = re.compile(
    r"\b(?:i\s+(?:really\s+|still\s+|just\s+)?(?:don't|do\s+not)\s+know"
    r"|i'm\s+(?:still\s+)?not\s+sure|i\s+am\s+(?:still\s+)?not\s+sure"
    r"|i\s+(?:still\s+|just\s+)?(?:can't|cannot|can\s+not|couldn't|could\s+not)\s+(?:tell|check|find|say|answer"
    r"|access|look|see|know|confirm|verify)|i\s+(?:don't|do\s+not)\s+have\s+(?:access"
    r"|a\s+way|any\s+way|that\s+information|information)|i\s+have\s+no\s+(?:way|access"
    r"|information|idea)|no\s+idea|i'm\s+unable\s+to|i\s+am\s+unable\s+to)\b",
    re.IGNORECASE,
)
_PLAN = re.compile(
    r"\b(?:i'm\s+going\s+to|i\s+am\s+going\s+to|i'll|i\s+will|i\s+have\s+to|i\s+need\s+to"
    r"|i\s+plan\s+to|i'm\s+planning\s+to|we're\s+going\s+to|we\s+will|we'll|i'm\s+\w+ing"
    r"|we're\s+\w+ing)\b",
    re.IGNORECASE,
)
_DONE = re.compile(
    r"\b(?:done|did\s+it|finished|completed|sorted|fixed|solved|resolved|handled|dealt\s+with"
    r"|taken\s+care|took\s+care|no\s+longer\s+need|not\s+needed\s+any\s*more|never\s*mind"
    r"|forget\s+(?:it|about)|already\s+(?:did|have|found|know)|figured\s+(?:it\s+)?out"
    r"|answered|got\s+it\s+working)\b",
    re.IGNORECASE,
)
# A message that is nothing but a completion: "done", "that's sorted!", "all done, thanks".
_ONLY_DONE = re.compile(
    r"^\s*(?:ok(?:ay)?[,!.]?\s+)?(?:(?:that's|that\s+is|it's|it\s+is|all|i'm|i\s+am)\s+)?"
    r"(?:done|sorted|finished|did\s+it|i\s+did\s+it|never\s*mind|handled)"
    r"(?:\s+now)?[.!]*(?:\s*,?\s*thanks?(?:\s+you)?[.!]*)?\s*$",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z0-9][a-z0-9'’-]*")
# Words too common to say what a thread is about.
STOP = frozenset(
    """a about after again all also am an and any anything are as at be been before being but
    by can could did do does doing done for from get go going got had has have having he her
    here him his how i i'd i'll i'm i've if in into is it it's its just know later let like
    look looked looking make me more my need next no not now of on once one or our out over
    please promise see shall she should so some something that that's the their them then
    there these they thing this those to today tomorrow tonight too up us very want was we
    we'll we're were what when where whether which while who why will with would you you'll
    your monday tuesday wednesday thursday friday saturday sunday week weekend morning evening
    afternoon back first check try sure ok okay thanks thank yes""".split()
)


@dataclass(frozen=True, kw_only=True)
class Found:
    """A thread read from a message: its kind, the sentence, and the local day it is due."""

    kind: str
    text: str
    due: date | None = None


def sentences(text: str) -> list[str]:
    """The sentences of `text`, whitespace collapsed, code blocks and quotes left out."""
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith(">")]
    out = []
    for m in _SENTENCE.finditer("\n".join(lines)):
        s = " ".join(m.group(0).replace("’", "'").split()).lstrip("-*•0123456789.) ")
        if len(s) > 3:
            out.append(s)
    return out


def key_words(text: str) -> list[str]:
    """The words that say what `text` is about (lower case, no stop words), in order, once."""
    seen: list[str] = []
    for w in _WORD.findall(text.lower().replace("’", "'")):
        w = w.strip("'-")
        if len(w) > 2 and w not in STOP and not w.isdigit() and w not in seen:
            seen.append(w)
    return seen


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1].rstrip() + "…"


_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m} | {
    m.lower(): i for i, m in enumerate(calendar.month_abbr) if m
}
_MONTH = r"(?P<{}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_ORD = r"(?P<{}>\d{{1,2}})(?:st|nd|rd|th)?"
# "20 March", "20th of March", "March 20", "March 20th" (a date the time-phrase parser leaves).
_CALENDAR = re.compile(
    r"\b(?:" + _ORD.format("d1") + r"\s+(?:of\s+)?" + _MONTH.format("m1")
    + r"|" + _MONTH.format("m2") + r"\s+" + _ORD.format("d2") + r")\b",
    re.IGNORECASE,
)  # fmt: skip


def _calendar_day(text: str, today: date) -> date | None:
    """The next day on or after `today` a "20 March" / "March 20th" in `text` names."""
    m = _CALENDAR.search(text)
    if m is None:
        return None
    month = _MONTHS[(m.group("m1") or m.group("m2")).lower()]
    day = int(m.group("d1") or m.group("d2"))
    for year in (today.year, today.year + 1):
        if day <= calendar.monthrange(year, month)[1] and date(year, month, day) >= today:
            return date(year, month, day)
    return None


def due_in(text: str, now: datetime, zone: tzinfo) -> date | None:
    """The first local day a time phrase in `text` names ("on Friday", "tomorrow", "20 March")."""
    on_calendar = _calendar_day(text, now.astimezone(zone).date())
    if on_calendar is not None:
        return on_calendar
    words = [w.strip(",;:()\"'") for w in text.split()]
    for start in range(len(words)):
        # A phrase starts at a day word or a preposition: never mid-phrase ("9" of "at 9").
        head = words[start].lower()
        if not head or head in {"at", "in", "every", "each"}:
            continue
        found = read_prefix(words[start:], now, zone, default_time=time(9, 0))
        if found is None:
            continue
        _, reading = found
        if isinstance(reading, Resolved) and reading.recurrence is None:
            return reading.first.astimezone(zone).date()
    return None


def promises(reply: str, now: datetime, zone: tzinfo, *, about: str = "") -> list[Found]:
    """The promises an agent's `reply` makes (see the module docstring).

    A promise that does not say what it is about ("I'll look into it tomorrow") takes its
    subject from `about`, the person's message it answered, quoted after it; without one it
    is left out (nothing would say what is owed, nor close it).
    """
    out: list[Found] = []
    subject = " ".join(sentences(about)[:2])
    for s in sentences(reply):
        if s.endswith("?") or _NOT_COMMITTED.match(s):
            continue
        m = _FIRST_PERSON_FUTURE.search(s)
        if m is None or not _LATER.search(s) or _NOT_A_TASK.search(m.group("rest")):
            continue
        text = s
        if not key_words(m.group("rest")):
            if not key_words(subject):
                continue
            text = f"{s} (about: “{subject if len(subject) <= 120 else subject[:119] + '…'}”)"
        out.append(Found(kind="promise", text=_clip(text), due=due_in(s, now, zone)))
    return out


def unanswered(prompt: str, reply: str) -> list[Found]:
    """The person's questions in `prompt` when `reply` says it cannot answer them."""
    if not _CANNOT_ANSWER.search(reply.replace("’", "'")):
        return []
    asked = [s for s in sentences(prompt) if s.endswith("?") and key_words(s)]
    return [Found(kind="question", text=_clip(s)) for s in asked]


def answers_again(prompt: str, reply: str, question: str) -> bool:
    """Whether the person asked `question` again in `prompt` and `reply` did not refuse it."""
    if _CANNOT_ANSWER.search(reply.replace("’", "'")) or not reply.strip():
        return False
    return any(s.endswith("?") and mentions(s, question) for s in sentences(prompt))


def plans(prompt: str, now: datetime, zone: tzinfo) -> list[Found]:
    """The person's plans with a date in `prompt` (see the module docstring)."""
    out: list[Found] = []
    for s in sentences(prompt):
        if s.endswith("?") or not _PLAN.search(s):
            continue
        due = due_in(s, now, zone)
        if due is not None and key_words(s):
            out.append(Found(kind="plan", text=_clip(s), due=due))
    return out


def says_done(message: str) -> bool:
    """Whether `message` says something is done, answered or no longer needed."""
    return bool(_DONE.search(message.replace("’", "'")))


def only_done(message: str) -> bool:
    """Whether `message` is nothing but "done" ("that's sorted", "all done, thanks")."""
    return bool(_ONLY_DONE.match(message.replace("’", "'")))


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def mentions(message: str, thread_text: str) -> bool:
    """Whether `message` names the thread: two of its key words, or its only one."""
    wanted = {_stem(w) for w in key_words(thread_text)}
    if not wanted:
        return False
    said = {_stem(w) for w in key_words(message)}
    return len(wanted & said) >= min(2, len(wanted))


def closed_by(message: str, threads: Iterable[tuple[str, str]]) -> list[str]:
    """The ids among `threads` ((id, text), newest last) that the person's `message` closes.

    A completion word with the thread's key words closes that thread; a message that is only
    a completion closes the newest one.
    """
    listed = list(threads)
    if not listed:
        return []
    if only_done(message):
        return [listed[-1][0]]
    if not says_done(message):
        return []
    return [tid for tid, text in listed if mentions(message, text)]
