"""Cached readers for the files the context is built from, with last-good-version semantics.

Persona files, `USER.md`, `WAKE.md`, `FACTS.md`, `KNOWLEDGE.md`, the journal digests and the
last dream entry are read every turn, so the reader stats each file and only re-reads it when
its size, mtime or inode changed — an edit takes effect on the next turn even without the watcher. An edit that breaks a file (deleted,
unreadable, not UTF-8) does not blank the persona mid-conversation: the last good text is
kept and the problem is logged once and shown in the context report.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

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
                return FileText(
                    path=path,
                    text=entry.good or "",
                    problem=entry.problem,
                    stale=entry.good is not None,
                )
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
            problem = f"{path.name} {why}" + (
                "; keeping the last good version" if good is not None else ""
            )
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
