"""Append-only JSONL transcripts: the source of truth for every session.

One JSON object per line, with a `type`: `session` (first line), `message`, `tool_call`,
`tool_result`, `approval`, `turn_end`, and a fork's `fork_end` — typed in `records.py`. Writes are flushed and fsynced off the event loop, so a line
that was acknowledged survives a crash. A torn last line (crash mid-write) is ignored on
read and the next append starts on a fresh line.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from daemon.durable import append_lines, read_jsonl
from daemon.records import Record, parse_records


@dataclass
class Transcript:
    """Appends records to one session's JSONL file; writes are serialised and fsynced."""

    path: Path
    session_id: str
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def append(self, *records: Record) -> None:
        """Durably append records (fsync before returning). Shielded from cancellation."""
        lines = [
            json.dumps(r.to_json(), ensure_ascii=False, separators=(",", ":")) for r in records
        ]

        def write() -> None:
            with self._lock:
                append_lines(self.path, lines)

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(write)

    def records(self) -> list[dict[str, Any]]:
        """Every line as written (for readers that want the raw objects)."""
        return read_jsonl(self.path)

    def read(self) -> list[Record]:
        """Every line as its typed record."""
        return parse_records(self.records())
