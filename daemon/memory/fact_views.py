"""Reading the replayed fact log: one fact, the current ones, a fact's history and its key.

Nothing here writes: `FactView` answers from what `FactLog` last replayed (the store loads it
first), so every writer and reader of facts sees the same facts the same way.
"""

from __future__ import annotations

from daemon.memory.fact_log import Fact, FactLog, normalise
from daemon.memory.fact_trust import untrusted
from daemon.memory.ids import fact_uid
from daemon.redact import kept_secrets


class FactView:
    """Questions about the facts as the log holds them now."""

    def __init__(self, log: FactLog) -> None:
        self.log = log
        self._normals: dict[str, str] = {}  # fact id → its normalised text (texts never change)

    def get(self, uid: str) -> Fact | None:
        """The fact `uid` names (`fact:2` or the bare `2`: `fact_uid`), if there is one."""
        return self.log.facts.get(fact_uid(uid))

    def facts(self, *, target: str | None = None, include_retired: bool = False) -> list[Fact]:
        """Facts in the order they were written."""
        return [
            f
            for f in self.log.facts.values()
            if (include_retired or f.active) and (target is None or f.target == target)
        ]

    def current(self, uid: str) -> Fact | None:
        """Follow corrections from `uid` to the fact that replaced it last."""
        fact = self.get(uid)
        seen: set[str] = set()
        while fact is not None and fact.superseded_by and fact.id not in seen:
            seen.add(fact.id)
            fact = self.get(fact.superseded_by)
        return fact

    def history(self, uid: str) -> list[Fact]:
        """The chain of values through fact `uid`, oldest first (empty when unknown)."""
        fact = self.get(uid.strip())
        return chain_of(self.log.facts, fact.id) if fact is not None else []

    def kept_secrets(self) -> frozenset[str]:
        """The values of named secrets ("the guest wifi password is …") in the facts kept on
        the person's or the agent's word (told, not mined from what was said in passing): files
        written from the day repeat them (`daemon.redact`)."""
        told = (f for f in self.facts() if not untrusted(f.origin) and not f.mined)
        return kept_secrets(f.text for f in told)

    def normal(self, fact: Fact) -> str:
        """`normalise(fact.text)`, once per fact: a night compares every fact it reads with
        every fact known."""
        found = self._normals.get(fact.id)
        if found is None:
            found = self._normals[fact.id] = normalise(fact.text)
        return found

    def same_text(self, text: str, *, target: str | None = None) -> Fact | None:
        """The first active fact (of `target`) whose text is `text`, folded (`normalise`)."""
        key = normalise(text)
        return next((f for f in self.facts(target=target) if self.normal(f) == key), None)

    def by_key(self, key: tuple[str, str], *, holding: str = "") -> Fact | None:
        """The active fact holding the value of `key` now (the newest, should there be several;
        of those holding the value `holding` when one does: "moves from Porto to Split" moves
        the meetup in Porto, not the one in Lyon said since)."""
        subject, attribute = key

        def same(f: Fact) -> bool:
            # "the team offsite" and later "the offsite", "the nursery" and "the nursery walls":
            # one subject's words inside the other's name the same thing.
            a, b = f" {f.subject} ", f" {subject} "
            # A thing's "value" and its place or time are one slot ("booked Sora for the
            # dinner", then "the dinner moved to Nomad").
            loose = {f.attribute, attribute} <= {"value", "where", "when"} and "value" in {
                f.attribute,
                attribute,
            }
            return (f.attribute == attribute or loose) and (a in b or b in a)

        found = [f for f in self.facts() if f.key and same(f)]
        held = [f for f in found if holding and normalise(f.value) == normalise(holding)]
        found = held or found
        return max(found, key=lambda f: f.valid_since) if found else None

    def naming(self, value: str, subject: str) -> Fact | None:
        """The newest active fact without a key that states `value` of `subject` (by its words).

        "the half marathon is Copenhagen now, not Berlin" replaces "I signed up for the Berlin
        half marathon" though the rules gave that one no key: the change names what it replaces.
        """
        want, head = normalise(value), normalise(subject).split()[-1:] or [""]
        if not want:
            return None
        found = [
            f
            for f in self.facts(target="memory")
            if not f.key
            and f" {want} " in f" {normalise(f.text)} "
            and f" {head[0]} " in f" {normalise(f.text)} "
        ]
        return max(found, key=lambda f: f.valid_since) if found else None

    def changed_by(self, subject: str, attribute: str, replaced: str) -> Fact | None:
        """The current fact a told fact gives a new value of: the same key, or the value it
        replaces."""
        if not subject:
            return None
        old = self.by_key((subject, attribute))
        if old is None and replaced:
            old = self.naming(replaced, subject)
        return old


def chain_of(facts: dict[str, Fact], uid: str) -> list[Fact]:
    """The facts superseded by and superseding `uid` (a key of `facts`), oldest first."""
    chain = [facts[uid]]
    seen = {uid}
    while (prev := chain[0].supersedes) and prev in facts and prev not in seen:
        chain.insert(0, facts[prev])
        seen.add(prev)
    while (nxt := chain[-1].superseded_by) and nxt in facts and nxt not in seen:
        chain.append(facts[nxt])
        seen.add(nxt)
    return chain
