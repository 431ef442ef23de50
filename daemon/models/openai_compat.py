"""Any OpenAI-compatible chat endpoint (llama.cpp server, Ollama, vLLM) by base URL.

Streams `{base_url}/chat/completions` over server-sent events, accumulates tool calls from
their deltas, and reads usage from the final chunk (`stream_options.include_usage`; servers
that ignore it leave usage at zero). Retries follow the Anthropic provider's rule: a
failure before anything reached the caller is retried with backoff, one after raises.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import httpx

from daemon.log import get_logger
from daemon.models.base import (
    Block,
    Completed,
    ModelError,
    ModelRequest,
    ModelResponse,
    StopReason,
    StreamEvent,
    TextBlock,
    TextDelta,
    ToolCallStarted,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from daemon.models.retry import AttemptFailed, Backoff, retry_after_seconds, retrying_stream
from daemon.settings import OpenAISettings

log = get_logger("models.openai")

_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_FINISH: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def to_wire_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Map a request to chat messages: one system message, tool results as `tool` messages."""
    wire: list[dict[str, Any]] = []
    system = "\n\n".join(b.text for b in request.system if b.text.strip())
    if system:
        wire.append({"role": "system", "content": system})
    for message in request.messages:
        text = message.text
        if message.role == "assistant":
            calls = [b for b in message.content if isinstance(b, ToolUseBlock)]
            turn: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                turn["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.input)},
                    }
                    for c in calls
                ]
            elif not text:
                turn["content"] = ""
            wire.append(turn)
            continue
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                content = f"error: {block.content}" if block.is_error else block.content
                wire.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        if text or not any(isinstance(b, ToolResultBlock) for b in message.content):
            wire.append({"role": "user", "content": text})
    return wire


def _error_detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(error, str):
        return error
    return str(body)[:300]


class OpenAICompatModel:
    """A chat model behind an OpenAI-compatible HTTP API. Owns its HTTP client unless given one."""

    provider = "openai"

    def __init__(
        self,
        settings: OpenAISettings,
        api_key: str | None,
        *,
        http_client: httpx.AsyncClient | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._url = settings.base_url.rstrip("/") + "/chat/completions"
        self._headers = {"accept": "text/event-stream", "content-type": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s)
        )
        self._backoff = Backoff(settings.backoff_base_s, settings.backoff_max_s, rng)
        self._closed = False

    async def __aenter__(self) -> OpenAICompatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for one streamed chat completion."""
        body: dict[str, Any] = {
            "model": request.model,
            "messages": to_wire_messages(request),
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response, retrying failures that happen before anything was delivered.

        `timeout_s` bounds each wait for the next byte. Raises `ModelUnavailable` once
        `max_retries` retries failed, `ModelError(retryable=True)` when the stream broke
        after events reached the caller, `ModelError(retryable=False)` when the server
        rejects the request. On cancellation the HTTP stream is closed and the
        cancellation propagates.
        """
        if self._closed:
            raise ModelError("the OpenAI-compatible provider was closed; build a new one")
        body = self.body(request)
        events = retrying_stream(
            lambda: self._attempt(body, request),
            attempts=self.settings.max_retries + 1,
            classify=self._classify,
            delay=self._backoff.delay,
            name=f"model endpoint {self.settings.base_url}",
            role=request.role,
        )
        async with aclosing(events):
            async for event in events:
                yield event

    def _classify(self, err: Exception) -> AttemptFailed | None:
        if isinstance(err, httpx.TimeoutException):
            return AttemptFailed(
                reason=f"no response within {self.settings.timeout_s:g}s (timeout)", retryable=True
            )
        if isinstance(err, httpx.TransportError):
            return AttemptFailed(
                reason=f"connection failed ({type(err).__name__}: {err})", retryable=True
            )
        return None

    async def _attempt(
        self, body: dict[str, Any], request: ModelRequest
    ) -> AsyncGenerator[StreamEvent, None]:
        """One streamed call, mapped to our events; failures raise, the response is always closed."""
        http_request = self._http.build_request("POST", self._url, json=body, headers=self._headers)
        response = await self._http.send(http_request, stream=True)
        state = _Accumulator(request.model)
        try:
            if response.status_code >= 400:
                await response.aread()
                status = response.status_code
                raise AttemptFailed(
                    reason=f"{status} {_error_detail(response)}",
                    retryable=status in _RETRYABLE_STATUS or status >= 500,
                    status=status,
                    retry_after=retry_after_seconds(response.headers),
                )
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # comments, `event:` lines and keep-alives
                data = line[5:].strip()
                if data == "[DONE]":
                    state.done = True
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    raise AttemptFailed(
                        reason=f"malformed stream chunk {data[:80]!r}", retryable=True
                    ) from None
                for event in state.feed(chunk):
                    yield event
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
        if not (state.done or state.finish is not None):
            raise AttemptFailed(
                reason="connection dropped before the reply was complete", retryable=True
            )
        yield Completed(response=state.response(self.provider))

    async def count_tokens(self, request: ModelRequest) -> int | None:
        return None  # the OpenAI API has no portable count endpoint

    async def aclose(self) -> None:
        """Close the HTTP client when this provider created it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_http:
            with anyio.CancelScope(shield=True):
                await self._http.aclose()


class _Accumulator:
    """Builds the response from stream chunks; yields events as they become known."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage = Usage()
        self.done = False

    def feed(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        if isinstance(chunk.get("error"), dict | str):
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise AttemptFailed(reason=f"server error in stream: {message}", retryable=True)
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), dict):
            raw = chunk["usage"]
            cached = int((raw.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            self.usage = Usage(
                input_tokens=max(0, int(raw.get("prompt_tokens") or 0) - cached),
                output_tokens=int(raw.get("completion_tokens") or 0),
                cache_read_tokens=cached,
            )
        events: list[StreamEvent] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
                events.append(TextDelta(text=delta["content"]))
            for call in delta.get("tool_calls") or []:
                index = int(call.get("index", len(self.calls)))
                slot = self.calls.setdefault(
                    index, {"id": None, "name": "", "arguments": [], "announced": False}
                )
                function = call.get("function") or {}
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] += function.get("name") or ""
                slot["arguments"].append(function.get("arguments") or "")
                if not slot["announced"] and slot["name"]:
                    slot["announced"] = True
                    slot["id"] = slot["id"] or f"call_{index}"
                    events.append(ToolCallStarted(id=slot["id"], name=slot["name"]))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return events

    def response(self, provider: str) -> ModelResponse:
        blocks: list[Block] = []
        if self.text:
            blocks.append(TextBlock(text="".join(self.text)))
        for index in sorted(self.calls):
            slot = self.calls[index]
            raw = "".join(slot["arguments"]).strip() or "{}"
            try:
                arguments = json.loads(raw)
            except json.JSONDecodeError:
                # Local models do emit broken JSON; pass it on so the tool reports it to the model.
                arguments = {"_unparsed_arguments": raw}
            if not isinstance(arguments, dict):
                arguments = {"value": arguments}
            blocks.append(
                ToolUseBlock(id=slot["id"] or f"call_{index}", name=slot["name"], input=arguments)
            )
        stop = _FINISH.get(self.finish or "stop", "end_turn")
        if self.calls and stop == "end_turn":
            stop = "tool_use"  # some servers say "stop" even when they called a tool
        return ModelResponse(
            content=tuple(blocks),
            stop_reason=stop,
            usage=self.usage,
            model=self.model,
            provider=provider,
        )
