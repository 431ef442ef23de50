"""A scripted fake of the Anthropic Messages API, speaking the real wire format over HTTP.

It serves `POST /v1/messages` (JSON, or server-sent events when `stream` is true) and
`POST /v1/messages/count_tokens` on 127.0.0.1, so the official SDK runs unchanged against
it — in-process from a test, or from a daemon subprocess pointed at it with
`REVERIE_ANTHROPIC_BASE_URL`. Run it standalone with
``python -m tests.fakes.anthropic_server --port N``; it prints its URL and serves until
interrupted. A fake in another process is scripted over HTTP: ``POST /_fake/enqueue`` with
a JSON list of `Planned` fields (or strings), ``GET /_fake/requests`` for what it received.

Responses come from a queue of `Planned` entries (text, tool calls, usage, HTTP errors,
overload, a dropped connection, an event that is not JSON, a stream that stalls, a delay); `outage(plan)` answers every request with one
error until it is lifted. With the queue empty it echoes the last user
message, deterministically. Every request it receives is kept in `.requests`.

Prompt caching is simulated: a request whose blocks carry `cache_control` reports the
marked prefix as `cache_creation_input_tokens` the first time it is seen and as
`cache_read_input_tokens` afterwards, so a client can measure its cache hit rate.
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


@dataclass(frozen=True, kw_only=True)
class Planned:
    """One scripted response. Build with the class methods; fields compose."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    stop_reason: str | None = None
    usage: dict[str, int] | None = None
    status: int = 200
    error_type: str | None = None
    error_message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    # Close the connection mid-stream after this many text deltas (0: before any text).
    drop_after_deltas: int | None = None
    # Send an `error` event mid-stream after this many text deltas.
    stream_error_after_deltas: int | None = None
    # Send an event whose data is not JSON (`data: {not json!!`) after this many text deltas.
    malformed_after_deltas: int | None = None
    # Stop sending after this many text deltas and hold the connection open, silent, until
    # the fake stops (a hung API: only the client's read timeout ends the wait).
    stall_after_deltas: int | None = None
    # Pause after this many text deltas until the test calls `FakeAnthropic.release()` (a turn
    # held mid-reply for as long as the test needs, then finished), or the fake stops.
    hold_after_deltas: int | None = None
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0

    @classmethod
    def from_json(cls, data: Any) -> Planned:
        """Build from JSON (the control endpoint): `tool_calls` as `[[name, {args}], ...]`."""
        if isinstance(data, str):
            return cls(text=data)
        if not isinstance(data, dict):
            raise TypeError(
                f"a planned response is an object or a string, not {type(data).__name__}"
            )
        fields = dict(data)
        fields["tool_calls"] = tuple((str(n), dict(a)) for n, a in fields.get("tool_calls") or ())
        if fields.get("status", 200) != 200 and not fields.get("error_type"):
            fields["error_type"] = _ERROR_TYPES.get(int(fields["status"]), "api_error")
        return cls(**fields)

    @classmethod
    def reply(cls, text: str, **kw: Any) -> Planned:
        return cls(text=text, **kw)

    @classmethod
    def tool(cls, name: str, arguments: dict[str, Any], *, text: str = "", **kw: Any) -> Planned:
        return cls(text=text, tool_calls=((name, arguments),), **kw)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "",
        *,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Planned:
        return cls(
            status=status,
            error_type=error_type or _ERROR_TYPES.get(status, "api_error"),
            error_message=message or f"fake error {status}",
            headers=dict(headers or {}),
        )

    @classmethod
    def rate_limited(cls, retry_after: str = "0") -> Planned:
        return cls.error(
            429,
            "Number of request tokens has exceeded your rate limit",
            headers={"retry-after": retry_after},
        )

    @classmethod
    def overloaded(cls) -> Planned:
        return cls.error(529, "Overloaded", error_type="overloaded_error")

    @classmethod
    def dropped(
        cls, *, after_deltas: int = 0, text: str = "this reply is cut off before it ends"
    ) -> Planned:
        return cls(text=text, drop_after_deltas=after_deltas)

    @classmethod
    def delayed(cls, seconds: float, text: str = "late reply") -> Planned:
        return cls(text=text, delay_s=seconds)

    @classmethod
    def malformed(
        cls, *, after_deltas: int = 0, text: str = "this reply turns to garbage midway"
    ) -> Planned:
        return cls(text=text, malformed_after_deltas=after_deltas)

    @classmethod
    def stalled(
        cls, *, after_deltas: int = 0, text: str = "this reply stops and never ends"
    ) -> Planned:
        return cls(text=text, stall_after_deltas=after_deltas)


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeAnthropic

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (timeout, cancellation, a scripted drop) is part of the script.
        if isinstance(sys.exc_info()[1], ConnectionError | OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None  # tests stay quiet; requests are recorded instead

    # -- plumbing -------------------------------------------------------------------

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", self.server.fake.next_id("req"))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(
        self, status: int, error_type: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        payload = {"type": "error", "error": {"type": error_type, "message": message}}
        self._send_json(status, payload, headers)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        self._chunk(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())

    # -- endpoints ------------------------------------------------------------------

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = None
        path = self.path.split("?", 1)[0]
        if path == "/_fake/enqueue":
            return self._control_enqueue(body)
        fake._record(
            RecordedRequest(
                method="POST",
                path=path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body if isinstance(body, dict) else {},
            )
        )
        if not self.headers.get("x-api-key") and not self.headers.get("authorization"):
            return self._send_error(401, "authentication_error", "x-api-key header is required")
        if not isinstance(body, dict):
            return self._send_error(400, "invalid_request_error", "request body is not valid JSON")
        if path == "/v1/messages/count_tokens":
            problem = _validate(body, need_max_tokens=False)
            if problem:
                return self._send_error(400, "invalid_request_error", problem)
            return self._send_json(200, {"input_tokens": _prompt_tokens(body)})
        if path != "/v1/messages":
            return self._send_error(404, "not_found_error", f"no route for {path}")
        problem = _validate(body, need_max_tokens=True)
        if problem:
            return self._send_error(400, "invalid_request_error", problem)
        plan = fake._take(body)
        if plan.delay_s and fake._stopping.wait(plan.delay_s):
            return None
        try:
            if plan.status != 200:
                return self._send_error(
                    plan.status, plan.error_type or "api_error", plan.error_message, plan.headers
                )
            message = fake._message(body, plan)
            if body.get("stream"):
                self._stream(message, plan)
            else:
                self._send_json(200, message, plan.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout, cancellation)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/_fake/requests":
            return self._send_error(404, "not_found_error", f"no route for {self.path}")
        recorded = [vars(r) for r in self.server.fake.requests]
        return self._send_json(200, {"requests": recorded})

    def _control_enqueue(self, body: Any) -> None:
        """Script a fake running in another process: POST a list of `Planned` fields as JSON."""
        items = body if isinstance(body, list) else [body]
        try:
            plans = [Planned.from_json(item) for item in items]
        except (TypeError, ValueError) as exc:
            return self._send_json(400, {"error": str(exc)})
        self.server.fake.enqueue(*plans)
        return self._send_json(200, {"queued": len(plans), "pending": self.server.fake.pending})

    def _stream(self, message: dict[str, Any], plan: Planned) -> None:
        fake = self.server.fake
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", fake.next_id("req"))
        for key, value in plan.headers.items():
            self.send_header(key, value)
        self.end_headers()
        start = dict(message, content=[], stop_reason=None, stop_sequence=None)
        start["usage"] = dict(message["usage"], output_tokens=1)
        self._event("message_start", {"type": "message_start", "message": start})
        self._event("ping", {"type": "ping"})
        deltas = 0

        def checkpoint() -> bool:
            """Apply a scripted failure once `deltas` text deltas went out; True when cut."""
            if plan.drop_after_deltas is not None and deltas >= plan.drop_after_deltas:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return True
            if plan.malformed_after_deltas is not None and deltas >= plan.malformed_after_deltas:
                self._chunk(b"event: content_block_delta\ndata: {not json!!\n\n")
                self._chunk(b"")
                return True
            if plan.stall_after_deltas is not None and deltas >= plan.stall_after_deltas:
                self.wfile.flush()
                fake._stopping.wait()
                self.close_connection = True
                return True
            if (
                plan.stream_error_after_deltas is not None
                and deltas >= plan.stream_error_after_deltas
            ):
                self._event(
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                )
                self._chunk(b"")
                return True
            return False

        if checkpoint():
            return
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                self._event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                words = block["text"].split(" ")
                for i, word in enumerate(words):
                    piece = word if i == len(words) - 1 else word + " "
                    if plan.chunk_delay_s and fake._stopping.wait(plan.chunk_delay_s):
                        return
                    self._event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                    deltas += 1
                    if checkpoint():
                        return
                    if plan.hold_after_deltas == deltas:
                        self.wfile.flush()
                        while not fake._released.wait(0.05):
                            if fake._stopping.is_set():
                                return
            else:
                start_block = {
                    "type": "tool_use",
                    "id": block["id"],
                    "name": block["name"],
                    "input": {},
                }
                self._event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start_block},
                )
                encoded = json.dumps(block["input"])
                for i in range(0, len(encoded), 7):
                    part = {"type": "input_json_delta", "partial_json": encoded[i : i + 7]}
                    self._event(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": part},
                    )
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        self._chunk(b"")


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return f"{block.get('name')}:{json.dumps(block.get('input'), sort_keys=True)}"
    if kind == "tool_result":
        content = block.get("content", "")
        return content if isinstance(content, str) else "".join(_block_text(b) for b in content)
    return ""


