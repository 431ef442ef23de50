"""The Matrix channel's files: the sync position, the events handled, the replies in flight.

Files live in `<home>/channels/matrix/` (0700 directory, 0600 files):

- `sync.json` — the sync position, replaced atomically once every event of a batch is taken.
- `seen.jsonl` — every event handled (event id, room, turn id when taken; `encrypted` for the
  event that showed a room is end-to-end encrypted), appended and fsynced.
- `outbox.jsonl` — replies and notices until the homeserver confirmed them (`put`, `sent`).
- `held.jsonl` — encrypted messages that could not be decrypted yet (no room key), kept until
  their key arrives (`put`, `done`).
- `crypto/` — the end-to-end encryption store (`matrix_crypto`).

An inbox entry that came from Matrix carries `matrix <room> <event>` as its client message id,
so a crash between the inbox write and `seen.jsonl` is read back from the inbox at the start.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.durable import append_lines, read_jsonl, write_atomic

CLIENT_ID_PREFIX = "matrix "
# The end-to-end encryption store's directory, and its record of the bot's device.
STORE_DIR = "crypto"
DEVICE_FILE = "device.json"


@dataclass
class Reply:
    """One message for a room: a turn's reply, a question, or a notice from the outbox.

    `key` is unique per message (the turn id for a reply) and is the transaction id's stem, so
    a resend after a lost connection is deduplicated by the homeserver.
    """

    key: str
    room_id: str
    text: str
    notice: bool = False
    # The outbox notice this message delivers, marked delivered once the homeserver has it.
    notice_id: str | None = None

    def record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "op": "put",
            "turn": self.key,
            "room": self.room_id,
            "text": self.text,
            "notice": self.notice,
        }
        if self.notice_id is not None:
            rec["notice_id"] = self.notice_id
        return rec


@dataclass
class SeenState:
    """What `seen.jsonl` says at the start."""

    events: set[str] = field(default_factory=set)
    # The room the person last wrote in (where notices go), and the rooms found encrypted.
    last_room: str | None = None
    encrypted: set[str] = field(default_factory=set)


class MatrixStore:
    """The channel's files (see the module's docstring); every write is fsynced."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sync_file = root / "sync.json"
        self.seen_file = root / "seen.jsonl"
        self.outbox_file = root / "outbox.jsonl"
        self.held_file = root / "held.jsonl"

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def next_batch(self) -> str | None:
        try:
            data = json.loads(self.sync_file.read_text())
        except (OSError, ValueError):
            return None
        value = data.get("next_batch") if isinstance(data, dict) else None
        return value if isinstance(value, str) and value else None

    def save_next_batch(self, token: str) -> None:
        write_atomic(self.sync_file, json.dumps({"next_batch": token}), mode=0o600)

    def seen(self) -> SeenState:
        state = SeenState()
        for rec in read_jsonl(self.seen_file):
            if "event" not in rec:
                continue
            state.events.add(str(rec["event"]))
            room = rec.get("room")
            if not isinstance(room, str):
                continue
            if rec.get("encrypted"):
                state.encrypted.add(room)
            elif rec.get("turn"):
                state.last_room = room
        return state

    def mark_seen(self, records: list[dict[str, Any]]) -> None:
        append_lines(self.seen_file, [json.dumps(r) for r in records])

    def pending_replies(self) -> list[Reply]:
        pending: dict[str, Reply] = {}
        for rec in read_jsonl(self.outbox_file):
            key = rec.get("turn")
            if not isinstance(key, str):
                continue
            if rec.get("op") == "put":
                nid = rec.get("notice_id")
                pending[key] = Reply(
                    key,
                    str(rec.get("room")),
                    str(rec.get("text", "")),
                    bool(rec.get("notice")),
                    nid if isinstance(nid, str) else None,
                )
            elif rec.get("op") == "sent":
                pending.pop(key, None)
        return list(pending.values())

    def compact_outbox(self) -> None:
        lines = [json.dumps(r.record(), ensure_ascii=False) for r in self.pending_replies()]
        write_atomic(self.outbox_file, "".join(line + "\n" for line in lines), mode=0o600)

    def put_reply(self, reply: Reply) -> None:
        append_lines(self.outbox_file, [json.dumps(reply.record(), ensure_ascii=False)])

    def reply_sent(self, key: str) -> None:
        append_lines(self.outbox_file, [json.dumps({"op": "sent", "turn": key})])

    def held(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Encrypted events waiting for their room key: event id -> (room, the raw event)."""
        held: dict[str, tuple[str, dict[str, Any]]] = {}
        for rec in read_jsonl(self.held_file):
            event_id, room, event = rec.get("event"), rec.get("room"), rec.get("raw")
            if not isinstance(event_id, str):
                continue
            if rec.get("op") == "put" and isinstance(room, str) and isinstance(event, dict):
                held[event_id] = (room, event)
            elif rec.get("op") == "done":
                held.pop(event_id, None)
        return held

    def hold(self, room_id: str, event: dict[str, Any]) -> None:
        rec = {"op": "put", "event": event.get("event_id"), "room": room_id, "raw": event}
        append_lines(self.held_file, [json.dumps(rec)])

    def unhold(self, event_id: str) -> None:
        append_lines(self.held_file, [json.dumps({"op": "done", "event": event_id})])


def client_msg_id(room_id: str, event_id: str) -> str:
    return f"{CLIENT_ID_PREFIX}{room_id} {event_id}"


def parse_client_msg_id(value: str | None) -> tuple[str, str] | None:
    """(room, event) of an inbox entry that came from Matrix, else None."""
    if not value or not value.startswith(CLIENT_ID_PREFIX):
        return None
    parts = value[len(CLIENT_ID_PREFIX) :].split(" ")
    return (parts[0], parts[1]) if len(parts) == 2 else None


def spaced(key: str) -> str:
    """The fingerprint in groups of four, as Element prints a session key."""
    return " ".join(key[i : i + 4] for i in range(0, len(key), 4))
