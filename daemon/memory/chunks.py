"""Cut a session's messages (the `messages` table) into chunk memories for the index.

Each message is its own chunk, so a hit names the exact message it came from; overlapping
windows of `memory.chunk_messages` messages carry the surrounding exchange, and a long
message is also indexed as its passages (`excerpt.passages`). The speaker and
the date are part of a chunk's indexed text, so "what did Caroline say in May" can match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from daemon.memory.api import Origin
from daemon.memory.excerpt import passages
from daemon.memory.links import record as record_links
from daemon.memory.rows import NewMemory, parse_iso
from daemon.store.chunking import ChunkedSession, ChunkingRepo, SessionMessage

if TYPE_CHECKING:
    from daemon.clock import Clock
    from daemon.memory.index import MemoryIndex

# Before any message: a session never chunked has every message still to cut.
_NOTHING_CHUNKED = -(2**62)


def day_label(ts: datetime) -> str:
    """Format a date the way people say it ("8 May 2023")."""
    return f"{ts.day} {ts.strftime('%B %Y')}"


def message_line(message: SessionMessage) -> str:
    ts = parse_iso(message.ts)
    who = message.speaker or message.role
    when = f" ({day_label(ts)})" if ts else ""
    return f"{who}{when}: {message.content.strip()}"


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


@dataclass(frozen=True, kw_only=True)
class _Cut:
    """What one chunking pass reads: the session, its messages from the first window a new
    message touches (`messages[0]` is message number `base`), and where the new ones start."""

    session: ChunkedSession
    messages: list[SessionMessage]
    base: int
    new: int  # the ordinal of the first message not chunked yet
    total: int  # how many messages the session has
    last: int  # the seq of its last message
    size: int  # messages per window
    stride: int  # how far one window starts after the previous

    def chunk(
        self,
        message: SessionMessage,
        origin: Origin,
        clock: Clock,
        *,
        uid: str | None = None,
        text: str | None = None,
        message_ids: tuple[str, ...] | None = None,
        meta: dict[str, object] | None = None,
    ) -> NewMemory:
        """A chunk memory of this session dated by `message` (by default: that message's own)."""
        return NewMemory(
            uid=uid or f"chunk:{self.session.id}:{message.seq}",
            kind="chunk",
            text=message_line(message) if text is None else text,
            origin=origin,
            created_at=parse_iso(message.ts) or clock.now(),
            session_id=self.session.id,
            message_ids=(message.msg_id,) if message_ids is None else message_ids,
            source=self.session.transcript_path,
            meta={"seq": message.seq, "role": message.role} if meta is None else meta,
        )


async def _read(index: MemoryIndex, repo: ChunkingRepo, session_id: str) -> _Cut | None:
    """The messages a pass over `session_id` reads (None: every message is chunked already)."""
    session = await repo.session(session_id)
    if session is None:
        raise KeyError(f"no session {session_id!r}")
    upto = await repo.chunked_upto(session_id)
    upto = _NOTHING_CHUNKED if upto is None else upto
    seqs = await repo.seqs(session_id)
    new = next((i for i, s in enumerate(seqs) if s > upto), None)
    if new is None:
        return None
    size = index.settings.chunk_messages
    stride = max(1, size // 2)
    # Windows start at multiples of `stride`; the first one touched by a new message:
    first_window = max(0, ((new - size + 1 + stride - 1) // stride) * stride) if new >= size else 0
    return _Cut(
        session=session,
        messages=await repo.messages_from(session_id, seqs[first_window]),
        base=first_window,
        new=new,
        total=len(seqs),
        last=seqs[-1],
        size=size,
        stride=stride,
    )


def _message_chunks(cut: _Cut, message: SessionMessage, clock: Clock) -> list[NewMemory]:
    """The message's own chunk and, for a long message (code, a plan), its passages: a hit
    names the part that matched, and what is shown of it is that part, not the whole."""
    origin = _origin(cut.session.kind, {message.role})
    own = cut.chunk(message, origin, clock)
    content = message.content.strip()
    parts = passages(content)
    label = message_line(message)[: -len(content) or None]
    out = [own]
    for n, passage in enumerate(parts):
        before = "… " if n > 0 else ""
        after = " …" if n < len(parts) - 1 else ""
        out.append(
            cut.chunk(
                message,
                origin,
                clock,
                uid=f"{own.uid}.p{n}",
                text=f"{label}{before}{passage}{after}",
                meta={"seq": message.seq, "role": message.role, "passage": n, "of": own.uid},
            )
        )
    return out


def _window_chunks(cut: _Cut, clock: Clock) -> list[NewMemory]:
    """The overlapping windows of `size` messages that hold a new message (none when a window
    is one message: each message is a chunk already)."""
    if cut.size <= 1:
        return []
    out: list[NewMemory] = []
    sid = cut.session.id
    for start in range(cut.base, cut.total, cut.stride):
        window = [
            m
            for m in cut.messages[start - cut.base : start - cut.base + cut.size]
            if m.content.strip()
        ]
        if len(window) < 2:
            continue
        first_seq, last_seq = window[0].seq, window[-1].seq
        out.append(
            cut.chunk(
                window[0],
                _origin(cut.session.kind, {m.role for m in window}),
                clock,
                uid=f"chunk:{sid}:{first_seq}-w",
                text="\n".join(message_line(m) for m in window),
                message_ids=tuple(m.msg_id for m in window),
                # Its vector is the mean of these messages' vectors: no text is encoded twice.
                meta={
                    "first_seq": first_seq,
                    "last_seq": last_seq,
                    "window": True,
                    "parts": [f"chunk:{sid}:{m.seq}" for m in window],
                },
            )
        )
    return out


def _person_said(
    cut: _Cut, new: Sequence[SessionMessage]
) -> list[tuple[str, str, str, str, str, str]]:
    """The new messages mention links are read from (the person's, or imported): (memory uid,
    session id, message id, created_at, speaker, content)."""
    sid = cut.session.id
    return [
        (f"chunk:{sid}:{m.seq}", sid, m.msg_id, m.ts, m.speaker or "", m.content)
        for m in new
        if _origin(cut.session.kind, {m.role}) in ("person", "import")
    ]


async def chunk_session(index: MemoryIndex, session_id: str) -> int:
    """Chunk the messages of `session_id` not chunked yet; return the number of new chunks."""
    repo = ChunkingRepo(index.db)
    cut = await _read(index, repo, session_id)
    if cut is None:
        return 0
    new = [m for m in cut.messages[cut.new - cut.base :] if m.content.strip()]
    items = [c for m in new for c in _message_chunks(cut, m, index.clock)]
    items += _window_chunks(cut, index.clock)
    added = len(items) - await repo.existing([it.uid for it in items])
    await index.upsert(items)
    await record_links(index.db, _person_said(cut, new))  # who "my sister" is, for the link hop
    await repo.mark_chunked(session_id, cut.last)
    return added
