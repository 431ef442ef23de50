"""The daily digest: `journal/YYYY-MM-DD.md`, a readable page of the day's entries, newest first.

It is rebuilt from the day's JSONL after every entry and written atomically, so a reader (a
person, the context assembler, the sleep cycle's wake-up) sees the old page or the new one.
Newest first, because the newest work matters most when the page is cut to fit a context
budget: the assembler keeps a prefix of it. `latest_digest(home)` returns the newest page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, tzinfo
from pathlib import Path

from daemon.journal.entries import JournalEntry
from daemon.paths import Home

_OPEN_PREFIX = "Open questions: "

_DIGEST_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$")
TITLE_PREFIX = "# Journal — "


def render_digest(day: date, entries: Sequence[JournalEntry], zone: tzinfo) -> str:
    """The digest page for `day` (entries in file order; shown newest first)."""
    sessions = list(dict.fromkeys(e.session for e in entries if e.session))
    lines = [f"{TITLE_PREFIX}{day.isoformat()}", ""]
    n = len(entries)
    first = entries[0].ts.astimezone(zone).strftime("%H:%M") if entries else "—"
    last = entries[-1].ts.astimezone(zone).strftime("%H:%M") if entries else "—"
    lines.append(
        f"{n} entr{'y' if n == 1 else 'ies'}, {first}–{last}"
        + (f" · sessions: {', '.join(sessions)}" if sessions else "")
    )
    open_now = _still_open(entries)
    if open_now:
        lines += ["", _OPEN_PREFIX + "; ".join(open_now)]
    for entry in reversed(entries):
        when = entry.ts.astimezone(zone).strftime("%H:%M")
        where = f" · {entry.session}" if entry.session else ""
        # An entry whose words came from outside text the agent read says so where it stands.
        if entry.origin == "tool":
            where += " · from outside text (data)"
        lines += ["", f"## {when} · {entry.trigger}{where}", "", entry.summary]
        for key, label in (
            ("decisions", "Decided"),
            ("progress", "Progress"),
            ("open_questions", "Open"),
            ("files_touched", "Files"),
            ("work", "Work"),
        ):
            for item in getattr(entry, key):
                lines.append(f"- {label}: {item}")
        if entry.tags:
            lines.append("- Tags: " + ", ".join(entry.tags))
    return "\n".join(lines).rstrip() + "\n"


def _still_open(entries: Sequence[JournalEntry]) -> list[str]:
    """Open questions of the newest entries that raised any (the latest view of what is open)."""
    for entry in reversed(entries):
        if entry.open_questions and entry.trigger != "note":
            return list(entry.open_questions)[:5]
    return []


def digest_path(home: Home, day: date) -> Path:
    return home.journal_dir / f"{day.isoformat()}.md"


def _digest_days(home: Home) -> list[tuple[date, Path]]:
    """Every digest file, newest first."""
    out: list[tuple[date, Path]] = []
    try:
        names = [p.name for p in home.journal_dir.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return out
    for name in names:
        found = _DIGEST_FILE.match(name)
        if found:
            try:
                out.append((date.fromisoformat(found.group(1)), home.journal_dir / name))
            except ValueError:
                continue
    return sorted(out, reverse=True)


def newest_digest_path(home: Home) -> tuple[date, Path] | None:
    """The newest digest file and its day, or None."""
    days = _digest_days(home)
    return days[0] if days else None


def latest_digest(home: Home) -> tuple[date, str] | None:
    """The newest readable daily digest as (day, text), or None when the journal has none yet."""
    for day, path in _digest_days(home):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text.strip():
            return day, text
    return None


def newest_sections(body: str, limit: int) -> str:
    """The digest body with only its first (newest) `limit` entry sections."""
    if limit <= 0:
        return ""
    head, *sections = body.split("\n## ")
    return "\n## ".join([head, *sections[:limit]]).strip()


def digest_body(text: str) -> str:
    """The digest without its title line (the context labels the day in its memory marker)."""
    lines = text.splitlines()
    if lines and lines[0].startswith(TITLE_PREFIX):
        lines = lines[1:]
    return "\n".join(lines).strip()


def digests_since(home: Home, first: date) -> list[tuple[date, Path]]:
    """The digest files of `first` and later days, newest first."""
    return [(day, path) for day, path in _digest_days(home) if day >= first]


def day_gist(body: str, chars: int) -> str:
    """A digest body in a line or two: its count line, then each entry's first sentence, newest
    first, clipped to `chars` at a word ("3 entries, 09:10–22:30: Fixed the timer. — …")."""
    head, *sections = body.split("\n## ")
    lines = [ln.strip() for ln in head.splitlines() if ln.strip()]
    count = lines[0].split(" · sessions:")[0] if lines else ""
    said: list[str] = []
    for section in sections:
        rows = [ln.strip() for ln in section.splitlines()[1:] if ln.strip()]
        summary = next((r for r in rows if not r.startswith("- ")), "")
        first = re.split(r"(?<=[.!?])\s+", summary, maxsplit=1)[0]
        if first:
            said.append(first)
    text = f"{count}: {' — '.join(said)}" if count and said else count or " — ".join(said)
    if len(text) <= chars:
        return text
    return text[: max(0, chars - 1)].rsplit(" ", 1)[0].rstrip(" —:;,") + "…"


def journal_lines(home: Home, limit: int = 10) -> list[str]:
    """What the newest journal digest says is open and was worked on, as `- ` lines.

    Open questions first, then the newest entries' summaries (the sleep cycle's own notes
    left out: they say what sleep did, not what the day was about).
    """
    found = latest_digest(home)
    if found is None:
        return []
    day, text = found
    body = digest_body(text)
    out: list[str] = []
    for line in body.splitlines():
        if line.startswith(_OPEN_PREFIX):
            out += [
                f"- open: {q.strip()}"
                for q in line.removeprefix(_OPEN_PREFIX).split("; ")
                if q.strip()
            ]
    for section in body.split("\n## ")[1:]:
        header, _, rest = section.partition("\n")
        if " · note" in header or not rest.strip():
            continue
        summary = " ".join(rest.strip().splitlines()[0].split())[:300]
        out.append(f"- {day.isoformat()} {header.split(' · ')[0]}: {summary}")
        if len(out) >= limit:
            break
    return out[:limit]
