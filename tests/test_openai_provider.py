"""The OpenAI-compatible provider against a fake SSE chat endpoint on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from daemon.models.base import (
    Completed,
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    StreamEvent,
    SystemBlock,
    TextDelta,
    ToolCallStarted,
    ToolResultBlock,
    ToolSpec,
)
from daemon.models.openai_compat import OpenAICompatModel
from daemon.settings import OpenAISettings
from tests.fakes.anthropic_server import Planned
from tests.fakes.openai_server import FakeOpenAI

RECALL = ToolSpec(
    name="recall",
    description="Search memory.",
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def settings_for(fake: FakeOpenAI, **kw: object) -> OpenAISettings:
    base: dict[str, object] = {
        "base_url": fake.url,
        "max_retries": 2,
        "backoff_base_s": 0.001,
        "backoff_max_s": 0.01,
        "timeout_s": 5.0,
    }
    base.update(kw)
    return OpenAISettings.model_validate(base)


async def collect(
    model: OpenAICompatModel, request: ModelRequest
) -> tuple[list[StreamEvent], ModelResponse]:
    events: list[StreamEvent] = []
    with anyio.fail_after(10):
        async for event in model.stream(request):
            events.append(event)
    assert isinstance(events[-1], Completed)
    assert sum(isinstance(e, Completed) for e in events) == 1
    return events, events[-1].response


def chat(text: str = "hello") -> ModelRequest:
    return ModelRequest(model="llama-3.1-8b", messages=(Message.user(text),))


@pytest.mark.anyio
async def test_streams_text_and_reads_usage(fake: FakeOpenAI) -> None:
    fake.enqueue(
        Planned.reply(
            "Local models are fun",
            usage={"prompt_tokens": 40, "completion_tokens": 5, "cached_tokens": 30},
        )
    )
    request = ModelRequest(
        model="llama-3.1-8b",
        system=(
            SystemBlock(text="You are Reverie.", cache_breakpoint=True),
            SystemBlock(text="Profile: likes tea."),
        ),
        messages=(Message.user("hi"),),
        temperature=0.2,
    )
    async with OpenAICompatModel(settings_for(fake), "sk-local") as model:
        events, response = await collect(model, request)
    assert [e.text for e in events if isinstance(e, TextDelta)] == [
        "Local ",
        "models ",
        "are ",
        "fun",
    ]
    assert response.text == "Local models are fun" and response.stop_reason == "end_turn"
    assert (
        response.usage.input_tokens,
        response.usage.cache_read_tokens,
        response.usage.output_tokens,
    ) == (10, 30, 5)
    assert response.provider == "openai" and response.model == "llama-3.1-8b"
    (sent,) = fake.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-local"
    assert sent.body["stream"] is True and sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["messages"][0] == {
        "role": "system",
        "content": "You are Reverie.\n\nProfile: likes tea.",
    }
    assert sent.body["temperature"] == 0.2


@pytest.mark.anyio
async def test_tool_calls_accumulate_and_round_trip(fake: FakeOpenAI) -> None:
    fake.enqueue(
        Planned.tool("recall", {"query": "the garden plan for spring"}),
        Planned.reply("The tomatoes go by the fence."),
    )
    async with OpenAICompatModel(settings_for(fake), None) as model:
        events, first = await collect(
            model,
            ModelRequest(
                model="m", messages=(Message.user("what about the garden?"),), tools=(RECALL,)
            ),
        )
        (call,) = first.tool_calls
        assert (call.name, call.input) == ("recall", {"query": "the garden plan for spring"})
        assert first.stop_reason == "tool_use"
        assert ToolCallStarted(id=call.id, name="recall") in events
        follow_up = ModelRequest(
            model="m",
            tools=(RECALL,),
            messages=(
                Message.user("what about the garden?"),
                Message(role="assistant", content=first.content),
                Message(
                    role="user",
                    content=(
                        ToolResultBlock(tool_use_id=call.id, content="tomatoes by the fence"),
                    ),
                ),
            ),
        )
        _, final = await collect(model, follow_up)
    assert final.text == "The tomatoes go by the fence."
    first_sent, second_sent = fake.requests
    assert "authorization" not in first_sent.headers
    assert first_sent.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "recall",
                "description": "Search memory.",
                "parameters": RECALL.input_schema,
            },
        }
    ]
    assistant, tool = second_sent.body["messages"][1:]
    assert assistant["tool_calls"][0]["id"] == call.id
    assert assistant["tool_calls"][0]["function"]["name"] == "recall"
    assert tool == {"role": "tool", "tool_call_id": call.id, "content": "tomatoes by the fence"}


@pytest.mark.anyio
async def test_retries_then_succeeds(fake: FakeOpenAI) -> None:
    fake.enqueue(
        Planned.error(503, "loading model"), Planned.rate_limited("0"), Planned.reply("ready")
    )
    async with OpenAICompatModel(settings_for(fake), None) as model:
        _, response = await collect(model, chat())
    assert response.text == "ready"
    assert len(fake.requests) == 3


@pytest.mark.anyio
async def test_unavailable_after_retries(fake: FakeOpenAI) -> None:
    fake.enqueue(*[Planned.error(503, "loading model") for _ in range(3)])
    async with OpenAICompatModel(settings_for(fake), None) as model:
        with pytest.raises(
            ModelUnavailable, match=r"unavailable after 3 attempts: 503 loading model"
        ):
            await collect(model, chat())


@pytest.mark.anyio
async def test_connection_refused_is_unavailable() -> None:
    with FakeOpenAI() as gone:
        url = gone.url
    settings = OpenAISettings(base_url=url, max_retries=1, backoff_base_s=0.001)
    async with OpenAICompatModel(settings, None) as model:
        with pytest.raises(ModelUnavailable, match=r"after 2 attempts: connection failed"):
            await collect(model, chat())


@pytest.mark.anyio
async def test_bad_request_is_not_retried(fake: FakeOpenAI) -> None:
    fake.enqueue(Planned.error(400, "model 'nope' not found"), Planned.reply("unused"))
    async with OpenAICompatModel(settings_for(fake), None) as model:
        with pytest.raises(ModelError, match="model 'nope' not found") as caught:
            await collect(model, chat())
    assert not caught.value.retryable and caught.value.status == 400
    assert len(fake.requests) == 1


@pytest.mark.anyio
async def test_drops_before_and_after_text(fake: FakeOpenAI) -> None:
    fake.enqueue(Planned.dropped(after_deltas=0), Planned.reply("second try"))
    async with OpenAICompatModel(settings_for(fake), None) as model:
        _, response = await collect(model, chat())
        assert response.text == "second try"
        fake.enqueue(Planned.dropped(after_deltas=1, text="one two three"))
        with (
            pytest.raises(ModelError, match="after part of the reply") as caught,
            anyio.fail_after(10),
        ):
            async for _ in model.stream(chat()):
                pass
    assert caught.value.retryable and not isinstance(caught.value, ModelUnavailable)
    assert len(fake.requests) == 3


@pytest.mark.anyio
async def test_timeout_is_unavailable(fake: FakeOpenAI) -> None:
    fake.enqueue(Planned.delayed(3.0), Planned.delayed(3.0))
    async with OpenAICompatModel(settings_for(fake, timeout_s=0.3, max_retries=1), None) as model:
        with pytest.raises(ModelUnavailable, match=r"no response within 0\.3s"):
            await collect(model, chat())
