"""Journal entries and their durable store: one JSONL file per day, `journal/YYYY-MM-DD.jsonl`.

An entry is a short structured record of what happened in a stretch of work: `ts, session,
summary, decisions, progress, open_questions, files_touched, tags, token_usage`, with a
`schema` version and bookkeeping (`id`, `trigger`, `source`, the transcript span it covers).
An entry the agent wrote itself (`add_journal_entry`, trigger and source `agent`) also says
whose word it is (`origin`: `agent`, or `tool` when its words came from outside text the turn
read); the others leave `origin` empty (the heartbeat's are the agent's, notes the system's).
`work` lists what the tools did in that stretch (`daemon.agent.work`): written by the
journal itself from the transcript's tool records, never by the model; an entry written
before it existed reads back with an empty list.
Lines are appended whole and fsynced (`daemon.durable.append_lines`); a torn last line from
a crash is skipped on read and the next append starts on a fresh line, so a crash never
leaves a broken record behind. The day of an entry is its local date in the configured zone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, tzinfo
from pathlib import Path
from typing import Any

from daemon.durable import append_lines, read_jsonl
from daemon.errors import ReverieError
from daemon.memory.api import Origin
from daemon.tokens import count_tokens

SCHEMA = 1
LIST_FIELDS = ("decisions", "progress", "open_questions", "files_touched", "tags")
TRIGGERS = ("heartbeat", "compaction", "sleep", "shutdown", "note", "agent")
_DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.jsonl$")
_ITEM_CHARS = 300
_LIST_ITEMS = 8


class EntryError(ReverieError, ValueError):
    """An entry (or a model's answer for one) is unusable; the message says why."""


@dataclass(frozen=True, kw_only=True)
class JournalEntry:
    id: str
    ts: datetime
    session: str
    summary: str
    decisions: tuple[str, ...] = ()
    progress: tuple[str, ...] = ()
    open_questions: tuple[str, ...] = ()
    files_touched: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    work: tuple[str, ...] = ()
    token_usage: dict[str, int] = field(default_factory=dict)
    trigger: str = "heartbeat"
    source: str = "model"  # model | extractive | note | agent
    span: dict[str, Any] = field(
        default_factory=dict
    )  # {"from": offset, "to": offset, "messages": n}
    schema: int = SCHEMA
    # Whose word it is, when the writer says (`agent` / `tool`; see the module docstring).
    origin: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ts"] = self.ts.isoformat()
        for key in (*LIST_FIELDS, "work"):
            data[key] = list(data[key])
        if not self.origin:
            del data["origin"]
        return data

    @property
    def memory_origin(self) -> Origin:
        """The origin its words carry in memory: its own, else `system` for a note, else `agent`."""
        if self.origin == "tool":
            return "tool"
        return "system" if self.source == "note" and not self.origin else "agent"

    def line(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JournalEntry:
        """Read a stored entry; raise `EntryError` when it is not one."""
        try:
            ts = datetime.fromisoformat(str(data["ts"]).replace("Z", "+00:00"))
        except (KeyError, ValueError):
            raise EntryError("entry has no valid 'ts'") from None
        summary = data.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            raise EntryError("entry has no 'summary'")
        lists = {
            key: tuple(str(v) for v in data.get(key) or () if isinstance(v, str | int | float))
            for key in LIST_FIELDS
        }
        raw_work = data.get("work")
        work = (
            tuple(str(v) for v in raw_work if isinstance(v, str))
            if isinstance(raw_work, list)
            else ()
        )
        raw_usage = data.get("token_usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        return cls(
            id=str(data.get("id") or f"j-{ts.strftime('%Y%m%d-%H%M%S')}"),
            ts=ts,
            session=str(data.get("session") or ""),
            summary=summary.strip(),
            work=work,
            token_usage={str(k): int(v) for k, v in usage.items() if isinstance(v, int)},
            trigger=str(data.get("trigger") or "heartbeat"),
            source=str(data.get("source") or "model"),
            span=dict(data.get("span") or {}) if isinstance(data.get("span"), dict) else {},
            schema=int(data.get("schema") or SCHEMA),
            origin=str(data.get("origin") or ""),
            **lists,
        )

    def text(self) -> str:
        """The entry as plain text (what the memory index holds and search finds)."""
        parts = [self.summary]
        for key, label in (
            ("decisions", "Decided"),
            ("progress", "Progress"),
            ("open_questions", "Open"),
            ("files_touched", "Files"),
            ("work", "Work"),
        ):
            values = getattr(self, key)
            if values:
                parts.append(f"{label}: " + "; ".join(values))
        return "\n".join(parts)


@dataclass(frozen=True, kw_only=True)
class Draft:
    """What a writer (the model, the extractive fallback, a note) says about a stretch of work."""

    summary: str
    decisions: tuple[str, ...] = ()
    progress: tuple[str, ...] = ()
    open_questions: tuple[str, ...] = ()
    files_touched: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


def _clean(value: str, limit: int) -> str:
    text = " ".join(str(value).split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + "…"


def draft_from_answer(data: Any) -> Draft:
    """Validate a model's JSON answer (already parsed) into a `Draft`; raise `EntryError`."""
    if not isinstance(data, dict):
        raise EntryError("the answer is not a JSON object")
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise EntryError("the answer has no 'summary' string")
    lists: dict[str, tuple[str, ...]] = {}
    for key in LIST_FIELDS:
        raw = data.get(key, [])
        if raw is None:
            raw = []
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list):
            raise EntryError(f"'{key}' must be a list of strings")
        items = [
            _clean(str(v), _ITEM_CHARS)
            for v in raw
            if isinstance(v, str | int | float) and str(v).strip()
        ]
        lists[key] = tuple(dict.fromkeys(items))[:_LIST_ITEMS]
    tags = tuple(dict.fromkeys(t.lower().replace(" ", "-") for t in lists.pop("tags")))
    return Draft(summary=_clean(summary, 1200), tags=tags, **lists)


def draft_tokens(d: Draft) -> int:
    """What a draft costs against `journal.entry_tokens`: its summary and lists together."""
    return count_tokens(
        "\n".join(
            [d.summary, *d.decisions, *d.progress, *d.open_questions, *d.files_touched, *d.tags]
        )
    )


def fit_draft(draft: Draft, budget: int) -> Draft:
    """Clip a draft to `budget` tokens: list items go from the end first, then the summary shortens."""
    cost = draft_tokens

    current = draft
    order = ("files_touched", "progress", "open_questions", "decisions", "tags")
    while cost(current) > budget:
        for key in order:
            values = getattr(current, key)
            if len(values) > 1 or (values and key in ("files_touched", "tags", "progress")):
                current = Draft(**{**asdict(current), key: values[:-1]})
                break
        else:
            words = current.summary.split()
            if len(words) <= 8:
                break
            current = Draft(
                **{
                    **asdict(current),
                    "summary": " ".join(words[: max(8, len(words) * 3 // 4)]) + " …",
                }
            )
    return current


class JournalStore:
    """The day files under `journal/`: append entries, read a day, read the newest entries."""

    def __init__(self, directory: Path, zone: tzinfo) -> None:
        self.directory = directory
        self.zone = zone

    def day_of(self, ts: datetime) -> date:
        return ts.astimezone(self.zone).date()

    def path(self, day: date) -> Path:
        return self.directory / f"{day.isoformat()}.jsonl"

    def append(self, entry: JournalEntry) -> Path:
        """Append one entry to its day's file and fsync (blocking: call from a worker thread)."""
        path = self.path(self.day_of(entry.ts))
        append_lines(path, [entry.line()])
        return path

    def days(self) -> list[date]:
        """Days with a journal file, oldest first."""
        out: list[date] = []
        try:
            names = [p.name for p in self.directory.iterdir()]
        except FileNotFoundError:
            return out
        for name in names:
            found = _DAY_FILE.match(name)
            if found:
                try:
                    out.append(date.fromisoformat(found.group(1)))
                except ValueError:
                    continue
        return sorted(out)

    def read_day(self, day: date) -> list[JournalEntry]:
        """A day's entries in file order; torn or foreign lines are skipped."""
        return list(_parse(read_jsonl(self.path(day))))

    def tail(self, n: int, *, day: date | None = None) -> list[JournalEntry]:
        """The last `n` entries (oldest first), of one day or across days."""
        if n <= 0:
            return []
        if day is not None:
            return self.read_day(day)[-n:]
        out: list[JournalEntry] = []
        for d in reversed(self.days()):
            out = self.read_day(d) + out
            if len(out) >= n:
                break
        return out[-n:]

    def last(self) -> JournalEntry | None:
        found = self.tail(1)
        return found[0] if found else None


def _parse(rows: Iterable[dict[str, Any]]) -> Iterable[JournalEntry]:
    for row in rows:
        try:
            yield JournalEntry.from_json(row)
        except (EntryError, TypeError, ValueError):
            continue
