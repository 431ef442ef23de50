"""Monthly summaries: day-level memories of one month folded into one readable file.

Sleep maintenance folds session summaries (and chunks of sessions that never got a summary)
older than `[sleep] fold_after_days` into `memory/months/month-YYYY-MM.md`, one file per
month, with an index row of kind `month`. Sources are never deleted: the file's front matter
lists them, `memory_folds` links each source to its month, and both survive a reindex.
Imported (untrusted) sources fold into a separate `month-YYYY-MM-imported.md`, so text of
untrusted origin is never relabelled as the agent's own.
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any

from daemon.durable import write_atomic
from daemon.memory.api import UNTRUSTED_ORIGINS, MemoryItem
from daemon.memory.index import MemoryIndex
from daemon.memory.query import mentioned_stems
from daemon.memory.rows import NewMemory, iso, parse_iso, row_to_item
from daemon.store.db import Database
from daemon.store.folds import FoldLink, FoldsRepo
from daemon.store.memories import MemoriesRepo

_GIST_CHARS = 280
_DECISION_CHARS = 240
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, kw_only=True)
class FoldSource:
    """One day-level memory being folded (a summary row, or a chunk row)."""

    uid: str
    kind: str
    title: str
    text: str
    origin: str
    created_at: datetime
    session_id: str | None
    source: str


def trust_of(origin: str) -> str:
    return "imported" if origin in UNTRUSTED_ORIGINS else "trusted"


def month_uid(month: str, trust: str) -> str:
    return f"month:{month}" if trust == "trusted" else f"month:{month}:imported"


def month_key(when: datetime, tz: tzinfo) -> str:
    return when.astimezone(tz).strftime("%Y-%m")


def month_path(months_dir: Path, month: str, trust: str) -> Path:
    suffix = "" if trust == "trusted" else "-imported"
    return months_dir / f"month-{month}{suffix}.md"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"


def _gist(text: str) -> str:
    """The narrative's opening sentences (a summary leads with what happened)."""
    body = text.split("\n## Decisions", 1)[0]
    body = "\n".join(line for line in body.splitlines() if not line.startswith("#"))
    picked: list[str] = []
    for sentence in _SENTENCE_END.split(" ".join(body.split())):
        if not sentence:
            continue
        picked.append(sentence)
        if sum(len(s) for s in picked) >= _GIST_CHARS // 2:
            break
    return _clip(" ".join(picked), _GIST_CHARS)


def _decisions(text: str) -> list[str]:
    """The bullet points under a summary's `## Decisions` heading."""
    _, found, rest = text.partition("## Decisions")
    if not found:
        return []
    out: list[str] = []
    for line in rest.splitlines():
        if line.startswith("## "):
            break
        if line.lstrip().startswith("- "):
            out.append(_clip(line.lstrip()[2:], _DECISION_CHARS))
    return out


def render_month(
    month: str, trust: str, sources: Sequence[FoldSource], *, tz: tzinfo, updated: datetime
) -> str:
    """The month file: front matter (sources), then one line per session and the decisions."""
    year, number = (int(p) for p in month.split("-"))
    heading = f"{calendar.month_name[number]} {year}"
    ordered = sorted(sources, key=lambda s: (s.created_at, s.uid))
    sessions: dict[str, list[FoldSource]] = {}
    for src in ordered:
        sessions.setdefault(src.session_id or src.uid, []).append(src)
    front = {
        "month": month,
        "origin": "import" if trust == "imported" else "system",
        "sources": [s.uid for s in ordered],
        "sessions": list(sessions),
        "latest": iso(ordered[-1].created_at) if ordered else None,
        "updated": updated.isoformat(timespec="seconds"),
    }
    lines = (
        ["---"]
        + [f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in front.items()]
        + ["---", ""]
    )
    label = " (imported conversations: untrusted origin)" if trust == "imported" else ""
    lines += [f"# {heading}{label}", ""]
    lines += [
        f"{len(sessions)} session(s) folded from {len(ordered)} day-level memories. The sources are kept; "
        "each line cites the memory it came from.",
        "",
        "## Sessions",
        "",
    ]
    decisions: list[str] = []
    for group in sessions.values():
        summary = next((s for s in group if s.kind == "summary"), None)
        day = group[0].created_at.astimezone(tz).date().isoformat()
        if summary is not None:
            title = summary.title or "Session"
            lines.append(f"- {day} — {title}: {_gist(summary.text)} [{summary.uid}]")
            decisions += [f"{d} [{summary.uid}]" for d in _decisions(summary.text)]
        else:
            # A session never summarised: its first messages stand in for a narrative.
            singles = [s for s in group if not s.uid.endswith("-w")] or group
            text = " / ".join(_clip(s.text, 120) for s in singles[:3])
            lines.append(f"- {day} — (no summary) {_clip(text, _GIST_CHARS)} [{group[0].uid}]")
    if decisions:
        lines += ["", "## Decisions", ""] + [f"- {d}" for d in dict.fromkeys(decisions)]
    return "\n".join(lines) + "\n"


