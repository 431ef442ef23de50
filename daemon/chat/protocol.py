"""Parse and encode the chat socket's frames: newline-delimited JSON objects, one per line.

Client → daemon frames are parsed into frozen dataclasses (`MessageFrame`, `CommandFrame`,
`CancelFrame`, `ApproveFrame`, `SeenFrame`); anything else raises `ProtocolError` with the code the server puts in its
`error` frame. A command's arguments are checked against `COMMAND_ARGS` the same way, so a
wrong type is refused on the wire (`bad_args`) instead of being coerced by the command. Daemon → client frames are plain dicts built by the small constructors below,
and the frames clients send by `daemon.chat.wire`'s, re-exported here with its `encode`,
`decode` and `LineBuffer`, so the wire format lives in one place. `LineBuffer` splits a byte stream into lines while
enforcing the frame size limit: an oversized line is reported once and the rest of it is
discarded, so one bad frame never costs the connection.
"""

from __future__ import annotations

import enum
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

import anyio
from anyio.abc import ByteReceiveStream

from daemon.chat.args import ArgKind as ArgKind
from daemon.chat.args import fits, wrong_type
from daemon.chat.wire import LineBuffer as LineBuffer
from daemon.chat.wire import Oversized as Oversized
from daemon.chat.wire import approve as approve
from daemon.chat.wire import cancel as cancel
from daemon.chat.wire import command as command
from daemon.chat.wire import decode as decode
from daemon.chat.wire import describe_json as _describe_json
from daemon.chat.wire import encode as encode
from daemon.chat.wire import message as message
from daemon.chat.wire import seen as seen
from daemon.chat.wire import with_fields as _with

# The wire format and the client's frames, shared with the clients (standard library only).
from daemon.errors import ReverieError

# `hello` and `state` frames carry the lifecycle's states, by value.
from daemon.lifecycle import DaemonState


class ErrorCode(enum.StrEnum):
    """Every code an `error` frame can carry; nothing else may appear on the wire."""

    # frames and connections
    BAD_FRAME = "bad_frame"
    FRAME_TOO_LARGE = "frame_too_large"
    UNKNOWN_TYPE = "unknown_type"
    FORBIDDEN = "forbidden"
    NOT_READY = "not_ready"
    INTERNAL = "internal"
    # a message that could not be stored (it was NOT acknowledged)
    STORAGE = "storage"
    # turns
    CANCELLED = "cancelled"
    NOT_RUNNING = "not_running"
    TIMEOUT = "timeout"
    VETOED = "vetoed"
    CONTEXT_FAILED = "context_failed"
    MODEL_UNAVAILABLE = "model_unavailable"
    MODEL_ERROR = "model_error"
    SPEND_CAP = "spend_cap"
    # commands
    UNKNOWN_COMMAND = "unknown_command"
    BAD_ARGS = "bad_args"
    UNAVAILABLE = "unavailable"
    BUSY = "busy"
    # approvals
    UNKNOWN_APPROVAL = "unknown_approval"
    # notices
    UNKNOWN_NOTICE = "unknown_notice"


# Kept as names for the codes the server uses most.
BAD_FRAME: Final = ErrorCode.BAD_FRAME
FRAME_TOO_LARGE: Final = ErrorCode.FRAME_TOO_LARGE
UNKNOWN_TYPE: Final = ErrorCode.UNKNOWN_TYPE
FORBIDDEN: Final = ErrorCode.FORBIDDEN
MODEL_UNAVAILABLE: Final = ErrorCode.MODEL_UNAVAILABLE
SPEND_CAP: Final = ErrorCode.SPEND_CAP
CANCELLED: Final = ErrorCode.CANCELLED
INTERNAL: Final = ErrorCode.INTERNAL
NOT_READY: Final = ErrorCode.NOT_READY

BAD_ARGS: Final = ErrorCode.BAD_ARGS

CLIENT_TYPES: Final = ("message", "command", "cancel", "approve", "seen")
ToolPhase: TypeAlias = Literal["started", "finished", "progress"]
# How the person answers an `approval` frame: this call, not this call, this pattern from now on.
ApprovalAnswer: TypeAlias = Literal["yes", "no", "always"]
APPROVAL_ANSWERS: Final = ("yes", "no", "always")
# An approval's preview (a diff, a command) is cut to this many characters on the wire.
MAX_PREVIEW_CHARS: Final = 8_000


