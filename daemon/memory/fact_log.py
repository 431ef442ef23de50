"""The fact log: `memory/facts.jsonl`, the source of truth of explicit facts, and its replay.

One JSON event per line, never rewritten: `remember` and `correct` add a fact (a correction
names the one it supersedes), `retract` and `restore` retire a fact and undo that,
`reinstate` undoes a supersession, `propose_pin` and `pin` ask for and confirm a pin. Replayed
in order they give each fact as it stands now (`Fact`). Everything else — the index rows,
`MEMORY.md`, `PROFILE.md` — is derived from it and can be rebuilt at any time.

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
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.memory.fact_trust import refusal

if TYPE_CHECKING:
    from daemon.settings import Settings

log = get_logger("memory.facts")

Target = Literal["memory", "profile"]
TARGETS: tuple[str, ...] = ("memory", "profile")
SOURCES: tuple[str, ...] = ("told", "mined")
MAX_FACT_CHARS = 2000
_FACT_ID = re.compile(r"^fact:(\d+)$")


class FactError(ReverieError, ValueError):
    """A remember/correct/retract request cannot be honoured; the message says why and what to do."""


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


def stamp(when: datetime) -> str:
    """`when` as the log writes times (ISO 8601, to the second)."""
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
            # Only a pin event the trust rule lets pin confirms (a line written by hand
            # claiming another origin is at most a proposal).
            confirmed = op == "pin" and refusal("pin", str(event.get("origin", ""))) is None
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
