"""Explicit facts: `remember`, `correct`, `retract` over an append-only, fsynced event log.

`memory/facts.jsonl` is the source of truth: one JSON event per line, never rewritten. The
index rows, `MEMORY.md` (the running log) and `PROFILE.md` (stable facts about the person)
are derived from it and can be rebuilt at any time. A correction links the new fact to the
one it supersedes; a retraction retires a fact with a reason. Neither deletes anything, so
history stays searchable.

Every event carries the origin of the text it came from (`ORIGINS`): `person` for the
person's own word (the CLI, or a turn that read nothing else), `agent`, `tool`, `system`,
`import`. Pinning into `FACTS.md` follows it: sleep proposes (`propose_pin`, origin system)
a fact that is not the person's own word, and only the person's `pin` event confirms it.

Several processes may write (the daemon and `reverie remember`): ids are allocated and lines
appended under an exclusive `flock` after reading whatever another process appended.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import anyio

from daemon.clock import Clock
from daemon.durable import write_atomic
from daemon.log import get_logger
from daemon.memory.api import UNTRUSTED_ORIGINS, MemoryItem
from daemon.memory.dates import resolve_dates
from daemon.memory.index import MemoryIndex
from daemon.memory.rows import NewMemory
from daemon.paths import Home
from daemon.settings import Settings

log = get_logger("memory.facts")

Target = Literal["memory", "profile"]
TARGETS: tuple[str, ...] = ("memory", "profile")
ORIGINS: tuple[str, ...] = ("person", "agent", "tool", "system", "import")
MAX_FACT_CHARS = 2000
_FACT_ID = re.compile(r"^fact:(\d+)$")


class FactError(ValueError):
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

    @property
    def active(self) -> bool:
        return self.retired_at is None

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
            fact = Fact(
                id=uid,
                target="profile" if event.get("target") == "profile" else "memory",
                text=str(event["text"]),
                wording=str(event.get("wording", event["text"])),
                origin=str(event.get("origin", "person")),
                created_at=ts,
                tags=tuple(event.get("tags", ())),
                supersedes=event.get("supersedes"),
            )
            self.facts[uid] = fact
            old = self.facts.get(fact.supersedes or "")
            if old is not None:
                self.facts[old.id] = replace(
                    old, superseded_by=uid, retired_at=ts, reason="corrected"
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


def _memory_of(fact: Fact) -> NewMemory:
    return NewMemory(
        uid=fact.id,
        kind=fact.kind,
        text=fact.text,
        origin=fact.origin,  # type: ignore[arg-type]
        created_at=fact.created_at,
        tags=fact.tags,
        importance=0.8 if fact.target == "profile" else 0.7,
        explicit=True,
        supersedes=fact.supersedes,
        source="memory/facts.jsonl",
        meta={
            "target": fact.target,
            "wording": fact.wording,
            "untrusted": fact.origin in UNTRUSTED_ORIGINS,
        },
    )


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
        return self.log.facts.get(uid.strip())

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
        return wording, resolve_dates(wording, self.clock.now().astimezone(self.tz))

    async def remember(
        self, text: str, *, target: str = "memory", origin: str = "person", tags: Sequence[str] = ()
    ) -> RememberResult:
        """Store one fact now; detect exact and near duplicates instead of storing twice."""
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
            for fact in self.facts(target=target):
                if normalise(fact.text) == key:
                    return RememberResult(
                        status="duplicate",
                        id=fact.id,
                        text=fact.text,
                        message=f"already remembered as {fact.id}",
                    )
            kind = "profile" if target == "profile" else "fact"
            near = await self._similar(resolved, kind)
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
            written = await anyio.to_thread.run_sync(self.log.append, event)
            fact = self.log.facts[written["id"]]
            await self._index_and_render(fact)
        log.info("fact remembered", id=fact.id, target=target, origin=origin)
        return RememberResult(
            status="stored", id=fact.id, text=fact.text, message=f"remembered as {fact.id}"
        )

    async def _similar(self, text: str, kind: str) -> MemoryItem | None:
        threshold = self.settings.memory.near_duplicate_threshold
        for item in await self.index.similar(text, [kind], threshold):
            fact = self.get(item.id)
            if fact is not None and fact.active:
                return item
        return None

    def _require_active(self, uid: str) -> Fact:
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
        """Supersede fact `uid` with `text`; the old fact stays in history, linked to the new one."""
        self._check_origin(origin)
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
            written = await anyio.to_thread.run_sync(self.log.append, event)
            fact = self.log.facts[written["id"]]
            await self._index_and_render(fact)
            await self.index.retire(old.id, at=fact.created_at, superseded_by=fact.id)
        log.info("fact corrected", id=fact.id, supersedes=old.id, origin=origin)
        return RememberResult(
            status="corrected",
            id=fact.id,
            text=fact.text,
            message=f"{old.id} corrected as {fact.id}",
            similar_to=old.id,
        )

    async def retract(self, uid: str, *, reason: str, origin: str) -> Fact:
        """Retire fact `uid` with `reason`; it stays searchable as history."""
        self._check_origin(origin)
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
        await self.index.upsert([_memory_of(fact)])
        await self.render()

    # --- rebuilding --------------------------------------------------------------------
    async def sync(self, *, force: bool = False) -> int:
        """Bring the index in line with the log (after a crash, or a reindex); return rows written."""
        await self.load()
        everything = self.facts(include_retired=True)
        missing = [f for f in everything if force or await self.index.get(f.id) is None]
        if missing:
            await self.index.upsert([_memory_of(f) for f in missing])
            for fact in missing:
                if fact.retired_at is not None:
                    await self.index.retire(
                        fact.id, at=fact.retired_at, superseded_by=fact.superseded_by
                    )
        if missing or not self.memory_md.exists() or not self.profile_md.exists():
            await self.render()
        return len(missing)

    async def render(self) -> None:
        """Regenerate MEMORY.md and PROFILE.md from the log (atomic replace)."""
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
            fix = f"; corrects {fact.supersedes}" if fact.supersedes else ""
            pin = ""
            if fact.pin_confirmed_at is not None:
                pin = "; you confirmed pinning it"
            elif fact.pin_proposed_at is not None:
                pin = f"; proposed for pinning — confirm: reverie remember --pin {fact.id}"
            lines.append(f"- [{fact.id}] {day} — {fact.text} _({fact.origin}{extra}{fix}{pin})_")
        return "\n".join(lines) + "\n"
