"""Cached readers for the files the context is built from, with last-good-version semantics.

Persona files, `USER.md`, `WAKE.md`, `FACTS.md` and the journal are read every turn, so the
reader stats each file and only re-reads it when its size, mtime or inode changed — an edit
takes effect on the next turn even without the watcher. An edit that breaks a file (deleted,
unreadable, not UTF-8) does not blank the persona mid-conversation: the last good text is
kept and the problem is logged once and shown in the context report.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.log import get_logger

log = get_logger("context.files")


@dataclass(frozen=True, kw_only=True)
class FileText:
    """What a file contributes this turn: its text (possibly the last good one) and any problem."""

    path: Path
    text: str
    problem: str = ""
    stale: bool = False  # True when `text` is a kept last-good version

    @property
    def present(self) -> bool:
        return bool(self.text.strip())


@dataclass(frozen=True, kw_only=True)
class _Entry:
    signature: tuple[int, int, int] | None
    good: str | None
    problem: str


def _signature(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class FileCache:
    """Read small text files, re-reading only on change and keeping the last good version."""

    def __init__(self) -> None:
        self._entries: dict[Path, _Entry] = {}
        self._lock = threading.Lock()

    def read(self, path: Path) -> FileText:
        """Return the current text of `path`, or its last good text with the problem that hid it."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return self._failed(path, None, "does not exist")
        except OSError as exc:
            return self._failed(path, None, f"cannot be read ({exc.strerror or exc})")
        sig = _signature(st)
        entry = self._entries.get(path)
        if entry is not None and entry.signature == sig:
            if entry.problem:
                return FileText(path=path, text=entry.good or "", problem=entry.problem, stale=entry.good is not None)
            return FileText(path=path, text=entry.good or "")
        try:
            raw = path.read_bytes()
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return self._failed(path, sig, f"is not valid UTF-8 (byte {exc.start})")
        except IsADirectoryError:
            return self._failed(path, sig, "is a directory")
        except OSError as exc:
            return self._failed(path, sig, f"cannot be read ({exc.strerror or exc})")
        with self._lock:
            if entry is not None and entry.problem:
                log.info("context file readable again", path=str(path))
            self._entries[path] = _Entry(signature=sig, good=text.lstrip("\ufeff"), problem="")
        return FileText(path=path, text=text.lstrip("\ufeff"))

    def _failed(self, path: Path, sig: tuple[int, int, int] | None, why: str) -> FileText:
        with self._lock:
            entry = self._entries.get(path)
            good = entry.good if entry is not None else None
            problem = f"{path.name} {why}" + ("; keeping the last good version" if good is not None else "")
            if entry is None or entry.problem != problem or entry.signature != sig:
                # Log once per distinct breakage, not once per turn.
                log.warning("context file problem", path=str(path), problem=problem)
            self._entries[path] = _Entry(signature=sig, good=good, problem=problem)
        return FileText(path=path, text=good or "", problem=problem, stale=good is not None)

    def refresh(self, paths: list[Path] | tuple[Path, ...]) -> list[str]:
        """Re-read `paths` now (the watcher saw them change); return the problems found."""
        return [ft.problem for ft in (self.read(p) for p in paths) if ft.problem]

    def forget(self, path: Path) -> None:
        with self._lock:
            self._entries.pop(path, None)


@dataclass(frozen=True, kw_only=True)
class JournalEntry:
    ts: datetime | None
    summary: str
    source: str


class JournalReader:
    """The last few journal entries (JSONL by day), re-read only when the newest files change."""

    def __init__(self, journal_dir: Path) -> None:
        self.journal_dir = journal_dir
        self._key: tuple[Any, ...] | None = None
        self._entries: list[JournalEntry] = []
        self._problem = ""

    def latest(self, limit: int) -> tuple[list[JournalEntry], str]:
        """Return up to `limit` newest entries (newest first) and a problem line, if any."""
        if limit <= 0:
            return [], ""
        try:
            files = sorted(p for p in self.journal_dir.glob("*.jsonl") if p.is_file())
        except OSError as exc:
            return [], f"journal directory cannot be read ({exc.strerror or exc})"
        recent = files[-3:]
        try:
            key = (limit, *((p.name, *_signature(p.stat())) for p in recent))
        except OSError:
            key = None
        if key is not None and key == self._key:
            return self._entries, self._problem
        entries: list[JournalEntry] = []
        bad = 0
        for path in reversed(recent):
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                bad += 1
                continue
            for line in reversed(lines):
                entry = _parse_journal_line(line, path.name)
                if entry is None:
                    bad += bool(line.strip())
                    continue
                entries.append(entry)
                if len(entries) >= limit:
                    break
            if len(entries) >= limit:
                break
        self._key, self._entries = key, entries
        self._problem = f"{bad} journal lines could not be read and were skipped" if bad else ""
        return entries, self._problem


def _parse_journal_line(line: str, source: str) -> JournalEntry | None:
    line = line.strip()
    if not line:
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        return None
    ts: datetime | None = None
    for key in ("ts", "at", "time", "created"):
        value = data.get(key)
        if isinstance(value, str):
            try:
                ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
                break
            except ValueError:
                continue
    return JournalEntry(ts=ts, summary=summary.strip(), source=f"journal/{source}")
