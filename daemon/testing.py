"""Test doubles that are real code: scripted models and helpers used by the test suite.

`ScriptedModel` plays back responses (or computes them from the request, like a function
model) through the real provider interface, so tests exercise the real agent loop.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from daemon.models.base import (
    Block,
    Completed,
    ModelRequest,
    ModelResponse,
    StopReason,
    StreamEvent,
    TextBlock,
    TextDelta,
    ToolCallStarted,
    ToolUseBlock,
    Usage,
)


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One scripted model response: text, tool calls, or both."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    stop_reason: StopReason | None = None
    usage: Usage | None = None
    # Seconds before the first event: a slow (or hung) model, for timeouts and cancellation.
    wait_s: float = 0.0
    # Raised after the text's deltas instead of completing: a provider that breaks mid-stream.
    error: Exception | None = None


Script = Callable[[ModelRequest], Reply | str]


@dataclass
class ScriptedModel:
    """A provider whose answers come from a list of replies or a function of the request."""

    script: list[Reply | str] | Script
    delay_s: float = 0.0
    chunk_words: int = 1
    provider: str = "scripted"
    calls: list[ModelRequest] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def _next(self, request: ModelRequest) -> Reply:
        if callable(self.script):
            out = self.script(request)
        else:
            if not self.script:
                raise AssertionError("ScriptedModel ran out of scripted replies")
            out = self.script.pop(0)
        return Reply(text=out) if isinstance(out, str) else out

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls.append(request)
        reply = self._next(request)
        if reply.wait_s:
            await anyio.sleep(reply.wait_s)
        blocks: list[Block] = []
        if reply.text:
            words = reply.text.split(" ")
            for i in range(0, len(words), self.chunk_words):
                piece = " ".join(words[i : i + self.chunk_words])
                if i + self.chunk_words < len(words):
                    piece += " "
                if self.delay_s:
                    await anyio.sleep(self.delay_s)
                else:
                    await anyio.lowlevel.checkpoint()
                yield TextDelta(text=piece)
            blocks.append(TextBlock(text=reply.text))
        if reply.error is not None:
            raise reply.error
        for name, args in reply.tool_calls:
            call_id = f"toolu_scripted_{next(self._ids)}"
            yield ToolCallStarted(id=call_id, name=name)
            blocks.append(ToolUseBlock(id=call_id, name=name, input=args))
        stop: StopReason = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
        prompt_chars = sum(len(b.text) for b in request.system) + sum(
            len(getattr(b, "text", "") or getattr(b, "content", ""))
            for m in request.messages
            for b in m.content
        )
        usage = reply.usage or Usage(
            input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, len(reply.text) // 4)
        )
        yield Completed(
            response=ModelResponse(
                content=tuple(blocks),
                stop_reason=stop,
                usage=usage,
                model=request.model,
                provider=self.provider,
            )
        )

    async def count_tokens(self, request: ModelRequest) -> int | None:
        return None

    async def aclose(self) -> None:
        return None


def static_context(bus: Any, text: str = "You are a test agent.") -> Any:
    """Register a required `before_agent_start` handler that gives every turn a fixed system prompt.

    For tests of the loop, trunk and forks without the whole context assembler; returns the
    unsubscribe function.
    """
    from daemon.events import BeforeAgentStart, SystemNote

    def provide(event: BeforeAgentStart) -> SystemNote:
        return SystemNote(text=text, cache_breakpoint=True)

    return bus.on(BeforeAgentStart, provide, name="testing.static_context", required=True)
