"""The `mention_links` table: names tied to a relation or a description, per message (issue 35).

What a link is and how it is found is `daemon.memory.links`; this module only reads and
writes the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from daemon.store.db import Database

# Bumped when the extraction rules change: a home whose kv mark is lower is filled again.
LINKS_VERSION = 1
_MARK = "memory.links_version"


@dataclass(frozen=True)
class LinkRow:
    memory_uid: str
    name: str
    phrase: str
    kind: str  # relation | deed
    speaker: str
    session_id: str
    message_id: str
    created_at: str


async def add_links(db: Database, links: Sequence[LinkRow]) -> int:
    """Store `links` (a link already stored is kept as it is); return how many were given."""
    for link in links:
        await db.execute(
            "INSERT INTO mention_links(memory_uid, name, phrase, kind, speaker, session_id, "
            "message_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(memory_uid, name, phrase) DO NOTHING",
            (
                link.memory_uid,
                link.name,
                link.phrase,
                link.kind,
                link.speaker,
                link.session_id,
                link.message_id,
                link.created_at,
            ),
        )
    return len(links)


async def live_links(db: Database) -> list[LinkRow]:
    """Every link whose message is still in the index (a cleared index drops its links)."""
    rows = await db.fetchall(
        "SELECT l.memory_uid, l.name, l.phrase, l.kind, l.speaker, l.session_id, l.message_id, "
        "l.created_at FROM mention_links l JOIN memories m ON m.uid = l.memory_uid "
        "WHERE m.retired_at IS NULL ORDER BY l.created_at"
    )
    return [LinkRow(*(str(v) for v in r)) for r in rows]


async def links_count(db: Database) -> int:
    row = await db.fetchone("SELECT count(*) FROM mention_links")
    return int(row[0]) if row else 0


async def links_version(db: Database) -> int:
    row = await db.fetchone("SELECT value FROM kv WHERE key = ?", (_MARK,))
    try:
        return int(row[0]) if row else 0
    except ValueError:
        return 0


async def mark_links_version(db: Database, at: str) -> None:
    await db.execute(
        "INSERT INTO kv(key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        (_MARK, str(LINKS_VERSION), at),
    )


async def person_messages(db: Database) -> list[tuple[str, str, str, str, str, str]]:
    """Every message chunk the links are read from, for the one-time fill of an older home:
    (memory uid, session id, message id, created_at, speaker, content)."""
    rows = await db.fetchall(
        "SELECT m.uid, m.session_id, msg.msg_id, m.created_at, coalesce(msg.speaker, ''), "
        "msg.content FROM memories m JOIN messages msg "
        "ON msg.session_id = m.session_id AND m.uid = 'chunk:' || msg.session_id || ':' || msg.seq "
        "WHERE m.kind = 'chunk' AND m.origin IN ('person', 'import')"
    )
    return [tuple(str(v) for v in r) for r in rows]  # type: ignore[misc]


async def memory_rows(db: Database, uids: Sequence[str]) -> list[tuple[int, str, str, bool]]:
    """(rowid, uid, kind, retired) of the memories `uids` that exist."""
    rows = await db.fetch_in(
        "SELECT rowid, uid, kind, retired_at FROM memories WHERE uid IN ({})", list(uids)
    )
    return [(int(r[0]), str(r[1]), str(r[2]), r[3] is not None) for r in rows]
