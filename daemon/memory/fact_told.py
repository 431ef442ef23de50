"""Told facts: `remember` and `correct`, the facts the person or the agent asked to keep.

`remember` stores one fact now, unless the log holds it already (the same text: a duplicate)
or the index finds one very like it (similar). A told fact that gives a current fact a new
value — the same key (`fact_change`: subject and attribute the extractive rules read) with
another value, or naming the value it replaces ("now 31, not 12") — supersedes it, history
kept, when the trust rule lets its word change that one (`supersede`); otherwise it is not
stored and the result says which fact holds the value. Asked to keep what sleep had mined, the
told fact takes the mined one's place. `correct` supersedes a fact named by id.

A key-shaped secret is never kept, and a named one in untrusted words is not either: both are
masked before anything is stored, and the result says what was withheld (`daemon.redact`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from daemon.log import get_logger
from daemon.memory.corrections import mark_file
from daemon.memory.fact_log import TARGETS, Fact, FactError, clean_tags, normalise
from daemon.memory.fact_trust import allows, refusal, untrusted
from daemon.memory.fact_writes import FactWriter
from daemon.paths import Home

log = get_logger("memory.facts")


@dataclass(frozen=True, kw_only=True)
class RememberResult:
    """What happened to a `remember`/`correct` call."""

    status: Literal["stored", "duplicate", "similar", "corrected"]
    id: str  # the stored fact's id, or the existing one for duplicate/similar
    text: str  # the text as stored (dates resolved)
    message: str  # one line for the person or the model
    similar_to: str | None = None


@dataclass(frozen=True, kw_only=True)
class _Told:
    """A told fact about to be stored, and what it takes the place of."""

    target: str
    origin: str
    wording: str
    text: str  # dates resolved
    tags: Sequence[str]
    kept: Fact | None = None  # a mined fact this request asks to keep
    changed: Fact | None = None  # a current fact it gives a new value of
    key: tuple[str, str, str, str] = ("", "", "", "")  # subject, attribute, value, replaced


# "remember that the bike lock combination is now 168": the request, not part of the fact.
_ASKED = re.compile(
    r"^(?:please |pls )?(?:remember|note|keep in mind|make a note|don'?t forget|do not forget)"
    r"(?: that|:|,)?\s+",
    re.I,
)


def fact_change(text: str) -> tuple[str, str, str, str]:
    """(subject, attribute, value, replaced value) the extractive rules read in a fact's text."""
    from daemon.memory.mining import rules_for  # the rules: read by the first fact told

    for found in rules_for(_ASKED.sub("", " ".join(text.split()))):
        if found.get("subject") and found.get("attribute"):
            return (found["subject"], found["attribute"], found.get("value", ""),
                    found.get("replaces", ""))  # fmt: skip
    return "", "", "", ""


def fact_key(text: str) -> tuple[str, str, str]:
    """(subject, attribute, value) the extractive rules read in a fact's text ("" when none)."""
    return fact_change(text)[:3]


