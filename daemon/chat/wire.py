"""The socket's wire format, shared by the server and every client (standard library only).

A frame is one JSON object on one line. `encode` and `decode` are the only way a frame goes
on or comes off the wire; `LineBuffer` splits a byte stream into lines under the frame size
limit; `message`, `command`, `cancel`, `approve` and `seen` build the frames a client sends.
`daemon.chat.protocol` (the server's parser and the daemon's frames) re-exports them, and the blocking client a
forwarded `reverie memory search` uses imports this module alone: anyio, `typing` and
dataclasses would cost a cold command a third of its time.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def encode(frame: dict[str, Any]) -> bytes:
    """Encode a frame as one line of compact UTF-8 JSON, newline included.

    Raises `TypeError`/`ValueError` for a frame that is not JSON (a programming error);
    JSON escapes newlines inside strings, so the output is always exactly one line.
    """
    return (
        json.dumps(frame, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        + b"\n"
    )


def decode(line: bytes) -> dict[str, Any]:
    """Decode one line into a frame; raise `ValueError` when it is not a JSON object."""
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {describe_json(obj)}")
    return obj


def describe_json(value: Any) -> str:
    """Name a JSON value's kind for an error message ("an array", "a string", …)."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return type(value).__name__


def with_fields(frame: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """`frame` with the optional fields that have a value (None leaves a key out)."""
    frame.update({k: v for k, v in optional.items() if v is not None})
    return frame


# --- client → daemon frames -------------------------------------------------------------
# What clients send, built here as the daemon's frames are in `protocol`, so the keys a client
# writes and the keys `protocol.parse_client_frame` reads are named in one package.


def message(*, text: str, id: str | None = None) -> dict[str, Any]:
    """A message for the agent; `id` comes back on its `accepted` (and on an error about it)."""
    return with_fields({"type": "message", "text": text}, id=id)


def command(
    *, name: str, id: str | None = None, args: Mapping[str, Any] | None = None, files: int = 0
) -> dict[str, Any]:
    """A command for the daemon; `files` counts the open files sent with it (`SCM_RIGHTS`)."""
    return with_fields(
        {"type": "command", "name": name},
        id=id,
        args=dict(args) if args else None,
        files=files or None,
    )


def cancel(*, turn_id: str | None = None) -> dict[str, Any]:
    """Cancel the turn named, or the current one."""
    return with_fields({"type": "cancel"}, turn_id=turn_id)


def approve(*, id: str, decision: str) -> dict[str, Any]:
    """The person's answer (`yes`, `no` or `always`) to the `approval` frame `id`."""
    return {"type": "approve", "id": id, "decision": decision}


def seen(*, ids: list[str]) -> dict[str, Any]:
    """The `notice` frames `ids` were shown to the person: they count as delivered from now on.

    Only a client that shows notices sends it; one that only runs commands never does, so a
    notice it was sent stays pending for the next chat.
    """
    return {"type": "seen", "ids": list(ids)}


# --- line splitting with a size limit ---------------------------------------------------


class Oversized:
    """Marks a line that exceeded the frame size limit (its bytes were discarded)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def __repr__(self) -> str:
        return f"Oversized({self.size})"


class LineBuffer:
    """Split a byte stream into lines of at most `max_bytes` (newline excluded).

    `feed` returns complete lines and, for a line that grows past the limit, one
    `Oversized` marker as soon as the limit is crossed; the rest of that line is then
    dropped up to its newline. Memory stays bounded by `max_bytes` whatever the peer sends.
    Blank lines are skipped (harmless keep-alives).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._discarding = False
        self._discarded = 0

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        out: list[bytes | Oversized] = []
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            end = len(data) if nl < 0 else nl
            chunk = data[start:end]
            if self._discarding:
                self._discarded += len(chunk)
            else:
                self._buf += chunk
                if len(self._buf) > self.max_bytes:
                    self._discarded = len(self._buf)
                    self._buf.clear()
                    self._discarding = True
                    out.append(Oversized(self._discarded))
            if nl < 0:
                break
            if self._discarding:
                self._discarding = False
                self._discarded = 0
            else:
                line = bytes(self._buf).rstrip(b"\r")
                self._buf.clear()
                if line.strip():
                    out.append(line)
            start = nl + 1
        return out

    def finish(self) -> bytes | None:
        """Return what is left when the stream ends without a final newline."""
        if self._discarding:
            return None
        line = bytes(self._buf).rstrip(b"\r")
        self._buf.clear()
        return line if line.strip() else None

    @property
    def pending(self) -> int:
        """Bytes held for an unfinished line."""
        return len(self._buf)
