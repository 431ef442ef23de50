"""What Matrix events say as the person's message, and how the channel's own messages read.

Pure functions: an `m.room.message` event to the text the trunk gets (or None to skip it),
a long reply cut into messages, a notice from the outbox worded for the room.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daemon.schedule.outbox import Notice

# A Matrix event is at most 65536 bytes of JSON: bodies are kept well under it.
MAX_BODY_CHARS = 12_000
# A message longer than this is cut (with a note) before it reaches the inbox.
MAX_INCOMING_CHARS = 32_000
_MEDIA = {
    "m.image": "an image",
    "m.file": "a file",
    "m.audio": "an audio clip",
    "m.video": "a video",
}


def split_reply(text: str, limit: int = MAX_BODY_CHARS) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at paragraphs, then lines, then words."""
    text = text.strip()
    if not text:
        return []
    pieces: list[str] = []
    while len(text) > limit:
        window = text[:limit]
        cut = -1
        for sep in ("\n\n", "\n", " "):
            cut = window.rfind(sep)
            if cut > limit // 4:
                break
        if cut <= limit // 4:
            cut = limit
        pieces.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        pieces.append(text)
    return pieces


def edited_event(event: Mapping[str, Any]) -> str | None:
    """The event id an `m.replace` edit replaces, else None."""
    content = event.get("content")
    if not isinstance(content, Mapping):
        return None
    relates = content.get("m.relates_to")
    if isinstance(relates, Mapping) and relates.get("rel_type") == "m.replace":
        target = relates.get("event_id")
        return target if isinstance(target, str) else ""
    return None


def message_text(event: Mapping[str, Any]) -> str | None:
    """What an `m.room.message` event says, as the person's message; None to skip it."""
    content = event.get("content")
    if not isinstance(content, Mapping) or edited_event(event) is not None:
        # Malformed, redacted (content emptied), or an edit of a message answered already.
        return None
    kind = content.get("msgtype")
    body = content.get("body")
    if not isinstance(body, str):
        return None
    if kind in ("m.text", "m.notice"):
        text = body
    elif kind == "m.emote":
        text = f"* {body}"
    elif isinstance(kind, str) and kind in _MEDIA:
        info = content.get("info") if isinstance(content.get("info"), Mapping) else {}
        size = info.get("size") if isinstance(info, Mapping) else None
        mime = info.get("mimetype") if isinstance(info, Mapping) else None
        about = ", ".join(
            x
            for x in (
                mime if isinstance(mime, str) else "",
                f"{size} bytes" if isinstance(size, int) else "",
            )
            if x
        )
        text = (
            f"[sent {_MEDIA[kind]} over Matrix: {body!r}{f' ({about})' if about else ''} — the "
            "channel does not fetch media, so only its name is known]"
        )
    else:
        return None
    text = text.strip()
    if not text:
        return None
    if len(text) > MAX_INCOMING_CHARS:
        cut = len(text) - MAX_INCOMING_CHARS
        text = text[:MAX_INCOMING_CHARS] + f"\n[… {cut} more characters cut by the Matrix channel]"
    return text


def notice_text(notice: Notice) -> str:
    """A notice from the outbox as the room reads it: its kind, its text, how late it is."""
    label = {"reminder": "Reminder", "task": "Task done", "checklist": "Checklist"}.get(notice.kind)
    text = f"{label}: {notice.text}" if label else notice.text
    if notice.late_s >= 60 and notice.due_at is not None:
        text += f" (due {notice.due_at:%Y-%m-%d %H:%M} UTC, {notice.late_s / 60:.0f} min late)"
    return text
