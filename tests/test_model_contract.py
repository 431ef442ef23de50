"""One contract suite for every `Model` implementation.

Anthropic and OpenAI-compatible run against their loopback fakes; the offline provider and
`ScriptedModel` run as they are. Each harness arranges "a text reply", "a tool call, then a
final answer" and "a long, slow reply" in its own way; the assertions are shared.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from daemon.models.anthropic import AnthropicModel
from daemon.models.base import (
    Completed,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    SystemBlock,
    TextBlock,
    TextDelta,
    ToolCallStarted,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from daemon.models.offline import OfflineModel
from daemon.models.openai_compat import OpenAICompatModel
from daemon.settings import AnthropicSettings, OpenAISettings
from daemon.testing import Reply, ScriptedModel
from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.fakes.openai_server import FakeOpenAI

REMEMBER = ToolSpec(
    name="remember",
    description="Store one fact.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
)
FACT = "the cat is called Miso"
LONG = " ".join(f"word{i}" for i in range(400))


@dataclass
class Harness:
    """A model under test plus the means to script its next replies."""

    model: Model
    plan_text: Callable[[], str]  # arranges a text reply; returns the user message to send
    plan_tool_loop: Callable[[], str]  # arranges a remember call then a text answer
    plan_slow: Callable[[], str]  # arranges a long reply that streams slowly
    closers: list[Callable[[], Any]] = field(default_factory=list)


def _scripted() -> Harness:
    script: list[Reply | str] = []
    model = ScriptedModel(script, delay_s=0.0)

    def slow() -> str:
        model.delay_s = 0.05
        script.append(LONG)
        return "tell me a long story"

    def text() -> str:
        model.delay_s = 0.0
        script.append("A short scripted answer.")
        return "hello"

    def loop() -> str:
        model.delay_s = 0.0
        script.extend([Reply(tool_calls=(("remember", {"text": FACT}),)), "Stored it."])
        return f"remember that {FACT}"

    return Harness(model=model, plan_text=text, plan_tool_loop=loop, plan_slow=slow)


def _offline() -> Harness:
    return Harness(
        model=OfflineModel(),
        plan_text=lambda: "hello there, how are you?",
        plan_tool_loop=lambda: f"remember that {FACT}",
        plan_slow=lambda: "hello " + LONG,
    )


def _anthropic() -> Harness:
    fake = FakeAnthropic().start()
    settings = AnthropicSettings(
        base_url=fake.url, max_retries=1, backoff_base_s=0.001, timeout_s=5.0
    )
    model = AnthropicModel(settings, "sk-test")

    def text() -> str:
        fake.enqueue("A short answer from the fake.")
        return "hello"

    def loop() -> str:
        fake.enqueue(Planned.tool("remember", {"text": FACT}), "Stored it.")
        return f"remember that {FACT}"

    def slow() -> str:
        fake.enqueue(Planned(text=LONG, chunk_delay_s=0.05))
        return "tell me a long story"

    return Harness(
        model=model, plan_text=text, plan_tool_loop=loop, plan_slow=slow, closers=[fake.stop]
    )


def _openai() -> Harness:
    fake = FakeOpenAI().__enter__()
    settings = OpenAISettings(base_url=fake.url, max_retries=1, backoff_base_s=0.001, timeout_s=5.0)
    model = OpenAICompatModel(settings, None)

    def text() -> str:
        fake.enqueue("A short answer from the local model.")
        return "hello"

    def loop() -> str:
        fake.enqueue(Planned.tool("remember", {"text": FACT}), "Stored it.")
        return f"remember that {FACT}"

    def slow() -> str:
        fake.enqueue(Planned(text=LONG, chunk_delay_s=0.05))
        return "tell me a long story"

    return Harness(
        model=model,
        plan_text=text,
        plan_tool_loop=loop,
        plan_slow=slow,
        closers=[lambda: fake.__exit__(None, None, None)],
    )


@pytest.fixture(params=["anthropic", "openai", "offline", "scripted"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    built = {
        "anthropic": _anthropic,
        "openai": _openai,
        "offline": _offline,
        "scripted": _scripted,
    }[request.param]()
    try:
        yield built
    finally:
        with anyio.fail_after(5):
            await built.model.aclose()
        for close in built.closers:
            close()


def _request(
    text: str, messages: tuple[Message, ...] = (), tools: tuple[ToolSpec, ...] = (REMEMBER,)
) -> ModelRequest:
    return ModelRequest(
        model="claude-haiku-4-5",
        system=(SystemBlock(text="You are Reverie.", cache_breakpoint=True),),
        messages=messages or (Message.user(text),),
        tools=tools,
    )


async def _collect(model: Model, request: ModelRequest) -> tuple[list[StreamEvent], ModelResponse]:
    events: list[StreamEvent] = []
    with anyio.fail_after(10):
        async for event in model.stream(request):
            events.append(event)
    return events, _completed(events)


def _completed(events: list[StreamEvent]) -> ModelResponse:
    assert events, "a stream must yield at least its Completed event"
    assert isinstance(events[-1], Completed), "the last event is Completed"
    assert sum(isinstance(e, Completed) for e in events) == 1, "exactly one Completed"
    return events[-1].response


def _check_usage(response: ModelResponse) -> None:
    usage = response.usage
    assert (
        min(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        )
        >= 0
    )
    assert usage.prompt_tokens > 0 and usage.output_tokens > 0


@pytest.mark.anyio
async def test_text_deltas_concatenate_to_the_response(harness: Harness) -> None:
    events, response = await _collect(harness.model, _request(harness.plan_text()))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas and "".join(deltas) == response.text
    assert response.stop_reason == "end_turn" and not response.tool_calls
    assert response.provider == harness.model.provider
    _check_usage(response)


@pytest.mark.anyio
async def test_tool_calls_round_trip_through_tool_results(harness: Harness) -> None:
    said = harness.plan_tool_loop()
    events, first = await _collect(harness.model, _request(said))
    assert first.stop_reason == "tool_use"
    (call,) = first.tool_calls
    assert call.name == "remember" and call.input["text"] == FACT and call.id
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    assert started == [ToolCallStarted(id=call.id, name="remember")]
    assert all(isinstance(b, TextBlock | ToolUseBlock) for b in first.content)
    _check_usage(first)
    messages = (
        Message.user(said),
        Message(role="assistant", content=first.content),
        Message(
            role="user", content=(ToolResultBlock(tool_use_id=call.id, content="stored as fact:1"),)
        ),
    )
    _, second = await _collect(harness.model, _request(said, messages))
    assert second.stop_reason == "end_turn" and not second.tool_calls and second.text
    _check_usage(second)


@pytest.mark.anyio
async def test_cancellation_mid_stream_is_prompt_and_leaves_no_task(harness: Harness) -> None:
    tasks_before = set(asyncio.all_tasks())
    request = _request(harness.plan_slow(), tools=())
    seen: list[StreamEvent] = []
    cancelled_at = 0.0
    with anyio.fail_after(5):
        with anyio.CancelScope() as scope:
            async for event in harness.model.stream(request):
                seen.append(event)
                if isinstance(event, TextDelta):
                    cancelled_at = anyio.current_time()
                    scope.cancel()
        unwound_after = anyio.current_time() - cancelled_at
    assert scope.cancelled_caught
    assert len([e for e in seen if isinstance(e, TextDelta)]) == 1
    assert not any(isinstance(e, Completed) for e in seen)
    assert unwound_after < 1.0
    await anyio.sleep(0.05)
    assert set(asyncio.all_tasks()) <= tasks_before
    # The provider is still usable after a cancelled call.
    _, response = await _collect(harness.model, _request(harness.plan_text()))
    assert response.text


@pytest.mark.anyio
async def test_a_caller_stopping_early_releases_the_stream(harness: Harness) -> None:
    tasks_before = set(asyncio.all_tasks())
    request = _request(harness.plan_slow(), tools=())
    with anyio.fail_after(5):
        stream = harness.model.stream(request)
        assert isinstance(stream, AsyncGenerator), "a stream must be closable by its caller"
        async with aclosing(stream) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    break
    await anyio.sleep(0.05)
    assert set(asyncio.all_tasks()) <= tasks_before
    _, response = await _collect(harness.model, _request(harness.plan_text()))
    assert response.text
