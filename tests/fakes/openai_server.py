"""A scripted fake of an OpenAI-compatible chat endpoint (llama.cpp / Ollama / vLLM style).

Serves `POST /v1/chat/completions` with `stream: true` as server-sent `data:` chunks ending
in `data: [DONE]`, tool calls streamed as argument fragments, and a final usage chunk when
`stream_options.include_usage` is set. Scripted with the same `Planned` entries as the
Anthropic fake; usage keys here are `prompt_tokens`, `completion_tokens`, `cached_tokens`.
"""

from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.anthropic_server import Planned, RecordedRequest


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client hanging up is part of the script
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _data(self, payload: dict[str, Any] | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(f"data: {text}\n\n".encode())

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            body = None
        path = self.path.split("?", 1)[0]
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake._record(
            RecordedRequest(
                method="POST",
                path=path,
                headers=headers,
                body=body if isinstance(body, dict) else {},
            )
        )
        if path != "/v1/chat/completions":
            return self._send_json(
                404, {"error": {"message": f"no route for {path}", "type": "not_found"}}
            )
        if not isinstance(body, dict) or not body.get("messages"):
            return self._send_json(
                400,
                {"error": {"message": "'messages' is required", "type": "invalid_request_error"}},
            )
        plan = fake._take(body)
        if plan.delay_s and fake._stopping.wait(plan.delay_s):
            return None
        try:
            if plan.status != 200:
                payload = {
                    "error": {
                        "message": plan.error_message,
                        "type": plan.error_type or "server_error",
                    }
                }
                return self._send_json(plan.status, payload, plan.headers)
            self._stream(body, plan)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _stream(self, body: dict[str, Any], plan: Planned) -> None:
        fake = self.server.fake
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        cid = fake.next_id("chatcmpl")
        model = body.get("model", "local-model")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        self._data(chunk({"role": "assistant", "content": ""}))
        deltas = 0

        def dropped() -> bool:
            if plan.drop_after_deltas is not None and deltas >= plan.drop_after_deltas:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return True
            return False

        if dropped():
            return
        if plan.text:
            words = plan.text.split(" ")
            for i, word in enumerate(words):
                if plan.chunk_delay_s and fake._stopping.wait(plan.chunk_delay_s):
                    return
                self._data(chunk({"content": word if i == len(words) - 1 else word + " "}))
                deltas += 1
                if dropped():
                    return
        for index, (name, arguments) in enumerate(plan.tool_calls):
            encoded = json.dumps(arguments)
            first = {
                "index": index,
                "id": fake.next_id("call"),
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            self._data(chunk({"tool_calls": [first]}))
            for i in range(0, len(encoded), 5):
                self._data(
                    chunk(
                        {
                            "tool_calls": [
                                {"index": index, "function": {"arguments": encoded[i : i + 5]}}
                            ]
                        }
                    )
                )
        finish = plan.stop_reason or ("tool_calls" if plan.tool_calls else "stop")
        self._data(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            prompt = sum(_tokens(json.dumps(m)) for m in body["messages"])
            usage: dict[str, Any] = {
                "prompt_tokens": prompt,
                "completion_tokens": max(
                    1, _tokens(plan.text + json.dumps([a for _, a in plan.tool_calls]))
                ),
            }
            extra = dict(plan.usage or {})
            cached = extra.pop("cached_tokens", 0)
            usage.update(extra)
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
            self._data(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        self._data("[DONE]")
        self._chunk(b"")


class FakeOpenAI:
    """The fake server. Use as a context manager; `.url` is the base URL (ends in `/v1`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._queue: deque[Planned] = deque()
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def enqueue(self, *plans: Planned | str) -> None:
        with self._lock:
            self._queue.extend(Planned.reply(p) if isinstance(p, str) else p for p in plans)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def next_id(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}_fake{next(self._ids):06d}"

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _take(self, body: dict[str, Any]) -> Planned:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        last: dict[str, Any] = next(
            (m for m in reversed(body["messages"]) if m.get("role") in ("user", "tool")), {}
        )
        return Planned.reply(f"Echo: {str(last.get('content') or '')[:500]}")
