"""The provider interface every model role goes through.

A provider turns a `ModelRequest` into a stream of `StreamEvent`s ending in exactly one
`Completed` carrying the whole `ModelResponse` (content blocks, stop reason, usage).
Providers own their retries; when they give up they raise `ModelUnavailable`, which the
agent loop reports to the person while the message stays queued.

`task` tells what the call is for. Real providers ignore it; the offline provider uses it
to behave sensibly with no network. The *message formats* for the memory tasks are part of
this contract (the summariser and recall build them; the offline provider reads them):

- ``task="summarise"`` — the last user message holds the transcript between the lines
  ``<<<TRANSCRIPT`` and ``TRANSCRIPT>>>`` (one ``[role] text`` per line), then, when tools
  were called, a labelled ``<<<WORK`` … ``WORK>>>`` block (one ``- <what a tool did>`` per
  line). The reply is a JSON object ``{"title": str, "slug": "kebab-case-keywords", "tags":
  [str], "summary": str, "decisions": [str]}``.
- ``task="plan_recall"`` — the last user message holds ``QUERY: <text>`` then a line
  ``INDEX:`` followed by one ``<id> | <slug> | <snippet>`` line per candidate. The reply is a
  JSON object ``{"ids": [str, ...]}`` (possibly empty).
- ``task="synthesise"`` — the last user message holds ``QUESTION: <text>`` then ``SOURCES:``
  followed by blocks that start with ``[<cite>]``. The reply is the answer text, citing
  sources as ``[<cite>]``.
- ``task="journal"`` — the last user message holds a stretch of transcript between the lines
  ``<<<TRANSCRIPT`` and ``TRANSCRIPT>>>`` (``[user]``/``[assistant]`` text), then, when tools
  were called, a ``<<<WORK`` … ``WORK>>>`` block as for ``summarise``. The reply is a JSON object
  ``{"summary": str, "decisions": [str], "progress": [str], "open_questions": [str],
  "files_touched": [str], "tags": [str]}``.
- ``task="wake"`` — the last user message holds ``DATE:``, ``LIMIT: <n> tokens``, ``SUMMARY:``
  (the session summary), ``DECISIONS:`` (one ``- item`` per line), ``MEMORIES:`` (one
  ``[<id>] (<origin>) <text>`` per line), ``JOURNAL:`` (the newest journal digest: ``- open: <question>``
  and ``- <date> <time>: <entry summary>`` lines) and ``TRANSCRIPT:`` (one ``[role] text`` per line), each
  on a line of its own. The reply is the markdown of `WAKE.md`.
- ``task="chat"`` — ordinary conversation with tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from daemon.errors import ReverieError
from daemon.seams import Model as Model

Task = Literal[
    "chat", "summarise", "plan_recall", "synthesise", "dream", "journal", "delegate", "wake"
]
StopReason = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "cancelled", "error"
]


@dataclass(frozen=True, kw_only=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, kw_only=True)
class ToolUseBlock:
    id: str
    name: str
    input: dict[str, Any]
    type: Literal["tool_use"] = "tool_use"


@dataclass(frozen=True, kw_only=True)
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"


Block = TextBlock | ToolUseBlock | ToolResultBlock


@dataclass(frozen=True, kw_only=True)
class Message:
    role: Literal["user", "assistant"]
    content: tuple[Block, ...]

    @staticmethod
    def user(text: str) -> Message:
        return Message(role="user", content=(TextBlock(text=text),))

    @staticmethod
    def assistant(text: str) -> Message:
        return Message(role="assistant", content=(TextBlock(text=text),))

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


@dataclass(frozen=True, kw_only=True)
class SystemBlock:
    """A piece of the system prompt. `cache_breakpoint` marks the end of the stable prefix."""

    text: str
    cache_breakpoint: bool = False


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """Everything the model read: fresh input plus cache reads and writes."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    model: str
    messages: tuple[Message, ...]
    system: tuple[SystemBlock, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    temperature: float | None = None
    task: Task = "chat"
    role: str = "trunk"
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    content: tuple[Block, ...]
    stop_reason: StopReason
    usage: Usage
    model: str
    provider: str

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]


@dataclass(frozen=True, kw_only=True)
class TextDelta:
    text: str


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted:
    id: str
    name: str


@dataclass(frozen=True, kw_only=True)
class Completed:
    response: ModelResponse


StreamEvent = TextDelta | ToolCallStarted | Completed


class ModelError(ReverieError):
    """A model call failed. `retryable` says whether trying again later may help."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class ModelUnavailable(ModelError):
    """The provider stayed unreachable after retries (outage, overload, network down)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, retryable=True, status=status)


class SpendCapReached(ModelError):
    """Today's spend cap forbids this call."""


async def complete(model: Model, request: ModelRequest) -> ModelResponse:
    """Run `request` to completion and return the response (no streaming to a client)."""
    final: ModelResponse | None = None
    async for event in model.stream(request):
        if isinstance(event, Completed):
            final = event.response
    if final is None:
        raise ModelError(f"{model.provider} stream ended without a completed response")
    return final
