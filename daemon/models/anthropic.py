"""The Anthropic provider: the official SDK's async client, streamed, with our own retries.

The SDK's own retries are off (`max_retries=0`) because a retry must know what the caller
has already seen: a stream that fails before delivering anything is retried with
exponential backoff and full jitter (honouring `retry-after`), but once text has reached
the caller a restart would repeat it, so the failure is raised as a retryable `ModelError`
for the caller to decide.

Prompt caching: system blocks marked `cache_breakpoint` get `cache_control` (the stable
layers come first, so the prefix up to the mark is identical turn over turn), and the last
message carries one too, so the whole conversation prefix is cached for the next turn.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import anthropic
import anyio
import httpx2

from daemon.log import get_logger
from daemon.models.base import (
    Block,
    Completed,
    Message,
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
from daemon.settings import AnthropicSettings

log = get_logger("models.anthropic")

try:
    from anthropic.resources.messages.messages import DEPRECATED_MODELS as _SDK_DEPRECATED

    _DEPRECATED_MODELS: dict[str, str] = dict(_SDK_DEPRECATED)
except ImportError:  # the table moved in another SDK version; only the warning is lost
    _DEPRECATED_MODELS = {}

# The API accepts at most four cache breakpoints; one is kept for the conversation prefix.
_MAX_SYSTEM_BREAKPOINTS = 3
_RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
_RETRYABLE_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "pause_turn": "end_turn",
    "model_context_window_exceeded": "max_tokens",
}
_TYPE_WORDS = {
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate limited",
    "api_error": "server error",
    "timeout_error": "server timeout",
}


def to_wire_system(request: ModelRequest, *, caching: bool) -> list[dict[str, Any]]:
    """Map system blocks to API text blocks, with `cache_control` on the breakpoints."""
    blocks: list[dict[str, Any]] = []
    marks: list[int] = []
    for block in request.system:
        if block.text.strip():
            blocks.append({"type": "text", "text": block.text})
        # An empty block cannot be sent; its breakpoint moves to the block before it.
        if (
            caching
            and block.cache_breakpoint
            and blocks
            and (not marks or marks[-1] != len(blocks) - 1)
        ):
            marks.append(len(blocks) - 1)
    for index in marks[-_MAX_SYSTEM_BREAKPOINTS:]:
        blocks[index]["cache_control"] = {"type": "ephemeral"}
    return blocks


def _wire_block(block: Block) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
        }
        if block.is_error:
            out["is_error"] = True
        return out
    raise TypeError(f"unknown content block {block!r}")


def to_wire_messages(messages: tuple[Message, ...], *, caching: bool) -> list[dict[str, Any]]:
    """Map messages to the API format: empty text dropped, same-role neighbours merged."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        blocks = [b for b in (_wire_block(x) for x in message.content) if b is not None]
        if wire and wire[-1]["role"] == message.role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": message.role, "content": blocks})
    for turn in wire:
        if not turn["content"]:
            # The API rejects empty turns; keep the turn (roles must alternate) and say so.
            turn["content"] = [{"type": "text", "text": "(empty)"}]
    if caching and wire:
        wire[-1]["content"][-1] = dict(wire[-1]["content"][-1], cache_control={"type": "ephemeral"})
    return wire


def _classify(err: Exception, settings: AnthropicSettings) -> AttemptFailed:
    if isinstance(err, AttemptFailed):
        return err
    if isinstance(err, anthropic.APIStatusError):
        status = err.status_code
        kind = err.type or ""
        if kind == "overloaded_error":
            status = 529  # an overload reported inside a 200 stream
        elif status == 200 and kind in _RETRYABLE_TYPES:
            status = 500
        words = _TYPE_WORDS.get(kind) or (err.api_message or err.message)
        retryable = status in _RETRYABLE_STATUS or status >= 500 or kind in _RETRYABLE_TYPES
        if not retryable:
            detail = err.api_message or err.message
            return AttemptFailed(
                reason=f"{status} {kind or 'error'}: {detail}", retryable=False, status=status
            )
        return AttemptFailed(
            reason=f"{status} {words}",
            retryable=True,
            status=status,
            retry_after=retry_after_seconds(err.response.headers),
        )
    if isinstance(err, anthropic.APITimeoutError | httpx2.TimeoutException):
        return AttemptFailed(
            reason=f"no response within {settings.timeout_s:g}s (timeout)", retryable=True
        )
    if isinstance(err, anthropic.APIConnectionError | httpx2.TransportError):
        cause = err.__cause__ or err
        return AttemptFailed(
            reason=f"connection failed ({type(cause).__name__}: {cause})", retryable=True
        )
    # Anything else from the SDK (an unreadable response, say) is reported, not retried.
    return AttemptFailed(reason=f"{type(err).__name__}: {err}", retryable=False)