def read_month_file(path: Path) -> tuple[dict[str, Any], str]:
    """Split a month file into (front matter, body)."""
    from daemon.memory.summariser import read_summary_file

    return read_summary_file(path)


def month_memory(meta: dict[str, Any], body: str, path: Path, *, created: datetime) -> NewMemory:
    """The index row of a month file (kind `month`)."""
    month = str(meta["month"])
    trust = "imported" if meta.get("origin") == "import" else "trusted"
    year, number = (int(p) for p in month.split("-"))
    sources = [str(s) for s in meta.get("sources") or []]
    return NewMemory(
        uid=month_uid(month, trust),
        kind="month",
        text=body.strip(),
        title=f"{calendar.month_name[number]} {year}"
        + (" (imported)" if trust == "imported" else ""),
        origin="import" if trust == "imported" else "system",
        created_at=created,
        tags=("month", month),
        importance=0.65,
        source=str(path),
        meta={"file": path.name, "month": month, "sources": sources},
    )


def write_month(path: Path, text: str) -> None:
    """Write a month file atomically (blocking: call from a worker thread)."""
    write_atomic(path, text)


def _read_all(months_dir: Path) -> list[tuple[Path, dict[str, Any], str, float]]:
    out = []
    for path in sorted(months_dir.glob("month-*.md")):
        try:
            meta, body = read_month_file(path)
            out.append((path, meta, body, path.stat().st_mtime))
        except OSError:
            continue
    return out


async def reindex_months(months_dir: Path, index: MemoryIndex) -> int:
    """Re-add every month file's index row and fold links (after `memory reindex`); return how many."""
    import anyio

    count = 0
    for path, meta, body, mtime in await anyio.to_thread.run_sync(_read_all, months_dir):
        if not isinstance(meta.get("month"), str) or not body.strip():
            continue
        created = parse_iso(str(meta.get("latest") or "")) or datetime.fromtimestamp(mtime, UTC)
        item = month_memory(meta, body, path, created=created)
        await index.upsert([item])
        await FoldsRepo(index.db).link(
            [FoldLink(str(s), item.uid, iso(created)) for s in meta.get("sources") or []]
        )
        count += 1
    return count


# --- reading months back: what recall, automatic recall and the context show of them ---------

# A line of a month file that cites its source: a session ("- 2026-03-04 — Title: gist [uid]")
# or a decision ("- We chose terracotta [uid]").
_CITED_LINE = re.compile(r"^- (?P<body>.*) \[(?P<uid>[^\]\s]+)\]$")
_SESSION_LINE = re.compile(r"^(?P<day>\d{4}-\d{2}-\d{2}) — (?P<rest>.*)$")


@dataclass(frozen=True, kw_only=True)
class MonthLine:
    """One line of a month file that cites a day-level memory."""

    text: str
    uid: str
    day: str = ""  # the session's day; empty for a decision
    title: str = ""


