"""Where the time ends and the text begins: `reverie schedule add tomorrow at 10 buy honey jars`.

Unquoted, the shell hands the command one word at a time. `read_words` reads the longest
run of words from the first that is a time phrase (`when.read_prefix`); the rest is the text.
It refuses rather than guesses when the split is in doubt — no time at the start, or a word
right after the time that looks like part of one ("monday 10 dentist": is it 10:00, or the
default 09:00 and "10 dentist"?) — and the refusal shows how to quote the two apart.

A time given apart from its text (a quoted first argument, the agent's `when`) is taken as
given, unless the text's first words would continue it into a longer time phrase
("every monday" + "and thursday standup"): that is refused too, never split silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, time, tzinfo

from daemon.when import (
    MAX_PHRASE_WORDS,
    UNDERSTOOD,
    WEEKDAYS,
    Resolved,
    WhenError,
    read_prefix,
    resolve,
    said,
)

# A word that, right after a time, may well belong to it: a number or clock time, am/pm,
# "at", a named time or day. Text starting with one is refused as unclear unless quoted.
_TIMEISH = re.compile(
    r"(?:\d.*|at|am|pm|a\.m\.|p\.m\.|noon|midday|midnight|o'?clock|today|tonight|tomorrow"
    r"|every|each|next|" + "|".join(rf"{d}s?|{d[:3]}" for d in WEEKDAYS) + r")[,.;:!]?",
    re.IGNORECASE,
)

Hint = Callable[[str, str], str]


def quote_hint(when: str, text: str) -> str:
    """How to say it on the command line with the time and the text quoted apart."""
    return (
        "quote the time and the text apart, e.g. reverie schedule add"
        f" {json.dumps(when, ensure_ascii=False)} {json.dumps(text, ensure_ascii=False)}"
    )


@dataclass(frozen=True, kw_only=True)
class Reading:
    """A time phrase read, and the text that goes with it."""

    resolved: Resolved
    text: str


def read_words(
    words: Sequence[str],
    now: datetime,
    zone: tzinfo,
    *,
    default_time: time,
    min_interval_s: float,
) -> Reading:
    """Split the command line's words into a time and its text; raise `WhenError` when unclear.

    Each of `words` is one argument as the shell passed it: one with a space in it was
    quoted, and is never cut. A first argument that was quoted is the time as given.
    """
    units = [w.strip() for w in words if w.strip()]
    if len(units) == 1:
        units = units[0].split()  # one argument holds both: read it word by word
    if not units:
        raise WhenError(
            "no time given; say when and what, e.g. reverie schedule add tomorrow at 9 call the plumber"
        )
    if any(c.isspace() for c in units[0]):
        return read_apart(
            units[0],
            " ".join(units[1:]),
            now,
            zone,
            default_time=default_time,
            min_interval_s=min_interval_s,
            following=_unquoted_run(units[1:]),
            hint=quote_hint,
        )
    everything = " ".join(units)
    found = read_prefix(units, now, zone, default_time=default_time, min_interval_s=min_interval_s)
    if found is None:
        # No run of words from the first is a time: the whole line's error names what is not.
        try:
            resolve(everything, now, zone, default_time=default_time, min_interval_s=min_interval_s)
            problem = f"cannot find where the time ends in {said(everything)}"
        except WhenError as exc:
            problem = str(exc)
            if problem.startswith("cannot read the time"):
                problem = f"no time phrase at the start of {said(everything)}; understood are {UNDERSTOOD}"
        raise WhenError(f"{problem}; {quote_hint('tomorrow at 10', 'buy honey jars')}")
    count, reading = found
    if isinstance(reading, WhenError):
        raise reading
    rest = units[count:]
    if rest and not any(c.isspace() for c in rest[0]) and _TIMEISH.fullmatch(rest[0]):
        raise WhenError(
            f"cannot tell where the time ends in {said(everything)}: {said(reading.phrase)} is a"
            f" time, and {rest[0]!r} right after it looks like part of one;"
            f" {quote_hint(reading.phrase, ' '.join(rest))}"
        )
    return Reading(resolved=reading, text=" ".join(rest))


def read_apart(
    when: str,
    text: str,
    now: datetime,
    zone: tzinfo,
    *,
    default_time: time,
    min_interval_s: float,
    following: Sequence[str] | None = None,
    hint: Hint = quote_hint,
) -> Reading:
    """The time given apart from its text; refused when the text's first words continue it.

    `following` are the words that might continue the time (default: the text's words);
    `hint` says how to give the two apart in the caller's terms.
    """
    resolved = resolve(when, now, zone, default_time=default_time, min_interval_s=min_interval_s)
    head = when.split()
    more = list(following if following is not None else text.split())[:MAX_PHRASE_WORDS]
    if more:
        found = read_prefix(
            head + more, now, zone, default_time=default_time, min_interval_s=min_interval_s
        )
        if found is not None and found[0] > len(head):
            longer = " ".join((head + more)[: found[0]])
            extra = " ".join(more[: found[0] - len(head)])
            rest = text.strip()[len(extra) :].strip() if text.strip().startswith(extra) else text
            raise WhenError(
                f"unclear where the time ends: the time is {said(when)} but the text starts"
                f" with {said(extra)}, which reads as part of it ({said(longer)});"
                f" {hint(longer, rest)}"
            )
    return Reading(resolved=resolved, text=text)


def _unquoted_run(units: Sequence[str]) -> list[str]:
    """The leading arguments that were not quoted (no space in them)."""
    run: list[str] = []
    for unit in units:
        if any(c.isspace() for c in unit):
            break
        run.append(unit)
    return run
