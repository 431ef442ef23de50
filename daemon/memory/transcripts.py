"""Read conversation transcripts: the import format and the daemon's own trunk/fork files.

Import format, one JSON object per line:
`{"session", "id", "ts", "role": "user"|"assistant", "content", "speaker"?}`.
Daemon format: a `{"type": "session", "id", "kind", "started_at", "parent"}` first line, then
`message` / `tool_call` / `tool_result` / `turn_end` lines; only `message` lines are
conversation. A malformed line is an error naming the file and line — nothing is half-read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.errors import ReverieError
from daemon.records import RecordType, SessionStart, parse_record

ROLES = frozenset({"user", "assistant"})


class TranscriptError(ReverieError, ValueError):
    """A transcript line is malformed; the message names the file and line."""


@dataclass(frozen=True, kw_only=True)
class TranscriptLine:
    """One conversation message read from a transcript."""

    session: str
    id: str
    ts: datetime
    role: str
    content: str
    speaker: str | None = None
    turn_id: str | None = None
    line_no: int = 0

    def to_import_json(self) -> str:
        """Render in the import format (how imported sessions are kept under `sessions/imported/`)."""
        obj: dict[str, Any] = {
            "session": self.session,
            "id": self.id,
            "ts": self.ts.isoformat(),
            "role": self.role,
            "content": self.content,
        }
        if self.speaker:
            obj["speaker"] = self.speaker
        return json.dumps(obj, ensure_ascii=False)


@dataclass(frozen=True, kw_only=True)
class SessionHeader:
    """The first line of a daemon transcript."""

    id: str
    kind: str
    started_at: datetime | None
    parent: str | None


def parse_ts(value: Any, where: str) -> datetime:
    if not isinstance(value, str) or not value.strip():
        raise TranscriptError(f"{where}: 'ts' must be an ISO-8601 string")
    try:
        ts = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise TranscriptError(f"{where}: 'ts' {value!r} is not ISO-8601") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def _content_text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content blocks: keep the text ones
        return "\n".join(
            b.get("text", "")
            for b in value
            if isinstance(b, dict) and b.get("type", "text") == "text"
        )
    raise TranscriptError(f"{where}: 'content' must be a string")


def _str_field(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise TranscriptError(f"{where}: missing or empty '{key}'")
    return value.strip()


def read_session_header(path: Path) -> SessionHeader | None:
    """Return the daemon session header of `path`, or None for an import-format file."""
    with Path(path).open(encoding="utf-8") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                return None
            record = parse_record(obj) if isinstance(obj, dict) else None
            if isinstance(record, SessionStart) and record.id:
                return SessionHeader(
                    id=record.id,
                    kind=record.kind or "trunk",
                    started_at=parse_ts(record.started_at, str(path))
                    if record.started_at
                    else None,
                    parent=record.parent,
                )
            return None
    return None


def read_transcript(path: Path | str) -> list[TranscriptLine]:
    """Read every conversation message of a transcript in file order (either format).

    Raises `TranscriptError` (file and line named) on the first malformed line, and
    `OSError` when the file cannot be read.
    """
    path = Path(path)
    out: list[TranscriptLine] = []
    session_id: str | None = None
    with path.open(encoding="utf-8") as fh:
        for no, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            where = f"{path.name} line {no}"
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise TranscriptError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TranscriptError(f"{where}: expected a JSON object")
            kind = obj.get("type")
            if kind == RecordType.SESSION:
                session_id = _str_field(obj, "id", where)
                continue
            if kind is not None and kind != RecordType.MESSAGE:
                continue  # tool calls, results and turn ends are not conversation
            session = (
                obj.get("session")
                if kind is None
                else (obj.get("session") or session_id or path.stem)
            )
            if kind is None:
                session = _str_field(obj, "session", where)
            role = obj.get("role")
            if role not in ROLES:
                raise TranscriptError(
                    f'{where}: \'role\' must be "user" or "assistant", got {role!r}'
                )
            speaker = obj.get("speaker")
            out.append(
                TranscriptLine(
                    session=str(session),
                    id=_str_field(obj, "id", where),
                    ts=parse_ts(obj.get("ts"), where),
                    role=role,
                    content=_content_text(obj.get("content"), where),
                    speaker=str(speaker) if speaker else None,
                    turn_id=obj.get("turn_id"),
                    line_no=no,
                )
            )
    return out
