"""Append-only JSONL transcripts: the source of truth for every session.

One JSON object per line, with a `type`: `session` (first line), `message`, `tool_call`,
`tool_result`, `turn_end`. Writes are flushed and fsynced off the event loop, so a line
that was acknowledged survives a crash. A torn last line (crash mid-write) is ignored on
read and the next append starts on a fresh line.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from daemon.log import get_logger

log = get_logger("transcript")


def fsync_append(path: Path, lines: list[str]) -> None:
    """Append whole lines to `path` and fsync (blocking; call from a worker thread)."""
    data = "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        # A torn previous write leaves no newline at the end: start a fresh line.
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL file, skipping torn or corrupt lines (logged)."""
    out: list[dict[str, Any]] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return out
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("skipping unreadable transcript line", path=str(path), line=n)
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


@dataclass
class Transcript:
    """Appends records to one session's JSONL file; writes are serialised and fsynced."""

    path: Path
    session_id: str
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def append(self, *records: dict[str, Any]) -> None:
        """Durably append records (fsync before returning). Shielded from cancellation."""
        lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]

        def write() -> None:
            with self._lock:
                fsync_append(self.path, lines)

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(write)

    def records(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path)
