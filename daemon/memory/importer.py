"""Import conversation transcripts into a home, and rebuild the transcript side of the index.

An import validates the whole file first (a bad line stops it before anything is written),
copies each session's new lines to `sessions/imported/<session>.jsonl` (fsynced — the files
are the truth, so `reindex` can rebuild from them), records `sessions`/`messages` rows and
chunks the new messages. Re-importing the same file adds nothing. No model is called.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from daemon.durable import append_lines
from daemon.memory.index import MemoryIndex
from daemon.memory.rows import iso
from daemon.memory.transcripts import TranscriptLine, read_session_header, read_transcript
from daemon.paths import Home
from daemon.store.transcripts import TranscriptMessage, TranscriptSession, TranscriptsRepo


@dataclass(frozen=True, kw_only=True)
class ImportResult:
    sessions: int
    messages: int  # newly recorded
    already_present: int
    chunks: int
    session_ids: tuple[str, ...] = ()


def imported_path(home: Home, session_id: str) -> Path:
    """Return the file an imported session is kept in (a safe, stable name)."""
    safe = re.sub(r"[^\w.-]+", "_", session_id).strip("._") or "session"
    if safe != session_id:
        safe = f"{safe[:80]}-{hashlib.blake2b(session_id.encode(), digest_size=4).hexdigest()}"
    return home.imported_dir / f"{safe}.jsonl"


def _append_lines(path: Path, lines: list[TranscriptLine]) -> None:
    append_lines(path, [line.to_import_json() for line in lines], mode=0o644)


def drop_torn_tail(path: Path) -> int:
    """Cut a last line left half-written by a killed import; return the bytes dropped.

    Lines are appended whole and fsynced, so a file not ending in a newline was interrupted
    mid-write; its unfinished message is not on file and is appended again by the import.
    """
    try:
        with path.open("rb+") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return 0
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return 0
            keep = 0
            step = 65536
            pos = size
            while pos > 0:
                start = max(0, pos - step)
                fh.seek(start)
                cut = fh.read(pos - start).rfind(b"\n")
                if cut >= 0:
                    keep = start + cut + 1
                    break
                pos = start
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())
            return size - keep
    except FileNotFoundError:
        return 0


def _group(lines: Iterable[TranscriptLine]) -> dict[str, list[TranscriptLine]]:
    out: dict[str, list[TranscriptLine]] = {}
    for line in lines:
        out.setdefault(line.session, []).append(line)
    return out


async def _record(
    index: MemoryIndex,
    session_id: str,
    kind: str,
    transcript: str,
    lines: list[TranscriptLine],
    parent: str | None = None,
) -> int:
    """Record the session (if new) and its missing messages; return how many were added."""
    session = TranscriptSession(
        session_id=session_id,
        kind=kind,
        transcript_path=transcript,
        started_at=iso(min(line.ts for line in lines)),
        ended_at=iso(max(line.ts for line in lines)) if kind == "imported" else None,
        parent_id=parent,
    )
    messages = [
        TranscriptMessage(
            msg_id=line.id,
            ts=iso(line.ts),
            role=line.role,
            speaker=line.speaker,
            content=line.content,
            turn_id=line.turn_id,
        )
        for line in lines
    ]
    return await TranscriptsRepo(index.db).record(session, messages)


async def import_file(
    path: Path,
    *,
    home: Home,
    index: MemoryIndex,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> ImportResult:
    """Import an import-format JSONL file; idempotent. Raises TranscriptError on a bad line.

    Each session is copied to its file (fsynced) before its rows are written, and rows are
    keyed by message id, so an import killed at any point and run again completes without
    duplicates. `progress` receives `{"phase": "record", "done": messages, "total": messages}`
    after each session.
    """
    lines = await anyio.to_thread.run_sync(read_transcript, path)
    sessions = _group(lines)
    added = present = chunks = seen = 0
    if progress is not None:
        progress({"phase": "record", "done": 0, "total": len(lines)})
    for session_id, group in sessions.items():
        seen += len(group)
        dup = len(group) - len({line.id for line in group})
        group = list({line.id: line for line in reversed(group)}.values())[::-1] if dup else group
        target = imported_path(home, session_id)
        await anyio.to_thread.run_sync(drop_torn_tail, target)
        on_file = (
            {line.id for line in await anyio.to_thread.run_sync(read_transcript, target)}
            if target.exists()
            else set()
        )
        fresh = [line for line in group if line.id not in on_file]
        if fresh:
            await anyio.to_thread.run_sync(_append_lines, target, fresh)
        n = await _record(index, session_id, "imported", str(target), group)
        added += n
        present += len(group) - n
        chunks += await index.index_session(session_id)
        if progress is not None:
            progress({"phase": "record", "done": seen, "total": len(lines)})
    return ImportResult(
        sessions=len(sessions),
        messages=added,
        already_present=present,
        chunks=chunks,
        session_ids=tuple(sessions),
    )


def transcript_files(home: Home) -> list[Path]:
    """Every transcript the home holds (trunk, forks, imported), in a stable order."""
    out: list[Path] = []
    for folder in (home.trunk_dir, home.forks_dir, home.imported_dir):
        if folder.is_dir():
            out.extend(sorted(folder.rglob("*.jsonl")))
    return out


async def reindex_transcripts(home: Home, index: MemoryIndex) -> dict[str, int]:
    """Rebuild sessions, messages and chunk memories from the transcript files.

    Call after `index.clear()`. Rows that already exist are kept (their ids are stable);
    a transcript that cannot be read is skipped with its error counted, never fatal.
    """
    counts = {"transcripts": 0, "sessions": 0, "messages": 0, "chunks": 0, "unreadable": 0}
    for path in transcript_files(home):
        try:
            header = await anyio.to_thread.run_sync(read_session_header, path)
            lines = await anyio.to_thread.run_sync(read_transcript, path)
        except (OSError, ValueError):
            counts["unreadable"] += 1
            continue
        counts["transcripts"] += 1
        kind = header.kind if header else "imported"
        parent = header.parent if header else None
        for session_id, group in _group(lines).items():
            counts["messages"] += await _record(index, session_id, kind, str(path), group, parent)
            counts["sessions"] += 1
            counts["chunks"] += await index.index_session(session_id)
    return counts