class AnthropicModel:
    """Claude through the official SDK. Owns its HTTP client unless one is passed in.

    `http_client` must be an `httpx2.AsyncClient` (the transport the SDK is built on); when
    given, the caller owns it and `aclose()` leaves it open.
    """

    provider = "anthropic"

    def __init__(
        self,
        settings: AnthropicSettings,
        api_key: str,
        *,
        http_client: httpx2.AsyncClient | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not api_key:
            raise ModelError(f"the Anthropic provider needs an API key in ${settings.api_key_env}")
        self.settings = settings
        self._owns_http = http_client is None
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=settings.base_url,
            max_retries=0,
            timeout=httpx2.Timeout(settings.timeout_s, connect=settings.connect_timeout_s),
            http_client=http_client,
        )
        self._backoff = Backoff(settings.backoff_base_s, settings.backoff_max_s, rng)
        self._closed = False
        self._warned_models: set[str] = set()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- request mapping --------------------------------------------------------------

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for `messages.create`, in wire format."""
        caching = self.settings.prompt_caching
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": to_wire_messages(request.messages, caching=caching),
        }
        system = to_wire_system(request, caching=caching)
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1`: the server's word, else full jitter."""
        return self._backoff.delay(attempt, retry_after)

    # -- the Model protocol ------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response, retrying failures that happen before anything was delivered.

        Raises `ModelUnavailable` once `max_retries` retries failed (outage, overload,
        timeouts: `timeout_s` bounds each wait for the next byte, `connect_timeout_s` the
        connect), `ModelError(retryable=True)` when the stream broke after events reached
        the caller, and `ModelError(retryable=False)` for requests the API rejects
        (400/401/403/404). On cancellation the HTTP stream is closed and the cancellation
        propagates.
        """
        if self._closed:
            raise ModelError("the Anthropic provider was closed; build a new one")
        params = self.params(request)
        events = retrying_stream(
            lambda: self._attempt(params, request),
            attempts=self.settings.max_retries + 1,
            classify=lambda err: (
                _classify(err, self.settings)
                if isinstance(err, anthropic.APIError | httpx2.TransportError)
                else None
            ),
            delay=self.backoff,
            name="Anthropic API",
            role=request.role,
        )
        async with aclosing(events):
            async for event in events:
                yield event

    async def _attempt(
        self, params: dict[str, Any], request: ModelRequest
    ) -> AsyncGenerator[StreamEvent, None]:
        """One streamed call, mapped to our events; failures raise, the stream is always closed."""
        self._warn_if_deprecated(request)
        with warnings.catch_warnings():
            # Said once, in our log, with the setting to change (see `_warn_if_deprecated`).
            warnings.filterwarnings(
                "ignore", message=r"The model .* is deprecated", category=DeprecationWarning
            )
            sdk_stream = await self._client.messages.create(**params, stream=True)
        usage = Usage()
        model = request.model
        blocks: dict[int, Block] = {}
        pending_json: dict[int, list[str]] = {}
        texts: dict[int, list[str]] = {}
        stop: StopReason = "end_turn"
        finished = False
        try:
            async for event in sdk_stream:
                kind = event.type
                if kind == "message_start":
                    model = event.message.model or model
                    usage = _usage_from(event.message.usage, usage)
                elif kind == "content_block_start":
                    block = event.content_block
                    if block.type == "text":
                        texts[event.index] = [block.text or ""]
                    elif block.type == "tool_use":
                        blocks[event.index] = ToolUseBlock(id=block.id, name=block.name, input={})
                        pending_json[event.index] = []
                        yield ToolCallStarted(id=block.id, name=block.name)
                elif kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta" and event.index in texts:
                        texts[event.index].append(delta.text)
                        if delta.text:
                            yield TextDelta(text=delta.text)
                    elif delta.type == "input_json_delta" and event.index in pending_json:
                        pending_json[event.index].append(delta.partial_json)
                elif kind == "content_block_stop":
                    if event.index in texts:
                        blocks[event.index] = TextBlock(text="".join(texts.pop(event.index)))
                    elif event.index in pending_json:
                        blocks[event.index] = _finish_tool(
                            blocks[event.index], pending_json.pop(event.index)
                        )
                elif kind == "message_delta":
                    stop = _STOP_REASONS.get(event.delta.stop_reason or "end_turn", "end_turn")
                    usage = _usage_from(event.usage, usage)
                elif kind == "message_stop":
                    finished = True
                    break
        finally:
            with anyio.CancelScope(shield=True):
                await sdk_stream.close()
        if not finished:
            raise AttemptFailed(
                reason="connection dropped before the message was complete", retryable=True
            )
        content = tuple(
            b for _, b in sorted(blocks.items()) if not (isinstance(b, TextBlock) and not b.text)
        )
        response = ModelResponse(
            content=content, stop_reason=stop, usage=usage, model=model, provider=self.provider
        )
        log.debug(
            "anthropic call done",
            role=request.role,
            model=model,
            stop_reason=stop,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )
        yield Completed(response=response)

    def _warn_if_deprecated(self, request: ModelRequest) -> None:
        end_of_life = _DEPRECATED_MODELS.get(request.model)
        if end_of_life and request.model not in self._warned_models:
            self._warned_models.add(request.model)
            log.warning(
                "configured Anthropic model is deprecated; set a newer one in [models.<role>].model",
                model=request.model,
                role=request.role,
                end_of_life=end_of_life,
            )

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """Exact prompt tokens through the count endpoint when enabled, else None.

        A failed count returns None (callers fall back to estimates); cancellation propagates.
        """
        if not self.settings.exact_token_counts or self._closed:
            return None
        params = self.params(request)
        params.pop("max_tokens", None)
        params.pop("temperature", None)
        try:
            result = await self._client.messages.count_tokens(**params)
        except (anthropic.APIError, httpx2.TransportError) as err:
            log.warning("anthropic token count failed; using an estimate", error=str(err))
            return None
        return int(result.input_tokens)

    async def aclose(self) -> None:
        """Close the SDK client (and its HTTP client, when this provider created it)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_http:
            with anyio.CancelScope(shield=True):
                await self._client.close()


def _usage_from(raw: Any, previous: Usage) -> Usage:
    """Merge an SDK usage object into `previous`; fields the event leaves out keep their value."""

    def pick(name: str, current: int) -> int:
        value = getattr(raw, name, None)
        return int(value) if value is not None else current

    return Usage(
        input_tokens=pick("input_tokens", previous.input_tokens),
        output_tokens=pick("output_tokens", previous.output_tokens),
        cache_read_tokens=pick("cache_read_input_tokens", previous.cache_read_tokens),
        cache_write_tokens=pick("cache_creation_input_tokens", previous.cache_write_tokens),
    )


def _finish_tool(block: Block, parts: list[str]) -> ToolUseBlock:
    assert isinstance(block, ToolUseBlock)
    raw = "".join(parts).strip() or "{}"
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise AttemptFailed(
            reason=f"tool call {block.name} arrived with malformed JSON input ({exc})",
            retryable=True,
        ) from None
    if not isinstance(arguments, dict):
        arguments = {"value": arguments}
    return ToolUseBlock(id=block.id, name=block.name, input=arguments)