class ToldFacts:
    """`remember` and `correct`, over the shared `FactWriter`."""

    def __init__(self, writer: FactWriter, home: Home) -> None:
        self.w = writer
        self.home = home

    async def remember(
        self, text: str, *, target: str = "memory", origin: str = "person", tags: Sequence[str] = ()
    ) -> RememberResult:
        """Store one fact now; detect exact and near duplicates instead of storing twice."""
        masked, withheld = self.w.withhold(text, origin)
        result = await self._remember(masked, target=target, origin=origin, tags=tags)
        return said_withheld(result, withheld, origin)

    async def _remember(
        self, text: str, *, target: str, origin: str, tags: Sequence[str]
    ) -> RememberResult:
        if target not in TARGETS:
            raise FactError(
                f"unknown target {target!r}; use 'memory' (running log) or 'profile' (about the person)"
            )
        self.w.check_origin(origin)
        self.w.check("add", origin, target=target)
        wording, resolved = self.w.prepare(text)
        told = _Told(target=target, origin=origin, wording=wording, text=resolved, tags=tags)
        async with self.w.lock:
            await self.w.load()
            found = await self._place(told)
            if isinstance(found, RememberResult):
                return found
            fact = await self._store(found)
        kept, changed = found.kept, found.changed
        log.info("fact remembered", id=fact.id, target=target, origin=origin, kept=kept and kept.id,
                 supersedes=changed and changed.id)  # fmt: skip
        message = f"remembered as {fact.id}"
        if kept is not None:
            message += f" (in place of {kept.id}, which sleep had found said in passing)"
        if changed is not None:
            message += f" in place of {changed.id} ({changed.text!r}), kept in its history"
            await mark_file(self.home.wake_file, self.w.index.db)
            return RememberResult(
                status="corrected", id=fact.id, text=fact.text, message=message,
                similar_to=changed.id,
            )  # fmt: skip
        return RememberResult(status="stored", id=fact.id, text=fact.text, message=message)

    async def _place(self, told: _Told) -> _Told | RememberResult:
        """Where `told` stands among the facts: a duplicate or a similar one (the result to
        give), or to be stored, perhaps in place of a mined fact or a value it changes."""
        view = self.w.view
        same = view.same_text(told.text, target=told.target)
        if same is not None and not _keeps(same, told):
            return RememberResult(
                status="duplicate", id=same.id, text=same.text,
                message=f"already remembered as {same.id}",
            )  # fmt: skip
        key = fact_change(told.wording)
        subject, attribute, value, replaced = key
        changed = None if same is not None else view.changed_by(subject, attribute, replaced)
        if changed is not None and normalise(changed.value) == normalise(value):
            changed = None  # the same value in other words: the duplicate checks below decide
        if changed is not None and (why := refusal("supersede", told.origin, fact=changed)):
            return RememberResult(
                status="similar", id=changed.id, text=changed.text, similar_to=changed.id,
                message=f"not stored: {why}; correct {changed.id} if the person says so",
            )  # fmt: skip
        kept = same
        if kept is None and changed is None:
            kind = "profile" if told.target == "profile" else "fact"
            near = await self.w.similar(told.text, kind)
            near_fact = view.get(near.id) if near is not None else None
            if near is not None and not (near_fact is not None and _keeps(near_fact, told)):
                return RememberResult(
                    status="similar", id=near.id, text=near.text, similar_to=near.id,
                    message=f"not stored: very similar to {near.id} ({near.text!r}); use correct to update it",
                )  # fmt: skip
            kept = near_fact
        return replace(told, kept=kept, changed=changed, key=key)

    async def _store(self, told: _Told) -> Fact:
        """Append `told` and retire what it takes the place of (history kept)."""
        subject, attribute, value, replaced = told.key
        event = self.w.event("remember", target=told.target, origin=told.origin,
                             text=told.text, wording=told.wording,
                             tags=list(clean_tags(told.tags)))  # fmt: skip
        if subject:
            # A later change said in passing ("my dentist is now Dr Lee") finds it by this.
            event.update(subject=subject, attribute=attribute, value=value)
        if told.kept is not None:
            # Asked to keep what sleep had mined: the told fact takes the mined one's place.
            event.update(op="correct", supersedes=told.kept.id)
        if told.changed is not None:
            # A new value of a current fact: it supersedes that one as a mined change does
            # (the old one's validity ends here; it stays in history).
            event.update(op="correct", supersedes=told.changed.id, target=told.changed.target,
                         valid_from=event["ts"])  # fmt: skip
            if replaced:
                event["replaced"] = replaced
        fact = await self.w.append(event)
        await self.w.index_and_render(fact)
        if told.kept is not None:
            await self.w.index.retire(told.kept.id, at=fact.created_at, superseded_by=fact.id)
        if told.changed is not None:
            await self.w.index.retire(told.changed.id, at=fact.valid_since, superseded_by=fact.id)
        return fact

    async def correct(self, uid: str, text: str, *, origin: str) -> RememberResult:
        """Supersede fact `uid` with `text`; the old fact stays in history, linked to the new one.
        Secrets are withheld as `remember` withholds them."""
        self.w.check_origin(origin)
        self.w.require_store()
        text, withheld = self.w.withhold(text, origin)
        wording, resolved = self.w.prepare(text)
        async with self.w.lock:
            await self.w.load()
            old = self.w.require_active(uid.strip())
            self.w.check("amend", origin, fact=old)
            if normalise(resolved) == normalise(old.text):
                raise FactError(f"the correction is identical to {old.id}; nothing to change")
            event: dict[str, Any] = self.w.event(
                "correct", target=old.target, origin=origin, text=resolved, wording=wording,
                tags=list(old.tags), supersedes=old.id,
            )  # fmt: skip
            subject, attribute, value = fact_key(wording)
            if subject or old.key:
                event.update(
                    subject=subject or old.subject,
                    attribute=attribute or old.attribute,
                    value=value if subject else "",
                )
            fact = await self.w.append(event)
            await self.w.index_and_render(fact)
            await self.w.index.retire(old.id, at=fact.created_at, superseded_by=fact.id)
        log.info("fact corrected", id=fact.id, supersedes=old.id, origin=origin)
        await mark_file(self.home.wake_file, self.w.index.db)  # the letter read until next wake
        done = RememberResult(
            status="corrected",
            id=fact.id,
            text=fact.text,
            message=f"{old.id} corrected as {fact.id}",
            similar_to=old.id,
        )
        return said_withheld(done, withheld, origin)


def _keeps(fact: Fact, told: _Told) -> bool:
    """True when remembering `told` over `fact` keeps it: it was mined, it holds, and the
    trust rule lets this word take its place."""
    return (
        fact.mined
        and fact.active
        and fact.target == told.target
        and allows("supersede", told.origin, fact=fact)
    )


def said_withheld(result: RememberResult, withheld: list[str], origin: str) -> RememberResult:
    """`result`, its message saying which secrets were not kept (never dropped silently)."""
    if not withheld:
        return result
    log.info("secret withheld from a fact", kinds=withheld, origin=origin)
    what = ", ".join(k.replace("-", " ") for k in withheld)
    why = (
        f"a secret in {origin!r} text is not kept"
        if untrusted(origin)
        else "secrets of that shape are never kept in memory"
    )
    return replace(result, message=f"{result.message} (withheld: the {what}; {why})")
