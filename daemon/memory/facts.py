"""Explicit facts: `remember`, `correct`, `retract` over an append-only, fsynced event log.

`memory/facts.jsonl` is the source of truth: one JSON event per line, never rewritten. The
index rows, `MEMORY.md` (the running log) and `PROFILE.md` (stable facts about the person)
are derived from it and can be rebuilt at any time. A correction links the new fact to the
one it supersedes; a retraction retires a fact with a reason. Neither deletes anything, so
history stays searchable.

Every event carries the origin of the text it came from (`ORIGINS`): `person` for the
person's own word (the CLI, or their own words in a turn: `daemon.agent.provenance`), `agent`,
`tool`, `system`, `import`. Pinning into `FACTS.md` follows it: sleep proposes (`propose_pin`,
origin system) a fact that is not the person's own word, and only the person's `pin` event
confirms it.

Facts are *told* (the person or the agent asked to keep them: `remember`) or *mined* (the
sleep cycle found them said in passing: `record_mined`, with the session and message ids
they rest on). A fact may carry a key (`subject`, `attribute`): a mined fact with the key of
an active fact and another value is a change — it supersedes the old one (`op: correct`,
`source: mined`), whose validity ends where the new one's begins (`valid_from`); the old
one stays in history (`history`) and the new one's index row says what it changed from.
A told fact (`remember`) with the key of a current fact and another value, or naming the
value it replaces ("now 31, not 12"), supersedes it the same way; a less trusted word than
the current fact's is refused instead.

Several processes may write (the daemon and `reverie remember`): ids are allocated and lines
appended under an exclusive `flock` after reading whatever another process appended.

Size: one store for every operation on the fact log (remember, correct, retract, restore,
pin, reinstate, mined facts) — they share its lock, its replay and its renderings.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import unicodedata
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import anyio

from daemon.clock import Clock
from daemon.durable import write_atomic
from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.memory.api import UNTRUSTED_ORIGINS, MemoryItem
from daemon.memory.corrections import mark_file
from daemon.memory.ids import fact_uid
from daemon.memory.index import MemoryIndex
from daemon.memory.mining import MinedFact, resolve_plan_dates, rules_for
from daemon.memory.rows import NewMemory, iso
from daemon.memory.slots import says_change
from daemon.memory.writer import next_generation, write
from daemon.paths import Home
from daemon.redact import kept_secrets, redactor_for
from daemon.settings import Settings
from daemon.store.postgres import StoreAway

log = get_logger("memory.facts")

Target = Literal["memory", "profile"]
TARGETS: tuple[str, ...] = ("memory", "profile")
ORIGINS: tuple[str, ...] = ("person", "agent", "tool", "system", "import")
SOURCES: tuple[str, ...] = ("told", "mined")
# Whose word may change whose: a fact is superseded only by one at least as trusted.
_TRUST = {"person": 0, "system": 1, "agent": 1, "tool": 2, "import": 2}
MAX_FACT_CHARS = 2000
_FACT_ID = re.compile(r"^fact:(\d+)$")


class FactError(ReverieError, ValueError):
    """A remember/correct/retract request cannot be honoured; the message says why and what to do."""


@dataclass(frozen=True, kw_only=True)
class RememberResult:
    """What happened to a `remember`/`correct` call."""

    status: Literal["stored", "duplicate", "similar", "corrected"]
    id: str  # the stored fact's id, or the existing one for duplicate/similar
    text: str  # the text as stored (dates resolved)
    message: str  # one line for the person or the model
    similar_to: str | None = None


@dataclass(frozen=True, kw_only=True)
class Fact:
    """One explicit fact as the log describes it now."""

    id: str
    target: Target
    text: str
    wording: str  # as given, before dates were resolved
    origin: str
    created_at: datetime
    tags: tuple[str, ...] = ()
    supersedes: str | None = None
    superseded_by: str | None = None
    retired_at: datetime | None = None
    reason: str = ""
    restored_at: datetime | None = None  # when a retraction was last undone
    pin_proposed_at: datetime | None = None  # sleep asked the person to confirm pinning it
    pin_confirmed_at: datetime | None = None  # the person confirmed pinning it
    source: str = "told"  # told (asked to keep) | mined (found by sleep in a conversation)
    mined_kind: str = ""  # a mined fact's kind: preference, person, decision, plan, change, fact
    subject: str = ""  # the key of knowledge that may change: whose or what …
    attribute: str = ""  # … and which property of it
    value: str = ""
    valid_from: datetime | None = None  # when it became true (said); created_at when unknown
    session: str | None = None  # provenance of a mined fact: the session and messages
    message_ids: tuple[str, ...] = ()
    replaced: str = ""  # the earlier value its statement names ("from Bergen"), if any

    @property
    def active(self) -> bool:
        return self.retired_at is None

    @property
    def mined(self) -> bool:
        return self.source == "mined"

    @property
    def key(self) -> tuple[str, str] | None:
        return (self.subject, self.attribute) if self.subject and self.attribute else None

    @property
    def valid_since(self) -> datetime:
        return self.valid_from or self.created_at

    @property
    def invalid_from(self) -> datetime | None:
        """When it stopped holding: superseded or retracted (None while it holds)."""
        return self.retired_at

    @property
    def kind(self) -> Literal["fact", "profile"]:
        return "profile" if self.target == "profile" else "fact"


def normalise(text: str) -> str:
    """Fold case, accents, punctuation and spacing so trivially different texts compare equal."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return " ".join(re.sub(r"[^\w\s:-]", " ", folded).split())