class ProtocolError(ReverieError):
    """A frame the daemon cannot accept; `code` and `message` go into the `error` frame.

    `id` is the client's frame id when it could be read, so the error can be matched to
    the request that caused it.
    """

    def __init__(self, code: ErrorCode, message: str, *, id: str | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.id = id

    def to_frame(self) -> dict[str, Any]:
        return error(self.code, self.message, id=self.id)


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageFrame:
    """A message from the person to the agent."""

    text: str
    id: str | None = None
    type: Literal["message"] = "message"


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandFrame:
    """A command for the daemon itself (`status`, `sleep`, …); the handler validates `name`.

    `files` counts the open files the client passed with the frame (`SCM_RIGHTS`): the
    server hands them to the command, which reads what the client could open.
    """

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    files: int = 0
    type: Literal["command"] = "command"


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelFrame:
    """Cancel a turn: the one named, or the current one when `turn_id` is None."""

    turn_id: str | None = None
    type: Literal["cancel"] = "cancel"


@dataclass(frozen=True, kw_only=True, slots=True)
class ApproveFrame:
    """The person's answer to the `approval` frame with this `id`."""

    id: str
    decision: ApprovalAnswer
    type: Literal["approve"] = "approve"


@dataclass(frozen=True, kw_only=True, slots=True)
class SeenFrame:
    """The person was shown these `notice` frames: they count as delivered."""

    ids: tuple[str, ...]
    type: Literal["seen"] = "seen"


ClientFrame: TypeAlias = MessageFrame | CommandFrame | CancelFrame | ApproveFrame | SeenFrame

# Each daemon command's arguments and their types. `null` counts as absent; arguments not named
# here are ignored (as unknown frame fields are), and commands not named here are the handler's
# to refuse. Which arguments a command requires is the command's own check.
COMMAND_ARGS: Final[Mapping[str, Mapping[str, ArgKind]]] = {
    "status": {},
    "ping": {},
    "sleep": {"wait": "boolean"},
    "switch": {"reason": "string"},
    "journal": {"tail": "integer", "day": "string"},
    "memory_search": {
        "queries": "strings",
        "k": "integer",
        "mode": "string",
        "kinds": "strings",
        "include_retired": "boolean",
        "raw": "boolean",
    },
    "memory_import": {"name": "string", "summarise": "boolean", "no_embed": "boolean"},
    "remember": {
        "text": "string",
        "target": "string",
        "tags": "strings",
        "correct": "string",
        "retract": "string",
        "restore": "string",
        "reason": "string",
    },
    "recall": {"query": "string"},
    "schedule": {
        "action": "string",
        "when": "string",
        "text": "string",
        "task": "boolean",
        "id": "string",
        "all": "boolean",
    },
}
# Open files one command frame may pass.
MAX_FILES_PER_FRAME: Final = 1
# Notice ids one `seen` frame may name (a chat opening after a long absence sends one each).
MAX_SEEN_IDS: Final = 1000


def _optional_str(obj: dict[str, Any], key: str, frame_id: str | None) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ProtocolError(
        BAD_FRAME, f"'{key}' must be a string, got {_describe_json(value)}", id=frame_id
    )


def check_command_args(name: str, args: dict[str, Any], frame_id: str | None = None) -> None:
    """Refuse a known command's argument of the wrong type with `ProtocolError(bad_args)`."""
    spec = COMMAND_ARGS.get(name)
    if spec is None:
        return
    for key, kind in spec.items():
        value = args.get(key)
        if value is not None and not fits(value, kind):
            raise ProtocolError(BAD_ARGS, wrong_type(name, key, kind, value), id=frame_id)


def parse_client_frame(line: bytes) -> ClientFrame:
    """Parse one line from a client into a frame; raise `ProtocolError` when it is not one.

    Unknown extra fields are ignored so newer clients can talk to older daemons.
    """
    obj = _json_object(line)
    raw_id = obj.get("id")
    frame_id = raw_id if isinstance(raw_id, str) else None
    if raw_id is not None and frame_id is None:
        raise ProtocolError(BAD_FRAME, f"'id' must be a string, got {_describe_json(raw_id)}")
    kind = obj.get("type")
    if kind is None:
        raise ProtocolError(
            BAD_FRAME,
            f"frame has no 'type' (expected one of: {', '.join(CLIENT_TYPES)})",
            id=frame_id,
        )
    if not isinstance(kind, str):
        raise ProtocolError(
            BAD_FRAME, f"'type' must be a string, got {_describe_json(kind)}", id=frame_id
        )
    if kind == "cancel":
        return CancelFrame(turn_id=_optional_str(obj, "turn_id", frame_id))
    parse = _PARSERS.get(kind)
    if parse is not None:
        return parse(obj, frame_id)
    shown = kind if len(kind) <= 40 else kind[:40] + "…"
    raise ProtocolError(
        UNKNOWN_TYPE,
        f"unknown frame type '{shown}' (expected one of: {', '.join(CLIENT_TYPES)})",
        id=frame_id,
    )


def _json_object(line: bytes) -> dict[str, Any]:
    """The line as a JSON object, or a `ProtocolError` saying what it is instead."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(BAD_FRAME, f"frame is not valid UTF-8 (byte {exc.start})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            BAD_FRAME, f"frame is not valid JSON: {exc.msg} at column {exc.colno}"
        ) from None
    except RecursionError:
        raise ProtocolError(BAD_FRAME, "frame is nested too deeply") from None
    if not isinstance(obj, dict):
        raise ProtocolError(BAD_FRAME, f"frame must be a JSON object, got {_describe_json(obj)}")
    return obj


def _message_frame(obj: dict[str, Any], frame_id: str | None) -> MessageFrame:
    body = obj.get("text")
    if not isinstance(body, str):
        got = "nothing" if body is None else _describe_json(body)
        raise ProtocolError(
            BAD_FRAME, f"a message needs 'text' as a string, got {got}", id=frame_id
        )
    if not body.strip():
        raise ProtocolError(BAD_FRAME, "a message's 'text' is empty", id=frame_id)
    return MessageFrame(text=body, id=frame_id)


def _command_frame(obj: dict[str, Any], frame_id: str | None) -> CommandFrame:
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        got = "an empty string" if isinstance(name, str) else _describe_json(name)
        raise ProtocolError(
            BAD_FRAME, f"a command needs 'name' as a non-empty string, got {got}", id=frame_id
        )
    args = obj.get("args")
    if args is None:
        args = {}
    elif not isinstance(args, dict):
        raise ProtocolError(
            BAD_FRAME,
            f"a command's 'args' must be an object, got {_describe_json(args)}",
            id=frame_id,
        )
    files = obj.get("files", 0)
    if type(files) is not int or not 0 <= files <= MAX_FILES_PER_FRAME:
        shown = str(files) if type(files) is int else _describe_json(files)
        raise ProtocolError(
            BAD_FRAME,
            f"a command's 'files' must be a count from 0 to {MAX_FILES_PER_FRAME}, got {shown}",
            id=frame_id,
        )
    check_command_args(name.strip(), args, frame_id)
    return CommandFrame(name=name.strip(), args=args, id=frame_id, files=files)


def _approve_frame(obj: dict[str, Any], frame_id: str | None) -> ApproveFrame:
    if frame_id is None:
        raise ProtocolError(BAD_FRAME, "an approve needs 'id': the id of the approval it answers")
    decision = obj.get("decision")
    if decision not in APPROVAL_ANSWERS:
        got = repr(decision) if isinstance(decision, str) else _describe_json(decision)
        raise ProtocolError(
            BAD_FRAME,
            f"an approve's 'decision' must be one of: yes, no, always; got {got}",
            id=frame_id,
        )
    return ApproveFrame(id=frame_id, decision=decision)


def _seen_frame(obj: dict[str, Any], frame_id: str | None) -> SeenFrame:
    ids = obj.get("ids")
    if (
        not isinstance(ids, list)
        or not ids
        or not all(isinstance(i, str) and i.strip() for i in ids)
    ):
        got = "nothing" if ids is None else _describe_json(ids)
        if isinstance(ids, list):
            got = "an empty array" if not ids else "an array holding something else"
        raise ProtocolError(
            BAD_FRAME,
            f"a seen needs 'ids' as a non-empty array of notice ids, got {got}",
            id=frame_id,
        )
    if len(ids) > MAX_SEEN_IDS:
        raise ProtocolError(
            BAD_FRAME,
            f"a seen names at most {MAX_SEEN_IDS} notices, got {len(ids)}",
            id=frame_id,
        )
    return SeenFrame(ids=tuple(ids))


_PARSERS: dict[str, Callable[[dict[str, Any], str | None], ClientFrame]] = {
    "message": _message_frame,
    "command": _command_frame,
    "approve": _approve_frame,
    "seen": _seen_frame,
}


# --- client → daemon frames -------------------------------------------------------------
# `message`, `command`, `cancel`, `approve` and `seen` are `daemon.chat.wire`'s (imported above), so the blocking
# client needs no more than that module; the keys they write are the ones parsed above.


# --- daemon → client frames -------------------------------------------------------------


def hello(*, version: str, state: DaemonState | str, session_id: str) -> dict[str, Any]:
    return {"type": "hello", "version": version, "state": state, "session_id": session_id}


def accepted(*, turn_id: str, id: str | None, queued: int) -> dict[str, Any]:
    return {"type": "accepted", "turn_id": turn_id, "id": id, "queued": queued}


def delta(*, turn_id: str, text: str) -> dict[str, Any]:
    return {"type": "delta", "turn_id": turn_id, "text": text}


def tool(
    *,
    turn_id: str,
    name: str,
    phase: ToolPhase,
    is_error: bool | None = None,
    detail: str | None = None,
    depth: int | None = None,
    fork_id: str | None = None,
    summary: str | None = None,
) -> dict[str, Any]:
    """A tool call's phase; `summary` (on `started`) says in one line what the call does."""
    return _with(
        {"type": "tool", "turn_id": turn_id, "name": name, "phase": phase},
        summary=summary,
        is_error=is_error,
        detail=detail,
        depth=depth or None,
        fork_id=fork_id,
    )


def approval(
    *,
    id: str,
    turn_id: str,
    session_id: str,
    tool: str,
    subject: str | None,
    summary: str,
    preview: str,
    pattern: str,
    timeout_s: float,
) -> dict[str, Any]:
    """Ask the person whether a tool call may run; they answer with `approve` {id, decision}.

    `pattern` is what an `always` answer saves (calls of `tool` whose subject matches it run
    unasked from then on); no answer within `timeout_s` is a no. Sent to the clients of the
    daemon's own uid only.
    """
    if len(preview) > MAX_PREVIEW_CHARS:
        cut = len(preview) - MAX_PREVIEW_CHARS
        preview = preview[:MAX_PREVIEW_CHARS] + f"\n…[{cut} more characters not shown]"
    return {
        "type": "approval",
        "id": id,
        "turn_id": turn_id,
        "session_id": session_id,
        "tool": tool,
        "subject": subject,
        "summary": summary,
        "preview": preview,
        "pattern": pattern,
        "timeout_s": timeout_s,
    }


def approval_settled(*, id: str, answer: str | None, by: str) -> dict[str, Any]:
    """An `approval` was settled (`answer` yes / no / always, or null when nobody gave one;
    `by` person / timeout / nobody): a client still showing it can put it away."""
    return {"type": "approval_settled", "id": id, "answer": answer, "by": by}


def done(
    *, turn_id: str, text: str, stop_reason: str, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return _with(
        {"type": "done", "turn_id": turn_id, "text": text, "stop_reason": stop_reason}, usage=usage
    )


def error(
    code: ErrorCode, message: str, *, turn_id: str | None = None, id: str | None = None
) -> dict[str, Any]:
    return _with(
        {"type": "error", "code": ErrorCode(code).value, "message": message}, turn_id=turn_id, id=id
    )


def state(
    state: DaemonState | str,
    *,
    previous: str | None = None,
    detail: str | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    return _with(
        {"type": "state", "state": state}, previous=previous, detail=detail or None, phase=phase
    )


def notice(
    *,
    id: str,
    kind: str,
    text: str,
    ts: str,
    due_at: str | None = None,
    late_s: float | None = None,
    schedule_id: str | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Something the agent tells the person unasked (a reminder, a task's result, a greeting).

    Sent to the clients of the daemon's own uid only: at once when it is posted, else when
    one of them next connects (after `hello`). `late_s` says how late a missed one fired.
    `quiet` marks a passing line for open chats only (the heartbeat's): never stored or kept
    for later, shown dim, and needing no `seen`.
    """
    return _with(
        {"type": "notice", "id": id, "kind": kind, "text": text, "ts": ts},
        due_at=due_at,
        late_s=late_s or None,
        schedule_id=schedule_id,
        quiet=quiet or None,
    )


def result(*, id: str | None, name: str, data: Any) -> dict[str, Any]:
    return {"type": "result", "id": id, "name": name, "data": data}


def progress(*, id: str | None, name: str, data: Any) -> dict[str, Any]:
    """How far a long command (a `memory_import`) has got; its `result` or `error` follows."""
    return {"type": "progress", "id": id, "name": name, "data": data}


# --- line splitting with a size limit ---------------------------------------------------


class LineReader:
    """Read size-limited lines from an anyio byte stream (see `LineBuffer`).

    `receive()` returns the next line, an `Oversized` marker, or None at end of stream.
    Cancellation leaves the buffered bytes in place, so reading can resume.
    """

    def __init__(self, stream: ByteReceiveStream, max_bytes: int, *, chunk: int = 65536) -> None:
        self._stream = stream
        self._lines = LineBuffer(max_bytes)
        self._ready: deque[bytes | Oversized] = deque()
        self._chunk = chunk
        self._eof = False

    async def receive(self) -> bytes | Oversized | None:
        while not self._ready:
            if self._eof:
                return None
            try:
                data = await self._stream.receive(self._chunk)
            except anyio.EndOfStream:
                self._eof = True
                tail = self._lines.finish()
                if tail is not None:
                    self._ready.append(tail)
                continue
            self._ready.extend(self._lines.feed(data))
        return self._ready.popleft()
