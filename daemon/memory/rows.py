"""What a memory is as the index stores it: the row to write, the row read back, its times.

The bottom of the memory package: the writer, the search, the embedding worker, chunking and
the lexical searcher all speak these types, and this module imports none of them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from daemon.memory.api import Kind, MemoryItem, Origin


@dataclass(frozen=True, kw_only=True)
class NewMemory:
    """One memory to insert or replace (by `uid`)."""

    uid: str  # stable across reindex: "fact:<id>", "summary:<session_id>", "chunk:<session_id>:<first_seq>"
    kind: Kind
    text: str
    origin: Origin
    created_at: datetime
    title: str = ""
    tags: tuple[str, ...] = ()
    importance: float = 0.5
    session_id: str | None = None
    message_ids: tuple[str, ...] = ()
    source: str = ""
    valid_from: datetime | None = None
    explicit: bool = False
    supersedes: str | None = None
    meta: dict[str, object] = field(default_factory=dict)


def iso(dt: datetime) -> str:
    """Format a time the one way the index stores it (UTC, microseconds) so strings sort."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def parse_iso(value: str | None) -> datetime | None:
    if not value:
        return None
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def embed_text(title: str, text: str) -> str:
    """The text a memory is embedded as (its title gives a chunk or summary its frame)."""
    return f"{title}\n{text}" if title else text


def content_hash(title: str, text: str) -> str:
    return hashlib.blake2b(embed_text(title, text).encode(), digest_size=16).hexdigest()


def row_to_item(row: Any, score: float = 0.0) -> MemoryItem:
    """A `memories` row as the `MemoryItem` the rest of the daemon reads."""
    meta = json.loads(row["meta"] or "{}")
    # A store not yet migrated to 0014 (a read-only view of an older home) has no use columns.
    used = row.keys() if hasattr(row, "keys") else ()
    meta.update(
        importance=row["importance"],
        explicit=bool(row["explicit"]),
        retired_at=row["retired_at"],
        supersedes=row["supersedes"],
        superseded_by=row["superseded_by"],
        valid_from=row["valid_from"],
        # How the memory has been used (staleness, promotion by use: migration 0014).
        last_used=row["last_used"] if "last_used" in used else None,
        uses=row["uses"] if "uses" in used else 0,
        confirmed_at=row["confirmed_at"] if "confirmed_at" in used else None,
    )
    return MemoryItem(
        id=row["uid"],
        kind=row["kind"],
        text=row["text"],
        origin=row["origin"],
        ts=parse_iso(row["created_at"]),
        session=row["session_id"],
        score=score,
        title=row["title"],
        tags=tuple(row["tags"].split()) if row["tags"] else (),
        message_ids=tuple(json.loads(row["message_ids"] or "[]")),
        source=row["source"],
        meta=meta,
    )