def clean_tags(tags: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for tag in tags:
        norm = "-".join(str(tag).strip().lower().lstrip("#").split())
        if norm and norm not in out:
            out.append(norm[:40])
    return tuple(out[:12])


def local_timezone(settings: Settings) -> tzinfo:
    """The person's timezone: the scheduler's when configured, otherwise the machine's."""
    if settings.scheduler.timezone:
        return ZoneInfo(settings.scheduler.timezone)
    tz = datetime.now().astimezone().tzinfo
    assert tz is not None
    return tz


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


class FactLog:
    """The append-only `facts.jsonl`; replays into `Fact`s. Blocking I/O: call via a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.facts: dict[str, Fact] = {}
        self._offset = 0
        self._max_number = 0

    def refresh(self) -> list[dict[str, Any]]:
        """Read lines appended since the last call (by anyone); return their events."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        events: list[dict[str, Any]] = []
        consumed = 0
        for raw in data.splitlines(keepends=True):
            if not raw.endswith(b"\n"):
                break  # a line still being written (or torn by a crash): read it next time
            consumed += len(raw)
            line = raw.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
                self._apply(event)
                events.append(event)
            except (ValueError, KeyError, TypeError) as exc:
                # Keep the line (nothing is lost); just do not let it poison the replay.
                log.warning(
                    "skipping unreadable line in facts log", path=str(self.path), error=repr(exc)
                )
        self._offset += consumed
        return events

    def _apply(self, event: dict[str, Any]) -> None:
        op = event["op"]
        uid = str(event["id"])
        m = _FACT_ID.match(uid)
        if m:
            self._max_number = max(self._max_number, int(m.group(1)))
        ts = datetime.fromisoformat(event["ts"])
        if op in ("remember", "correct"):
            valid = event.get("valid_from")
            fact = Fact(
                id=uid,
                target="profile" if event.get("target") == "profile" else "memory",
                text=str(event["text"]),
                wording=str(event.get("wording", event["text"])),
                origin=str(event.get("origin", "person")),
                created_at=ts,
                tags=tuple(event.get("tags", ())),
                supersedes=event.get("supersedes"),
                source="mined" if event.get("source") == "mined" else "told",
                mined_kind=str(event.get("kind") or ""),
                subject=str(event.get("subject") or ""),
                attribute=str(event.get("attribute") or ""),
                value=str(event.get("value") or ""),
                valid_from=datetime.fromisoformat(valid) if valid else None,
                session=event.get("session"),
                message_ids=tuple(str(m) for m in event.get("message_ids") or ()),
                replaced=str(event.get("replaced") or ""),
            )
            self.facts[uid] = fact
            old = self.facts.get(fact.supersedes or "")
            if old is not None:
                # The old value held until the new one did (a mined change says since when).
                self.facts[old.id] = replace(
                    old,
                    superseded_by=uid,
                    retired_at=fact.valid_from or ts,
                    reason="changed" if fact.mined else "corrected",
                )
        elif op == "retract":
            old = self.facts.get(uid)
            if old is not None:
                self.facts[uid] = replace(old, retired_at=ts, reason=str(event.get("reason", "")))
        elif op in ("pin", "propose_pin"):
            old = self.facts.get(uid)
            # Only the person's own pin event confirms; anything else calling itself a pin is
            # at most a proposal.
            confirmed = op == "pin" and event.get("origin") == "person"
            if old is not None and confirmed:
                self.facts[uid] = replace(old, pin_confirmed_at=ts)
            elif old is not None:
                self.facts[uid] = replace(old, pin_proposed_at=ts)
        elif op == "reinstate":
            # Undo a supersession: the old value holds again, the one that replaced it does not.
            old = self.facts.get(uid)
            if old is not None and old.superseded_by:
                newer = self.facts.get(old.superseded_by)
                if newer is not None and newer.active:
                    reason = str(event.get("reason", "")) or "reinstated"
                    self.facts[newer.id] = replace(newer, retired_at=ts, reason=reason)
                self.facts[uid] = replace(old, superseded_by=None, retired_at=None, reason="")
        elif op == "restore":
            # Undo a retraction (e.g. one made by sleep maintenance); a correction stays undone only by another correction.
            old = self.facts.get(uid)
            if old is not None and old.superseded_by is None:
                self.facts[uid] = replace(old, retired_at=None, reason="", restored_at=ts)
        else:
            raise KeyError(f"unknown op {op!r}")

    def append(self, event: dict[str, Any]) -> dict[str, Any]:
        """Allocate the next id when `event["id"]` is None, append under flock, fsync; return it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                self.refresh()
                if event.get("id") is None:
                    event = {**event, "id": f"fact:{self._max_number + 1}"}
                fh.seek(0, os.SEEK_END)
                prefix = b""
                if fh.tell() > 0:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        prefix = b"\n"  # a torn last line must not swallow this event
                fh.write(prefix + json.dumps(event, ensure_ascii=False).encode() + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        self.refresh()
        return event


MINED_IMPORTANCE = 0.6  # below a told fact's 0.7: said in passing, not asked to be kept


def _memory_of(fact: Fact, previous: Fact | None = None) -> NewMemory:
    """The index row of `fact`; `previous` is the fact it supersedes (what it changed from)."""
    meta: dict[str, object] = {
        "target": fact.target,
        "wording": fact.wording,
        "untrusted": fact.origin in UNTRUSTED_ORIGINS,
        "source": fact.source,
    }
    if fact.key:
        meta.update(subject=fact.subject, attribute=fact.attribute, value=fact.value)
    if fact.mined:
        meta.update(mined_kind=fact.mined_kind, provenance={
            "session": fact.session, "message_ids": list(fact.message_ids)})  # fmt: skip
    if fact.replaced and fact.value:
        meta["replaced"] = fact.replaced  # the value its statement names as replaced
    if previous is not None:
        meta.update(
            changed_from=fact.replaced
            or (previous.value if previous.value and fact.value else previous.text),
            changed_on=iso(fact.valid_since),
        )
    return NewMemory(
        uid=fact.id,
        kind=fact.kind,
        text=fact.text,
        origin=fact.origin,  # type: ignore[arg-type]
        created_at=fact.created_at,
        valid_from=fact.valid_from,
        tags=fact.tags,
        importance=MINED_IMPORTANCE if fact.mined else (0.8 if fact.target == "profile" else 0.7),
        explicit=not fact.mined,
        supersedes=fact.supersedes,
        source="memory/facts.jsonl",
        meta=meta,
    )


@dataclass(frozen=True, kw_only=True)
class MinedOutcome:
    """What `record_mined` did with one mined fact."""

    status: Literal["stored", "superseded", "confirmed", "similar", "kept"]
    id: str  # the stored fact, or the existing one it confirmed / resembles / left standing
    old_id: str | None = None  # the fact it superseded
    message: str = ""


# "remember that the bike lock combination is now 168": the request, not part of the fact.
_ASKED = re.compile(
    r"^(?:please |pls )?(?:remember|note|keep in mind|make a note|don'?t forget|do not forget)"
    r"(?: that|:|,)?\s+",
    re.I,
)


def fact_change(text: str) -> tuple[str, str, str, str]:
    """(subject, attribute, value, replaced value) the extractive rules read in a fact's text."""
    for found in rules_for(_ASKED.sub("", " ".join(text.split()))):
        if found.get("subject") and found.get("attribute"):
            return (found["subject"], found["attribute"], found.get("value", ""),
                    found.get("replaces", ""))  # fmt: skip
    return "", "", "", ""


def fact_key(text: str) -> tuple[str, str, str]:
    """(subject, attribute, value) the extractive rules read in a fact's text ("" when none)."""
    return fact_change(text)[:3]


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


def _days_named(text: str) -> set[tuple[int, int]]:
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
    `was`: the days the known fact's occasion is on (`FactStore.occasion_days`).
    """
    if mined.attribute == "when" or mined.replaces or mined.uncertain or mined.kind == "change":
        return False
    if says_change(mined.text):
        return False
    new = _days_named(mined.text)
    return bool(new) and bool(was) and not new & was


class FactStore:
    """Remember, correct and retract explicit facts; keep the index and renderings in step.

    Writes are serialised in-process by a lock (delegate forks write concurrently) and across
    processes by the log's flock. Cancellation during a write may leave the index behind the
    log; `sync()` (run at start-up) repairs that from the log.
    """

    def __init__(self, *, home: Home, index: MemoryIndex, settings: Settings, clock: Clock) -> None:
        self.home = home
        self.index = index
        self.settings = settings
        self.clock = clock
        self.tz = local_timezone(settings)
        self.log = FactLog(home.memory_dir / "facts.jsonl")
        self._lock = anyio.Lock()
        self._deferred = 0  # inside `rendering_once`: MEMORY.md is written at its end
        self._normals: dict[str, str] = {}  # fact id → its normalised text (texts never change)

    @property
    def memory_md(self) -> Path:
        return self.home.memory_dir / "MEMORY.md"

    @property
    def profile_md(self) -> Path:
        return self.home.memory_dir / "PROFILE.md"

    # --- reading -----------------------------------------------------------------------
    async def load(self) -> None:
        await anyio.to_thread.run_sync(self.log.refresh)

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

    def kept_secrets(self) -> frozenset[str]:
        """The values of named secrets ("the guest wifi password is …") in the facts kept on
        the person's or the agent's word (told, not mined from what was said in passing): files
        written from the day repeat them (`daemon.redact`)."""
        told = (f for f in self.facts() if f.origin not in UNTRUSTED_ORIGINS and not f.mined)
        return kept_secrets(f.text for f in told)

    def current(self, uid: str) -> Fact | None:
        """Follow corrections from `uid` to the fact that replaced it last."""
        fact = self.get(uid)
        seen: set[str] = set()
        while fact is not None and fact.superseded_by and fact.id not in seen:
            seen.add(fact.id)
            fact = self.get(fact.superseded_by)
        return fact

    # --- writing -----------------------------------------------------------------------
    def _check_origin(self, origin: str) -> None:
        if origin not in ORIGINS:
            raise FactError(f"unknown origin {origin!r}; expected one of {', '.join(ORIGINS)}")

    @staticmethod
    def _check_profile_change(fact: Fact, origin: str) -> None:
        """Untrusted text never corrects, retracts or restores a profile fact."""
        if fact.target == "profile" and origin in UNTRUSTED_ORIGINS:
            raise FactError(
                f"refused: content from {origin!r} is untrusted and cannot change the profile"
            )

    def _prepare(self, text: str) -> tuple[str, str]:
        wording = " ".join(str(text).split())
        if not wording:
            raise FactError("nothing to remember: the text is empty")
        if len(wording) > MAX_FACT_CHARS:
            raise FactError(
                f"a fact is one atomic statement; this one is {len(wording)} characters "
                f"(limit {MAX_FACT_CHARS}): split it into several facts"
            )
        return wording, resolve_plan_dates(wording, self.clock.now().astimezone(self.tz))

    async def remember(
        self, text: str, *, target: str = "memory", origin: str = "person", tags: Sequence[str] = ()
    ) -> RememberResult:
        """Store one fact now; detect exact and near duplicates instead of storing twice.

        A key-shaped secret (an API key, a token, a private key) is never kept: it is masked
        before anything is stored, and so is a named one ("password is …") in untrusted words
        (a tool's output, an import); the result says what was withheld (`daemon.redact`).
        """
        masked, withheld = self._withhold(text, origin)
        result = await self._remember(masked, target=target, origin=origin, tags=tags)
        return self._said_withheld(result, withheld, origin)

    def _withhold(self, text: str, origin: str) -> tuple[str, list[str]]:
        named_too = origin in UNTRUSTED_ORIGINS  # a tool's output, a file, a page, an import
        return redactor_for(self.settings).withhold(str(text), named_too=named_too)

    @staticmethod
    def _said_withheld(result: RememberResult, withheld: list[str], origin: str) -> RememberResult:
        """`result`, its message saying which secrets were not kept (never dropped silently)."""
        if not withheld:
            return result
        log.info("secret withheld from a fact", kinds=withheld, origin=origin)
        what = ", ".join(k.replace("-", " ") for k in withheld)
        why = (
            f"a secret in {origin!r} text is not kept"
            if origin in UNTRUSTED_ORIGINS
            else "secrets of that shape are never kept in memory"
        )
        return replace(result, message=f"{result.message} (withheld: the {what}; {why})")

    async def _remember(
        self, text: str, *, target: str, origin: str, tags: Sequence[str]
    ) -> RememberResult:
        if target not in TARGETS:
            raise FactError(
                f"unknown target {target!r}; use 'memory' (running log) or 'profile' (about the person)"
            )
        self._check_origin(origin)
        if target == "profile" and origin in UNTRUSTED_ORIGINS:
            raise FactError(
                f"refused: content from {origin!r} is untrusted and cannot go into the profile; "
                "store it with target 'memory' instead"
            )
        wording, resolved = self._prepare(text)
        async with self._lock:
            await self.load()
            key = normalise(resolved)
            kept: Fact | None = None  # a mined fact this request asks to keep
            for fact in self.facts(target=target):
                if normalise(fact.text) == key:
                    if self._keeps(fact, origin, target):
                        kept = fact
                        break
                    return RememberResult(
                        status="duplicate",
                        id=fact.id,
                        text=fact.text,
                        message=f"already remembered as {fact.id}",
                    )
            subject, attribute, value, replaced = fact_change(wording)
            changed = None if kept is not None else self._changes(subject, attribute, replaced)
            if changed is not None and normalise(changed.value) == normalise(value):
                changed = None  # the same value in other words: the duplicate checks below decide
            if changed is not None and not self._may_change(changed, origin):
                return RememberResult(
                    status="similar", id=changed.id, text=changed.text, similar_to=changed.id,
                    message=(
                        f"not stored: {changed.id} ({changed.text!r}) holds this, on the "
                        f"{changed.origin}'s word, which {origin!r} text does not change; "
                        f"correct {changed.id} if the person says so"
                    ),
                )  # fmt: skip
            kind = "profile" if target == "profile" else "fact"
            skip_near = kept is not None or changed is not None
            near = None if skip_near else await self._similar(resolved, kind)
            if near is not None and self._keeps(self.get(near.id), origin, target):
                kept, near = self.get(near.id), None
            if near is not None:
                return RememberResult(
                    status="similar",
                    id=near.id,
                    text=near.text,
                    similar_to=near.id,
                    message=f"not stored: very similar to {near.id} ({near.text!r}); use correct to update it",
                )
            event = {
                "v": 1,
                "op": "remember",
                "id": None,
                "ts": _iso(self.clock.now()),
                "target": target,
                "origin": origin,
                "text": resolved,
                "wording": wording,
                "tags": list(clean_tags(tags)),
            }
            if subject:
                # A later change said in passing ("my dentist is now Dr Lee") finds it by this.
                event.update(subject=subject, attribute=attribute, value=value)
            if kept is not None:
                # Asked to keep what sleep had mined: the told fact takes the mined one's place.
                event.update(op="correct", supersedes=kept.id)
            if changed is not None:
                # A new value of a current fact: it supersedes that one as a mined change does
                # (the old one's validity ends here; it stays in history).
                event.update(op="correct", supersedes=changed.id, target=changed.target,
                             valid_from=event["ts"])  # fmt: skip
                if replaced:
                    event["replaced"] = replaced
            written = await anyio.to_thread.run_sync(self.log.append, event)
            fact = self.log.facts[written["id"]]
            await self._index_and_render(fact)
            if kept is not None:
                await self.index.retire(kept.id, at=fact.created_at, superseded_by=fact.id)
            if changed is not None:
                await self.index.retire(changed.id, at=fact.valid_since, superseded_by=fact.id)
        log.info("fact remembered", id=fact.id, target=target, origin=origin, kept=kept and kept.id,
                 supersedes=changed and changed.id)  # fmt: skip
        message = f"remembered as {fact.id}"
        if kept is not None:
            message += f" (in place of {kept.id}, which sleep had found said in passing)"
        if changed is not None:
            message += f" in place of {changed.id} ({changed.text!r}), kept in its history"
            await mark_file(self.home.wake_file, self.index.db)
            return RememberResult(
                status="corrected", id=fact.id, text=fact.text, message=message,
                similar_to=changed.id,
            )  # fmt: skip
        return RememberResult(status="stored", id=fact.id, text=fact.text, message=message)

    def _changes(self, subject: str, attribute: str, replaced: str) -> Fact | None:
        """The current fact a told fact gives a new value of: the same key, or the value it replaces."""
        if not subject:
            return None
        old = self.by_key((subject, attribute))
        if old is None and replaced:
            old = self._naming(replaced, subject)
        return old

    @staticmethod
    def _may_change(old: Fact, origin: str) -> bool:
        """A fact is superseded only by a word at least as trusted (never the profile by untrusted text)."""
        return _TRUST.get(origin, 2) <= _TRUST.get(old.origin, 2) and not (
            old.target == "profile" and origin in UNTRUSTED_ORIGINS
        )

    @staticmethod
    def _keeps(fact: Fact | None, origin: str, target: str) -> bool:
        """True when remembering over `fact` keeps it: it was mined, and this word is as trusted."""
        return (
            fact is not None
            and fact.mined
            and fact.active
            and fact.target == target
            and _TRUST.get(origin, 2) <= _TRUST.get(fact.origin, 2)
        )

    def _require_store(self) -> None:
        """Refuse a change to a fact already indexed while the store's server is away: the
        log would take it and the index keep the old state (only new facts are caught up)."""
        since = self.index.db.away_since
        if since is not None:
            raise FactError(
                f"the memory store's server is away since {since:%H:%M:%S %Z}; "
                "corrections and retractions wait until it is back (nothing was changed)"
            )

    async def _similar(self, text: str, kind: str) -> MemoryItem | None:
        threshold = self.settings.memory.near_duplicate_threshold
        try:
            similar = await self.index.similar(text, [kind], threshold)
        except StoreAway:
            # The store's server is away: exact duplicates are still caught from the log; a
            # near one is not, rather than refusing what the person asked to keep.
            return None
        for item in similar:
            fact = self.get(item.id)
            if fact is not None and fact.active:
                return item
        return None

    def _require_active(self, uid: str) -> Fact:
        uid = fact_uid(uid)
        fact = self.get(uid)
        if fact is None:
            raise FactError(f"no fact with id {uid!r} (ids look like fact:12; `recall` shows them)")
        if fact.superseded_by:
            latest = self.current(uid)
            raise FactError(
                f"{uid} was already corrected by {fact.superseded_by}; correct {latest.id if latest else fact.superseded_by} instead"
            )
        if not fact.active:
            raise FactError(
                f"{uid} was retracted ({fact.reason or 'no reason given'}); remember it again if it holds"
            )
        return fact

    async def correct(self, uid: str, text: str, *, origin: str) -> RememberResult:
        """Supersede fact `uid` with `text`; the old fact stays in history, linked to the new one.
        Secrets are withheld as `remember` withholds them."""
        self._check_origin(origin)
        self._require_store()
        text, withheld = self._withhold(text, origin)
        wording, resolved = self._prepare(text)
        async with self._lock:
            await self.load()
            old = self._require_active(uid.strip())
            self._check_profile_change(old, origin)
            if normalise(resolved) == normalise(old.text):
                raise FactError(f"the correction is identical to {old.id}; nothing to change")
            event = {
                "v": 1,
                "op": "correct",
                "id": None,
                "ts": _iso(self.clock.now()),
                "target": old.target,
                "origin": origin,
                "text": resolved,
                "wording": wording,
                "tags": list(old.tags),
                "supersedes": old.id,
            }
            subject, attribute, value = fact_key(wording)
            if subject or old.key:
                event.update(
                    subject=subject or old.subject,
                    attribute=attribute or old.attribute,
                    value=value if subject else "",
                )
            written = await anyio.to_thread.run_sync(self.log.append, event)
            fact = self.log.facts[written["id"]]
            await self._index_and_render(fact)
            await self.index.retire(old.id, at=fact.created_at, superseded_by=fact.id)
        log.info("fact corrected", id=fact.id, supersedes=old.id, origin=origin)
        await mark_file(self.home.wake_file, self.index.db)  # the letter read until next wake
        done = RememberResult(
            status="corrected",
            id=fact.id,
            text=fact.text,
            message=f"{old.id} corrected as {fact.id}",
            similar_to=old.id,
        )
        return self._said_withheld(done, withheld, origin)

    async def retract(self, uid: str, *, reason: str, origin: str) -> Fact:
        """Retire fact `uid` with `reason`; it stays searchable as history."""
        self._check_origin(origin)
        self._require_store()
        async with self._lock:
            await self.load()
            old = self._require_active(uid.strip())
            self._check_profile_change(old, origin)
            await self._log_status("retract", old.id, origin, reason)
            await self.index.retire(old.id, at=self.clock.now())
            await self.render()
        log.info("fact retracted", id=old.id, origin=origin)
        return self.log.facts[old.id]

    async def _log_status(self, op: str, fact_id: str, origin: str, reason: str) -> None:
        """Append a status event (retract, restore, pin, propose_pin); the reason is one line (≤ 500 chars)."""
        event = {
            "v": 1,
            "op": op,
            "id": fact_id,
            "ts": _iso(self.clock.now()),
            "origin": origin,
            "reason": " ".join(str(reason).split())[:500]
            or {"retract": "retracted", "restore": "restored"}.get(op, op),
        }
        await anyio.to_thread.run_sync(self.log.append, event)

    async def restore(self, uid: str, *, origin: str, reason: str = "restored") -> Fact:
        """Undo the retraction of fact `uid` (an append-only `restore` event); it is active again."""
        self._check_origin(origin)
        self._require_store()
        async with self._lock:
            await self.load()
            fact = self.get(uid.strip())
            if fact is None:
                raise FactError(
                    f"no fact with id {uid!r} (ids look like fact:12; `recall` shows them)"
                )
            if fact.superseded_by:
                raise FactError(
                    f"{fact.id} was corrected by {fact.superseded_by}; a correction cannot be restored"
                )
            if fact.active:
                raise FactError(f"{fact.id} is not retracted; nothing to restore")
            self._check_profile_change(fact, origin)
            await self._log_status("restore", fact.id, origin, reason)
            await self.index.restore(fact.id)
            await self.render()
        log.info("fact restored", id=fact.id, origin=origin)
        return self.log.facts[fact.id]

    async def reinstate(self, uid: str, *, origin: str, reason: str = "reinstated") -> Fact:
        """Undo the supersession of fact `uid`: it is current again, its successor retired.

        One append-only `reinstate` event; nothing is deleted, both stay in history.
        """
        self._check_origin(origin)
        async with self._lock:
            await self.load()
            fact = self.get(uid.strip())
            if fact is None:
                raise FactError(f"no fact with id {uid!r} (ids look like fact:12)")
            if not fact.superseded_by:
                raise FactError(f"{fact.id} was not superseded; nothing to reinstate")
            newer = self.get(fact.superseded_by)
            if newer is not None and newer.superseded_by:
                raise FactError(
                    f"{newer.id} was itself superseded by {newer.superseded_by}; "
                    "reinstate the newest change first"
                )
            self._check_profile_change(fact, origin)
            await self._log_status("reinstate", fact.id, origin, reason)
            if newer is not None:
                await self.index.retire(newer.id, at=self.clock.now())
            await self.index.upsert([_memory_of(self.log.facts[fact.id])])

            def current_again(conn: Any) -> None:
                conn.execute(
                    "UPDATE memories SET retired_at = NULL, superseded_by = NULL, version = ? "
                    "WHERE uid = ?",
                    (next_generation(conn), fact.id),
                )

            await self.index.db.run(write, current_again)
            await self.render()
        log.info("fact reinstated", id=fact.id, retired=fact.superseded_by, origin=origin)
        return self.log.facts[fact.id]

    async def pin(self, uid: str, *, origin: str) -> Fact:
        """Record the person's confirmation that fact `uid` may be pinned in FACTS.md.

        Only the person confirms, and never a fact from tool output or an import: whose word
        that is cannot be vouched for (the person can state it themselves with `remember`).
        """
        self._check_origin(origin)
        if origin != "person":
            raise FactError(f"only the person can confirm a pin, not origin {origin!r}")
        async with self._lock:
            await self.load()
            fact = self._require_active(uid.strip())
            if fact.origin in UNTRUSTED_ORIGINS:
                raise FactError(
                    f"refused: {fact.id} came from {fact.origin!r} text, which is never pinned; "
                    "if it holds, say it yourself: reverie remember TEXT"
                )
            if fact.pin_confirmed_at is None:
                await self._log_status("pin", fact.id, origin, "pin confirmed by the person")
                await self.render()
        log.info("fact pin confirmed", id=fact.id)
        return self.log.facts[fact.id]

    async def propose_pin(self, uid: str, *, reason: str) -> bool:
        """Ask the person to confirm pinning active fact `uid`; False when already asked (or gone)."""
        async with self._lock:
            await self.load()
            fact = self.get(uid)
            if fact is None or not fact.active or fact.pin_proposed_at is not None:
                return False
            await self._log_status("propose_pin", fact.id, "system", reason)
            await self.render()
        log.info("fact proposed for pinning", id=fact.id, reason=reason)
        return True

    async def _index_and_render(self, fact: Fact) -> None:
        try:
            await self.index.upsert([_memory_of(fact, self.get(fact.supersedes or ""))])
        except StoreAway:
            # The log holds it: `sync` indexes it once the server is back.
            log.warning("fact kept in the log; indexed when the store is back", id=fact.id)
        await self.render()

    # --- mined facts ---------------------------------------------------------------------
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

    async def record_mined(self, mined: MinedFact) -> MinedOutcome:
        """Store a fact found in conversation: new, a change of a known one, or one known already.

        - the same text as an active fact, or the same key and value: that fact is confirmed
          (said again: it is not stale), nothing is stored;
        - the same key as an active fact, another value, said later, by a source at least as
          trusted: it supersedes that fact (history kept, validity times set);
        - very like an active fact (the index's near-duplicate check): left out;
        - otherwise stored, marked mined, with its origin and provenance.
        """
        self._check_origin(mined.origin)
        wording, _ = self._prepare(mined.text)
        async with self._lock:
            await self.load()
            key = normalise(mined.text)
            same_text = next((f for f in self.facts() if self._normal(f) == key), None)
            if same_text is not None and not self._moves_another(mined, same_text):
                await self._confirm(same_text.id, mined.said_at)
                return MinedOutcome(status="confirmed", id=same_text.id)
            old = self.by_key(mined.key, holding=mined.replaces) if mined.key else None
            # Another dated occasion of the same thing is stored beside it, not over it.
            occasion = old is not None and another_occasion(self.occasion_days(old), mined)
            if occasion:
                old = None
            if mined.supersedes:
                # A slot said again: the fact it names, unless something newer holds it now.
                named = self.get(mined.supersedes)
                if (
                    named is not None
                    and named.active
                    and (old is None or old.valid_since <= named.valid_since)
                ):
                    old = named
            if old is None and mined.key and mined.replaces:
                old = self._naming(mined.replaces, mined.subject)
            if (
                old is not None
                and not mined.uncertain
                and normalise(old.value) == normalise(mined.value)
            ):
                await self._confirm(old.id, mined.said_at)
                return MinedOutcome(status="confirmed", id=old.id)
            supersede = (
                old is not None
                and mined.said_at >= old.valid_since
                and _TRUST.get(mined.origin, 2) <= _TRUST.get(old.origin, 2)
                and not (old.target == "profile" and mined.origin in UNTRUSTED_ORIGINS)
            )
            if old is not None and not supersede:
                # Older news, or a weaker source (tool text never changes the person's word).
                return MinedOutcome(
                    status="kept", id=old.id,
                    message=f"{old.id} holds the value of {mined.subject}/{mined.attribute}; not changed",
                )  # fmt: skip
            if not supersede and not occasion:
                near = await self._similar(mined.text, "fact")
                if near is not None:
                    return MinedOutcome(status="similar", id=near.id)
            event: dict[str, Any] = {
                "v": 1,
                "op": "correct" if supersede else "remember",
                "id": None,
                "ts": _iso(self.clock.now()),
                "target": old.target if supersede and old is not None else "memory",
                "origin": mined.origin,
                "text": mined.text,
                "wording": wording,
                "tags": ["uncertain"] if mined.uncertain else [],
                "source": "mined",
                "kind": mined.kind,
                "valid_from": _iso(mined.said_at),
                "session": mined.session,
                "message_ids": list(mined.message_ids),
            }
            if mined.key:
                event.update(subject=mined.subject, attribute=mined.attribute, value=mined.value)
            if mined.replaces:
                event["replaced"] = mined.replaces
            if supersede and old is not None:
                event["supersedes"] = old.id
            written = await anyio.to_thread.run_sync(self.log.append, event)
            fact = self.log.facts[written["id"]]
            await self._index_and_render(fact)
            if supersede and old is not None:
                await self.index.retire(old.id, at=fact.valid_since, superseded_by=fact.id)
        log.info("fact mined", id=fact.id, origin=fact.origin, supersedes=fact.supersedes)
        if supersede and old is not None:
            return MinedOutcome(status="superseded", id=fact.id, old_id=old.id)
        return MinedOutcome(status="stored", id=fact.id)

    def _moves_another(self, mined: MinedFact, same: Fact) -> bool:
        """True when a change worded as an active fact moves another fact that holds the
        value it replaces ("the meetup moves from Porto to Lyon" said of this week's meetup
        in Porto, in the words that moved last month's): a new change, not the old said again."""
        if not (mined.key and mined.replaces):
            return False
        held = self.by_key(mined.key, holding=mined.replaces)
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
            days = _days_named(cur.text)
            if days:
                return days
            seen.add(cur.id)
            cur = self.get(cur.supersedes or "")
        return set()

    def _normal(self, fact: Fact) -> str:
        """`normalise(fact.text)`, once per fact: a night compares every fact it reads with
        every fact known."""
        found = self._normals.get(fact.id)
        if found is None:
            found = self._normals[fact.id] = normalise(fact.text)
        return found

    def _naming(self, value: str, subject: str) -> Fact | None:
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

    async def _confirm(self, uid: str, at: datetime) -> None:
        """Note that fact `uid` was said again at `at` (it is not stale; nothing is rewritten)."""
        await self.index.db.execute(
            "UPDATE memories SET confirmed_at = ? WHERE uid = ? "
            "AND (confirmed_at IS NULL OR confirmed_at < ?)",
            (iso(at), uid, iso(at)),
        )

    def history(self, uid: str) -> list[Fact]:
        """The chain of values through fact `uid`, oldest first (empty when unknown)."""
        fact = self.get(uid.strip())
        if fact is None:
            return []
        chain = [fact]
        seen = {fact.id}
        cur = fact
        while cur.supersedes and cur.supersedes not in seen and (prev := self.get(cur.supersedes)):
            chain.insert(0, prev)
            seen.add(prev.id)
            cur = prev
        cur = fact
        while (
            cur.superseded_by
            and cur.superseded_by not in seen
            and (nxt := self.get(cur.superseded_by))
        ):
            chain.append(nxt)
            seen.add(nxt.id)
            cur = nxt
        return chain

    # --- rebuilding --------------------------------------------------------------------
    async def sync(self, *, force: bool = False) -> int:
        """Bring the index in line with the log (after a crash, or a reindex); return rows written."""
        await self.load()
        everything = self.facts(include_retired=True)
        missing = [f for f in everything if force or await self.index.get(f.id) is None]
        if missing:
            await self.index.upsert([_memory_of(f, self.get(f.supersedes or "")) for f in missing])
            for fact in missing:
                if fact.retired_at is not None:
                    await self.index.retire(
                        fact.id, at=fact.retired_at, superseded_by=fact.superseded_by
                    )
        if missing or not self.memory_md.exists() or not self.profile_md.exists():
            await self.render()
        return len(missing)

    @asynccontextmanager
    async def rendering_once(self) -> AsyncIterator[None]:
        """Write MEMORY.md and PROFILE.md once, at the end, for the facts stored inside.

        A night reading a backlog stores hundreds of facts; rendering both files (atomic,
        fsynced) after each grew with the facts and was most of the night. The log and the
        index are written fact by fact as ever; the renderings follow at the end, also when
        cancelled (shielded), so they are never left behind the log.
        """
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
            if not self._deferred:
                with anyio.CancelScope(shield=True):
                    await self.render()

    async def render(self) -> None:
        """Regenerate MEMORY.md and PROFILE.md from the log (atomic replace)."""
        if self._deferred:
            return  # `rendering_once` writes them at its end
        memory = self._render(
            "Memory",
            "The running log of explicit facts, oldest first.",
            self.facts(target="memory"),
        )
        profile = self._render(
            "Profile",
            "Stable facts about the person (the content of USER.md's profile).",
            self.facts(target="profile"),
        )

        def write() -> None:
            for path, text in ((self.memory_md, memory), (self.profile_md, profile)):
                write_atomic(path, text)

        await anyio.to_thread.run_sync(write)

    def _render(self, title: str, blurb: str, facts: list[Fact]) -> str:
        lines = [
            f"# {title}",
            "",
            f"{blurb} Generated from `facts.jsonl`; edits here are overwritten —",
            "use `reverie remember` (`--correct ID`, `--retract ID`) instead.",
            "",
        ]
        if not facts:
            lines.append("(nothing yet)")
        for fact in facts:
            day = fact.created_at.astimezone(self.tz).date().isoformat()
            extra = f"; tags: {', '.join(fact.tags)}" if fact.tags else ""
            if fact.mined:
                extra = f"; mined from {fact.session or 'a session'}" + extra
            fix = f"; corrects {fact.supersedes}" if fact.supersedes else ""
            pin = ""
            if fact.pin_confirmed_at is not None:
                pin = "; you confirmed pinning it"
            elif fact.pin_proposed_at is not None:
                pin = f"; proposed for pinning — confirm: reverie remember --pin {fact.id}"
            lines.append(f"- [{fact.id}] {day} — {fact.text} _({fact.origin}{extra}{fix}{pin})_")
        return "\n".join(lines) + "\n"
