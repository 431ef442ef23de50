"""Mined facts: what sleep found said in passing, stored with the session and messages it rests on.

A mined fact is new, a change of a known one, or one known already (`record_mined`):

- the same text as an active fact, or the same key and value: that fact is confirmed (said
  again: it is not stale), nothing is stored;
- the same key as an active fact, another value, said later, by a word the trust rule lets
  change it (`supersede`): it supersedes that fact (`op: correct`, `source: mined`), whose
  validity ends where the new one's begins (`valid_from`); the old one stays in history and
  the new one's index row says what it changed from;
- very like an active fact (the index's near-duplicate check): left out;
- otherwise stored, marked mined, with its origin and provenance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from daemon.log import get_logger
from daemon.memory.fact_log import Fact, normalise, stamp
from daemon.memory.fact_trust import allows
from daemon.memory.fact_writes import FactWriter
from daemon.memory.slots import says_change

if TYPE_CHECKING:
    from daemon.memory.mining import MinedFact

log = get_logger("memory.facts")


@dataclass(frozen=True, kw_only=True)
class MinedOutcome:
    """What `record_mined` did with one mined fact."""

    status: Literal["stored", "superseded", "confirmed", "similar", "kept"]
    id: str  # the stored fact, or the existing one it confirmed / resembles / left standing
    old_id: str | None = None  # the fact it superseded
    message: str = ""


class MinedFacts:
    """`record_mined`, over the shared `FactWriter`."""

    def __init__(self, writer: FactWriter) -> None:
        self.w = writer

    async def record_mined(self, mined: MinedFact) -> MinedOutcome:
        """Store a fact found in conversation: new, a change of a known one, or one known already
        (the module's docstring says which when)."""
        w = self.w
        w.check_origin(mined.origin)
        wording, _ = w.prepare(mined.text)
        async with w.lock:
            await w.load()
            same = w.view.same_text(mined.text)
            if same is not None and not self._moves_another(mined, same):
                await w.rows.confirm(same.id, mined.said_at)
                return MinedOutcome(status="confirmed", id=same.id)
            old, occasion = self._holder(mined)
            if (
                old is not None
                and not mined.uncertain
                and normalise(old.value) == normalise(mined.value)
            ):
                await w.rows.confirm(old.id, mined.said_at)
                return MinedOutcome(status="confirmed", id=old.id)
            supersede = (
                old is not None
                and mined.said_at >= old.valid_since
                and allows("supersede", mined.origin, fact=old)
            )
            if old is not None and not supersede:
                # Older news, or a weaker source (tool text never changes the person's word).
                return MinedOutcome(
                    status="kept", id=old.id,
                    message=f"{old.id} holds the value of {mined.subject}/{mined.attribute}; not changed",
                )  # fmt: skip
            if not supersede and not occasion:
                near = await w.similar(mined.text, "fact")
                if near is not None:
                    return MinedOutcome(status="similar", id=near.id)
            target = old.target if old is not None else "memory"
            w.check("add", mined.origin, target=target)
            fact = await self._store(mined, wording, target=target, old=old)
        log.info("fact mined", id=fact.id, origin=fact.origin, supersedes=fact.supersedes)
        if old is not None:
            return MinedOutcome(status="superseded", id=fact.id, old_id=old.id)
        return MinedOutcome(status="stored", id=fact.id)

    def _holder(self, mined: MinedFact) -> tuple[Fact | None, bool]:
        """(the active fact holding the value `mined` is about, if any; whether `mined` is
        another dated occasion of that thing, to be stored beside it rather than over it)."""
        view = self.w.view
        old = view.by_key(mined.key, holding=mined.replaces) if mined.key else None
        occasion = old is not None and another_occasion(self.occasion_days(old), mined)
        if occasion:
            old = None
        if mined.supersedes:
            # A slot said again: the fact it names, unless something newer holds it now.
            named = view.get(mined.supersedes)
            if (
                named is not None
                and named.active
                and (old is None or old.valid_since <= named.valid_since)
            ):
                old = named
        if old is None and mined.key and mined.replaces:
            old = view.naming(mined.replaces, mined.subject)
        return old, occasion

    async def _store(
        self, mined: MinedFact, wording: str, *, target: str, old: Fact | None
    ) -> Fact:
        """Append `mined` (superseding `old` when given) and index it."""
        w = self.w
        event = w.event(
            "correct" if old is not None else "remember",
            target=target, origin=mined.origin, text=mined.text, wording=wording,
            tags=["uncertain"] if mined.uncertain else [], source="mined", kind=mined.kind,
            valid_from=stamp(mined.said_at), session=mined.session,
            message_ids=list(mined.message_ids),
        )  # fmt: skip
        if mined.key:
            event.update(subject=mined.subject, attribute=mined.attribute, value=mined.value)
        if mined.replaces:
            event["replaced"] = mined.replaces
        if old is not None:
            event["supersedes"] = old.id
        fact = await w.append(event)
        await w.index_and_render(fact)
        if old is not None:
            await w.index.retire(old.id, at=fact.valid_since, superseded_by=fact.id)
        return fact

    def _moves_another(self, mined: MinedFact, same: Fact) -> bool:
        """True when a change worded as an active fact moves another fact that holds the
        value it replaces ("the meetup moves from Porto to Lyon" said of this week's meetup
        in Porto, in the words that moved last month's): a new change, not the old said again."""
        if not (mined.key and mined.replaces):
            return False
        held = self.w.view.by_key(mined.key, holding=mined.replaces)
        return (
            held is not None
            and held.id != same.id
            and normalise(held.value) == normalise(mined.replaces)
        )

    def occasion_days(self, fact: Fact) -> set[tuple[int, int]]:
        """The days `fact`'s occasion is on: those it names, else those of the fact it changed
        ("the meetup moves to Lyon" moved the meetup on 14 March)."""
        seen: set[str] = set()
        cur: Fact | None = fact
        while cur is not None and cur.id not in seen:
            days = days_named(cur.text)
            if days:
                return days
            seen.add(cur.id)
            cur = self.w.view.get(cur.supersedes or "")
        return set()


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = (
    r"(?P<{0}>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_DAY_OF_MONTH = re.compile(
    r"\b\d{4}-(?P<m>\d{2})-(?P<d>\d{2})\b"
    rf"|\b(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?(?: of)? {_MONTH.format('m2')}\b"
    rf"|\b{_MONTH.format('m3')} (?P<d3>\d{{1,2}})(?:st|nd|rd|th)?\b",
    re.I,
)


def days_named(text: str) -> set[tuple[int, int]]:
    """The calendar days a text names, as (month, day): "2026-03-14", "14 March", "March 14th"."""
    out: set[tuple[int, int]] = set()
    for m in _DAY_OF_MONTH.finditer(text):
        if m.group("m"):
            out.add((int(m.group("m")), int(m.group("d"))))
        else:
            month = (m.group("m2") or m.group("m3")).lower()[:3]
            out.add((_MONTHS.index(month) + 1, int(m.group("d2") or m.group("d3"))))
    return out


def another_occasion(was: set[tuple[int, int]], mined: MinedFact) -> bool:
    """True when `mined` tells of another occasion of `old`'s thing, not a change of it.

    "The meetup is in Porto on 3 October" and, later, "the meetup is in Lyon on 4 October"
    are two meetups: each statement is dated (its dates resolved), the dates differ, and the
    later one says no word of change and names no value it replaces. Superseding the first
    would lose a plan nobody changed; it stays until its date passes (maintenance retires
    past plans). A change of the date itself (the key's attribute is "when") stays a change.
    `was`: the days the known fact's occasion is on (`MinedFacts.occasion_days`).
    """
    if mined.attribute == "when" or mined.replaces or mined.uncertain or mined.kind == "change":
        return False
    if says_change(mined.text):
        return False
    new = days_named(mined.text)
    return bool(new) and bool(was) and not new & was
