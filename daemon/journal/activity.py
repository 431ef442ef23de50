"""What happened in a session since the journal last looked: the transcript from a byte offset.

The journal keeps, per session, the byte offset in the transcript up to which it has written
entries. Reading from there to the last complete line gives the new records (a line still
being written, or torn by a crash, is left for later: only whole lines are consumed). Only
conversation and tool records count as activity; a session header alone is nothing.

`render_transcript` turns the conversation records into the `[role] text` lines the `journal`
task reads, newest part kept within a token budget. Tool records are not lines of it: what
the tools did reaches the entry as its `work` list (`daemon.agent.work`: arguments and a
status), and their output — untrusted data — never reaches the journal.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.tokens import count_tokens

ACTIVE_TYPES = frozenset({"message", "tool_call", "tool_result"})
_LINE_CHARS = 1200


@dataclass(frozen=True, kw_only=True)
class Activity:
    """The new records of one session's transcript between two byte offsets."""

    session_id: str
    path: Path
    start: int
    end: int
    records: tuple[dict[str, Any], ...]

    @property
    def messages(self) -> int:
        return sum(1 for r in self.records if r.get("type") == "message")

    @property
    def happened(self) -> bool:
        """True when something worth an entry happened (a message or a tool call)."""
        return any(r.get("type") in ACTIVE_TYPES for r in self.records)


def transcript_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def read_since(session_id: str, path: Path, offset: int) -> Activity:
    """The whole records of `path` after byte `offset` (blocking: call from a worker thread)."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if offset > size:
                offset = 0  # the file was replaced (restored from a backup): start over
            fh.seek(offset)
            raw = fh.read()
    except FileNotFoundError:
        return Activity(session_id=session_id, path=path, start=offset, end=offset, records=())
    whole = raw.rfind(b"\n") + 1
    records: list[dict[str, Any]] = []
    for line in raw[:whole].split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # a line torn by a crash: the append that followed started a fresh one
        if isinstance(obj, dict):
            records.append(obj)
    return Activity(
        session_id=session_id, path=path, start=offset, end=offset + whole, records=tuple(records)
    )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def record_lines(records: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> list[str]:
    """One `[role] text` line per conversation message."""
    lines: list[str] = []
    for rec in records:
        if rec.get("type") == "message":
            role = str(rec.get("role") or "note")
            content = str(rec.get("content") or "").strip()
            if content:
                lines.append(f"[{role}] {_clip(content, _LINE_CHARS)}")
    return lines


def render_transcript(lines: list[str], budget: int) -> tuple[str, int]:
    """The newest lines that fit `budget` tokens, oldest first; returns (text, lines left out)."""
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        cost = count_tokens(line) + 1
        if used + cost > budget and kept:
            break
        kept.append(line if used + cost <= budget else line[: budget * 3])
        used += cost
    kept.reverse()
    dropped = len(lines) - len(kept)
    text = "\n".join(kept)
    if dropped:
        text = f"(… {dropped} earlier lines of this stretch are not shown)\n{text}"
    return text, dropped