def month_lines(text: str) -> list[MonthLine]:
    """The cited lines of a month summary: its sessions, then its decisions."""
    out: list[MonthLine] = []
    for raw in text.splitlines():
        cited = _CITED_LINE.match(raw.strip())
        if not cited:
            continue
        body = cited["body"]
        session = _SESSION_LINE.match(body)
        title = ""
        if session:
            rest = session["rest"]
            title = rest.split(": ", 1)[0] if not rest.startswith("(no summary)") else ""
        out.append(
            MonthLine(
                text=raw.strip(),
                uid=cited["uid"],
                day=session["day"] if session else "",
                title=title,
            )
        )
    return out


def month_overview(text: str, *, chars: int, stems: Collection[str] = ()) -> str:
    """One line for an index: how many sessions, then their titles (what the month was about),
    those that mention any of `stems` (what is asked) first."""
    sessions = [line for line in month_lines(text) if line.day]
    titles = list(dict.fromkeys(line.title for line in sessions if line.title))
    if stems:
        wanted = set(stems)
        titles.sort(key=lambda t: -len(wanted & mentioned_stems(t)))
    head = f"{len(sessions)} session(s)"
    return _clip(f"{head}: {'; '.join(titles)}" if titles else head, chars)


def month_excerpt(
    item: MemoryItem, *, uids: Collection[str] = (), stems: Collection[str] = ()
) -> str:
    """The lines of a month summary that matter here, under its heading.

    The lines citing `uids` (the days it stands in for), else the lines mentioning any of
    `stems` (what was asked); the whole summary when neither picks a line.
    """
    lines = month_lines(item.text)
    wanted = set(stems)
    picked = [line for line in lines if line.uid in uids] if uids else []
    if not picked and wanted:
        picked = [line for line in lines if wanted & mentioned_stems(line.text)]
    if not picked:
        return item.text
    sessions = sum(1 for line in lines if line.day)
    head = f"{item.title}: {len({p.uid for p in picked})} of its {sessions} session(s) and decisions; sources cited in brackets."
    return "\n".join([head, *(p.text for p in picked)])


async def folded_into(db: Database, uids: Collection[str]) -> dict[str, str]:
    """The month each of `uids` was folded into (those not folded are left out)."""
    return await MemoriesRepo(db).months_of(uids) if uids else {}


async def month_sources(db: Database, month_uid: str) -> list[MemoryItem]:
    """The active day-level memories folded into `month_uid`, newest first."""
    return [row_to_item(vars(r)) for r in await MemoriesRepo(db).month_sources(month_uid)]


async def unfolded_summaries(db: Database, limit: int) -> list[MemoryItem]:
    """Session summaries not folded into a month yet (the recent window), newest first."""
    return [row_to_item(vars(r)) for r in await MemoriesRepo(db).unfolded_summaries(limit)]


async def months_in_place(index: MemoryIndex, items: Sequence[MemoryItem]) -> list[MemoryItem]:
    """`items` with the folded ones replaced by their month, once, where the first of them stood.

    The month shows only the lines of the days it stands in for, so several folded days
    become one block no longer than their lines.
    """
    folded = await folded_into(index.db, [i.id for i in items])
    if not folded:
        return list(items)
    days: dict[str, list[str]] = {}
    for uid, into in folded.items():
        days.setdefault(into, []).append(uid)
    out: list[MemoryItem] = []
    placed: set[str] = set()
    for item in items:
        month_id = folded.get(item.id)
        if month_id is None:
            out.append(item)
            continue
        if month_id in placed:
            continue
        placed.add(month_id)
        month = await index.get(month_id)
        if month is None or month.meta.get("retired_at"):
            out.append(item)  # a month row lost (before a reindex): the day stands for itself
            continue
        # `stands_for`: the days it replaces, so no other layer shows them again.
        meta = {**month.meta, "stands_for": sorted(days[month_id])}
        out.append(replace(month, text=month_excerpt(month, uids=days[month_id]), meta=meta))
    return out


def focus_month(item: MemoryItem, stems: Collection[str]) -> MemoryItem:
    """A month hit cut to the lines that mention what was asked (each cites its source)."""
    if item.kind != "month":
        return item
    return replace(item, text=month_excerpt(item, stems=stems))
