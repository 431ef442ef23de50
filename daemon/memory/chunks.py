"""Cut a session's messages (the `messages` table) into chunk memories for the index.

Each message is its own chunk, so a hit names the exact message it came from; overlapping
windows of `memory.chunk_messages` messages carry the surrounding exchange, and a long
message is also indexed as its passages (`excerpt.passages`). The speaker and
the date are part of a chunk's indexed text, so "what did Caroline say in May" can match.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from daemon.memory.api import Origin
from daemon.memory.excerpt import passages
from daemon.memory.links import record as record_links
from daemon.memory.rows import NewMemory, parse_iso

if TYPE_CHECKING:
    from daemon.memory.index import MemoryIndex


def day_label(ts: datetime) -> str:
    """Format a date the way people say it ("8 May 2023")."""
    return f"{ts.day} {ts.strftime('%B %Y')}"


def message_line(row: Any) -> str:
    ts = parse_iso(row["ts"])
    who = row["speaker"] or row["role"]
    when = f" ({day_label(ts)})" if ts else ""
    return f"{who}{when}: {row['content'].strip()}"


def _origin(session_kind: str, roles: set[str]) -> Origin:
    if session_kind == "imported":
        return "import"
    if "tool" in roles:
        return "tool"
    # A fork's "user" turns are its brief and framing, written by the model that delegated:
    # never the person's own words, so never trusted as theirs (pinning and dreams rely on it).
    if roles == {"user"} and session_kind != "fork":
        return "person"
    return "agent"


async def _existing(db: Any, uids: list[str]) -> int:
    return len(await db.fetch_in("SELECT uid FROM memories WHERE uid IN ({})", uids))


async def chunk_session(index: MemoryIndex, session_id: str) -> int:
    """Chunk the messages of `session_id` not chunked yet; return the number of new chunks."""
    db = index.db
    session = await db.fetchone(
        "SELECT kind, transcript_path, title FROM sessions WHERE id = ?", (session_id,)
    )
    if session is None:
        raise KeyError(f"no session {session_id!r}")
    mark = await db.fetchone(
        "SELECT upto_seq FROM memory_chunked WHERE session_id = ?", (session_id,)
    )
    upto = int(mark[0]) if mark else -(2**62)
    seqs = [
        r[0]
        for r in await db.fetchall(
            "SELECT seq FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        )
    ]
    new_ord = next((i for i, s in enumerate(seqs) if s > upto), None)
    if new_ord is None:
        return 0
    size = index.settings.chunk_messages
    stride = max(1, size // 2)
    # Windows start at multiples of `stride`; the first one touched by a new message:
    first_window = (
        max(0, ((new_ord - size + 1 + stride - 1) // stride) * stride) if new_ord >= size else 0
    )
    rows = await db.fetchall(
        "SELECT msg_id, seq, ts, role, speaker, content FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
        (session_id, seqs[first_window]),
    )
    base = first_window
    source = session["transcript_path"] or ""
    kind = session["kind"]
    items: list[NewMemory] = []
    said: list[tuple[str, str, str, str, str, str]] = []  # read for mention links
    for i, row in enumerate(rows):
        if base + i < new_ord or not row["content"].strip():
            continue
        uid = f"chunk:{session_id}:{row['seq']}"
        if _origin(kind, {row["role"]}) in ("person", "import"):
            said.append(
                (uid, session_id, row["msg_id"], row["ts"], row["speaker"] or "", row["content"])
            )
        items.append(
            NewMemory(
                uid=uid,
                kind="chunk",
                text=message_line(row),
                origin=_origin(kind, {row["role"]}),
                created_at=parse_iso(row["ts"]) or index.clock.now(),
                session_id=session_id,
                message_ids=(row["msg_id"],),
                source=source,
                meta={"seq": row["seq"], "role": row["role"]},
            )
        )
        # A long message (code, a plan) is also its passages: a hit names the part that
        # matched, and what is shown of it is that part, not the whole message.
        parts = passages(row["content"].strip())
        label = message_line(row)[: -len(row["content"].strip()) or None]
        for n, passage in enumerate(parts):
            before = "… " if n > 0 else ""
            after = " …" if n < len(parts) - 1 else ""
            items.append(
                NewMemory(
                    uid=f"{uid}.p{n}",
                    kind="chunk",
                    text=f"{label}{before}{passage}{after}",
                    origin=_origin(kind, {row["role"]}),
                    created_at=parse_iso(row["ts"]) or index.clock.now(),
                    session_id=session_id,
                    message_ids=(row["msg_id"],),
                    source=source,
                    meta={"seq": row["seq"], "role": row["role"], "passage": n, "of": uid},
                )
            )
    if size > 1:
        for start in range(first_window, len(seqs), stride):
            window = [r for r in rows[start - base : start - base + size] if r["content"].strip()]
            if len(window) < 2:
                continue
            first_seq, last_seq = window[0]["seq"], window[-1]["seq"]
            items.append(
                NewMemory(
                    uid=f"chunk:{session_id}:{first_seq}-w",
                    kind="chunk",
                    text="\n".join(message_line(r) for r in window),
                    origin=_origin(kind, {r["role"] for r in window}),
                    created_at=parse_iso(window[0]["ts"]) or index.clock.now(),
                    session_id=session_id,
                    message_ids=tuple(r["msg_id"] for r in window),
                    source=source,
                    # Its vector is the mean of these messages' vectors: no text is encoded twice.
                    meta={
                        "first_seq": first_seq,
                        "last_seq": last_seq,
                        "window": True,
                        "parts": [f"chunk:{session_id}:{r['seq']}" for r in window],
                    },
                )
            )
    new = len(items) - await _existing(db, [it.uid for it in items])
    await index.upsert(items)
    await record_links(db, said)  # who "my sister" is, for the search's link hop
    await db.execute(
        "INSERT INTO memory_chunked(session_id, upto_seq) VALUES (?, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET upto_seq = excluded.upto_seq",
        (session_id, seqs[-1]),
    )
    return new