def _units(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The prompt as (text, carries cache_control) units, in the order the API reads them."""
    units: list[tuple[str, bool]] = []
    for tool in body.get("tools") or []:
        units.append((json.dumps(tool, sort_keys=True), "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str):
        units.append((system, False))
    elif isinstance(system, list):
        units.extend((_block_text(b), isinstance(b, dict) and "cache_control" in b) for b in system)
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            units.append((content, False))
        else:
            units.extend(
                (_block_text(b), isinstance(b, dict) and "cache_control" in b)
                for b in content or []
            )
    return units


def _prompt_tokens(body: dict[str, Any]) -> int:
    return sum(_tokens(text) for text, _ in _units(body))


def _validate(body: dict[str, Any], *, need_max_tokens: bool) -> str | None:
    """Return what the real API would reject in `body` (a subset of its checks), or None."""
    if not body.get("model"):
        return "model: Field required"
    if need_max_tokens and not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return 'messages: first message must use the "user" role'
    previous_tool_ids: set[str] = set()
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if i and message.get("role") == messages[i - 1].get("role"):
            return f'messages.{i}: roles must alternate between "user" and "assistant"'
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message["role"] == "user":
            for block in blocks:
                if (
                    block.get("type") == "tool_result"
                    and block.get("tool_use_id") not in previous_tool_ids
                ):
                    return f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {block.get('tool_use_id')}"
        previous_tool_ids = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    return None


class FakeAnthropic:
    """The fake server. Use as a context manager, or `start()` / `stop()`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._queue: deque[Planned] = deque()
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._cached_prefixes: set[str] = set()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._released = threading.Event()
        self._thread: threading.Thread | None = None
        self._outage: Planned | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeAnthropic:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-anthropic", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; delayed responses in flight are abandoned at once."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def release(self) -> None:
        """Let a reply held by `hold_after_deltas` go on (and any held later)."""
        self._released.set()

    def enqueue(self, *plans: Planned | str) -> None:
        """Queue responses, served in order; a str is a plain text reply."""
        with self._lock:
            self._queue.extend(Planned.reply(p) if isinstance(p, str) else p for p in plans)

    def outage(self, plan: Planned | None) -> None:
        """Answer every message request with `plan` (an error) until called with None."""
        with self._lock:
            self._outage = plan

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def next_id(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}_fake{next(self._ids):06d}"

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _take(self, body: dict[str, Any]) -> Planned:
        with self._lock:
            if self._outage is not None:
                return self._outage
            if self._queue:
                return self._queue.popleft()
        return Planned.reply(_echo(body))

    def _usage(self, body: dict[str, Any], output_text: str) -> dict[str, int]:
        units = _units(body)
        sizes = [_tokens(t) for t, _ in units]
        marks = [i for i, (_, marked) in enumerate(units) if marked]
        read = write = 0
        if marks:
            keys = ["\x1e".join(t for t, _ in units[: i + 1]) for i in range(marks[-1] + 1)]
            with self._lock:
                # Like the API's lookback: the longest prefix cached by an earlier request is read.
                hit = max(
                    (i for i, key in enumerate(keys) if key in self._cached_prefixes), default=None
                )
                self._cached_prefixes.update(keys[m] for m in marks)
            if hit is not None:
                read = sum(sizes[: hit + 1])
            write = sum(sizes[: marks[-1] + 1]) - read
        return {
            "input_tokens": sum(sizes) - read - write,
            "output_tokens": max(1, _tokens(output_text)),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }

    def _message(self, body: dict[str, Any], plan: Planned) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if plan.text:
            content.append({"type": "text", "text": plan.text})
        for name, arguments in plan.tool_calls:
            content.append(
                {"type": "tool_use", "id": self.next_id("toolu"), "name": name, "input": arguments}
            )
        output_text = plan.text + "".join(json.dumps(a) for _, a in plan.tool_calls)
        usage = self._usage(body, output_text)
        if plan.usage:
            usage.update(plan.usage)
        return {
            "id": self.next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-fake"),
            "content": content,
            "stop_reason": plan.stop_reason or ("tool_use" if plan.tool_calls else "end_turn"),
            "stop_sequence": None,
            "usage": usage,
        }


def _echo(body: dict[str, Any]) -> str:
    """The default reply: a deterministic echo of the last user text (or tool result)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [content] if isinstance(content, str) else content or []
        text = " ".join(_block_text(b) for b in blocks).strip()
        if text:
            return f"Echo: {text[:500]}"
    return "Echo."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Serve a fake Anthropic Messages API on 127.0.0.1."
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (0 picks a free one)"
    )
    args = parser.parse_args(argv)
    fake = FakeAnthropic(port=args.port).start()
    print(fake.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
