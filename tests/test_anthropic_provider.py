"""The Anthropic provider driving the real SDK against the fake Messages API over loopback."""

from __future__ import annotations

import random
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from daemon.models.anthropic import AnthropicModel, to_wire_messages
from daemon.models.base import (
    Completed,
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    StreamEvent,
    SystemBlock,
    TextBlock,
    TextDelta,
    ToolCallStarted,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from daemon.settings import AnthropicSettings
from tests.fakes.anthropic_server import FakeAnthropic, Planned

REMEMBER = ToolSpec(
    name="remember",
    description="Store a fact.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def settings_for(fake: FakeAnthropic, **kw: object) -> AnthropicSettings:
    base: dict[str, object] = {
        "base_url": fake.url,
        "max_retries": 2,
        "backoff_base_s": 0.001,
        "backoff_max_s": 0.01,
        "timeout_s": 5.0,
    }
    base.update(kw)
    return AnthropicSettings.model_validate(base)


def chat(text: str = "hello", **kw: object) -> ModelRequest:
    return ModelRequest(model="claude-haiku-4-5", messages=(Message.user(text),), **kw)  # type: ignore[arg-type]


async def collect(
    model: AnthropicModel, request: ModelRequest
) -> tuple[list[StreamEvent], ModelResponse]:
    events: list[StreamEvent] = []
    with anyio.fail_after(10):
        async for event in model.stream(request):
            events.append(event)
    assert isinstance(events[-1], Completed)
    assert sum(isinstance(e, Completed) for e in events) == 1
    return events, events[-1].response


@pytest.mark.anyio
async def test_streams_text_as_deltas(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.reply("The quick brown fox."))
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        events, response = await collect(model, chat("tell me"))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 4
    assert "".join(deltas) == response.text == "The quick brown fox."
    assert response.stop_reason == "end_turn"
    assert response.provider == "anthropic" and response.model == "claude-haiku-4-5"
    assert response.usage.output_tokens > 0
    (sent,) = fake.message_requests
    assert sent.body["stream"] is True
    # The SDK sends the key as `x-api-key` or as a bearer token, depending on its version.
    assert (
        sent.headers.get("x-api-key") == "sk-test"
        or sent.headers.get("authorization") == "Bearer sk-test"
    )
    assert "anthropic-version" in sent.headers
    assert sent.body["messages"][0]["content"][0]["text"] == "tell me"


@pytest.mark.anyio
async def test_multi_step_tool_loop(fake: FakeAnthropic) -> None:
    fake.enqueue(
        Planned.tool("remember", {"text": "the cat is called Miso"}, text="I'll note that."),
        Planned.reply("Noted: the cat is called Miso."),
    )
    messages = [Message.user("remember that the cat is called Miso")]
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        events, first = await collect(
            model,
            ModelRequest(model="claude-haiku-4-5", messages=tuple(messages), tools=(REMEMBER,)),
        )
        assert first.stop_reason == "tool_use"
        (call,) = first.tool_calls
        assert call.name == "remember" and call.input == {"text": "the cat is called Miso"}
        assert ToolCallStarted(id=call.id, name="remember") in events
        messages.append(Message(role="assistant", content=first.content))
        messages.append(
            Message(
                role="user",
                content=(ToolResultBlock(tool_use_id=call.id, content="stored as fact #7"),),
            )
        )
        _, final = await collect(
            model,
            ModelRequest(model="claude-haiku-4-5", messages=tuple(messages), tools=(REMEMBER,)),
        )
    assert final.text == "Noted: the cat is called Miso."
    first_sent, second_sent = fake.message_requests
    assert first_sent.body["tools"][0]["name"] == "remember"
    assert first_sent.body["tools"][0]["input_schema"]["required"] == ["text"]
    assistant_turn, result_turn = second_sent.body["messages"][1:]
    assert assistant_turn["content"][0] == {"type": "text", "text": "I'll note that."}
    assert (
        assistant_turn["content"][1]["type"] == "tool_use"
        and assistant_turn["content"][1]["id"] == call.id
    )
    assert result_turn["content"][0]["type"] == "tool_result"
    assert result_turn["content"][0]["tool_use_id"] == call.id
    assert result_turn["content"][0]["content"] == "stored as fact #7"


@pytest.mark.anyio
async def test_rate_limit_then_success(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.rate_limited(retry_after="0"), Planned.reply("made it"))
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        _, response = await collect(model, chat())
    assert response.text == "made it"
    assert len(fake.message_requests) == 2


@pytest.mark.anyio
async def test_retry_after_is_honoured(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.error(429, headers={"retry-after-ms": "250"}), Planned.reply("patient"))
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        started = anyio.current_time()
        _, response = await collect(model, chat())
        waited = anyio.current_time() - started
    assert response.text == "patient"
    assert waited >= 0.25


@pytest.mark.anyio
async def test_overloaded_then_success(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.overloaded(), Planned.reply("back again"))
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        _, response = await collect(model, chat())
    assert response.text == "back again"
    assert len(fake.message_requests) == 2


@pytest.mark.anyio
async def test_overloaded_inside_the_stream_is_retried(fake: FakeAnthropic) -> None:
    fake.enqueue(
        Planned(text="never shown", stream_error_after_deltas=0), Planned.reply("second try")
    )
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        events, response = await collect(model, chat())
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["second ", "try"]
    assert response.text == "second try"


@pytest.mark.anyio
async def test_overloaded_forever_gives_a_clear_error(fake: FakeAnthropic) -> None:
    fake.enqueue(*[Planned.overloaded() for _ in range(5)])
    async with AnthropicModel(settings_for(fake, max_retries=4), "sk-test") as model:
        with pytest.raises(ModelUnavailable) as caught, anyio.fail_after(10):
            await collect(model, chat())
    assert str(caught.value) == "Anthropic API unavailable after 5 attempts: 529 overloaded"
    assert caught.value.status == 529 and caught.value.retryable
    assert len(fake.message_requests) == 5
    assert fake.pending == 0


@pytest.mark.anyio
async def test_server_errors_are_retried_then_reported(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.error(500), Planned.error(503), Planned.error(502))
    async with AnthropicModel(settings_for(fake, max_retries=2), "sk-test") as model:
        with pytest.raises(ModelUnavailable, match=r"after 3 attempts: 502"):
            await collect(model, chat())
    assert len(fake.message_requests) == 3


@pytest.mark.anyio
async def test_drop_before_any_text_is_retried(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.dropped(after_deltas=0), Planned.reply("clean second attempt"))
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        events, response = await collect(model, chat())
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "clean second attempt"
    assert response.text == "clean second attempt"
    assert len(fake.message_requests) == 2


@pytest.mark.anyio
async def test_drop_after_text_is_not_silently_restarted(fake: FakeAnthropic) -> None:
    fake.enqueue(
        Planned.dropped(after_deltas=2, text="one two three four"),
        Planned.reply("must not be used"),
    )
    received: list[str] = []
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        with pytest.raises(ModelError) as caught, anyio.fail_after(10):
            async for event in model.stream(chat()):
                assert not isinstance(event, Completed)
                if isinstance(event, TextDelta):
                    received.append(event.text)
    assert received == ["one ", "two "]
    assert not isinstance(caught.value, ModelUnavailable)
    assert caught.value.retryable
    assert "after part of the reply was delivered" in str(caught.value)
    assert len(fake.message_requests) == 1
    assert fake.pending == 1


@pytest.mark.anyio
async def test_timeout_becomes_unavailable(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.delayed(3.0), Planned.delayed(3.0))
    async with AnthropicModel(settings_for(fake, timeout_s=0.3, max_retries=1), "sk-test") as model:
        started = anyio.current_time()
        with pytest.raises(ModelUnavailable, match=r"after 2 attempts: no response within 0.3s"):
            await collect(model, chat())
        elapsed = anyio.current_time() - started
    assert 0.6 <= elapsed < 2.5
    assert len(fake.message_requests) == 2


@pytest.mark.anyio
async def test_connection_refused_becomes_unavailable() -> None:
    with FakeAnthropic() as gone:
        url = gone.url
    settings = AnthropicSettings(
        base_url=url, max_retries=1, backoff_base_s=0.001, connect_timeout_s=1.0
    )
    async with AnthropicModel(settings, "sk-test") as model:
        with (
            pytest.raises(ModelUnavailable, match=r"after 2 attempts: connection failed"),
            anyio.fail_after(10),
        ):
            await collect(model, chat())


@pytest.mark.anyio
async def test_rejected_requests_are_not_retried(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.error(401, "invalid x-api-key"), Planned.reply("unused"))
    async with AnthropicModel(settings_for(fake), "sk-wrong") as model:
        with pytest.raises(ModelError) as caught, anyio.fail_after(10):
            await collect(model, chat())
        assert not caught.value.retryable and caught.value.status == 401
        assert "invalid x-api-key" in str(caught.value)
        # The fake rejects a tool_result that answers no tool_use, as the API does.
        orphan = ModelRequest(
            model="claude-haiku-4-5",
            messages=(
                Message(
                    role="user", content=(ToolResultBlock(tool_use_id="toolu_none", content="x"),)
                ),
            ),
        )
        with pytest.raises(ModelError, match=r"400 invalid_request_error: .*toolu_none") as bad:
            await collect(model, orphan)
        assert not bad.value.retryable
    assert len(fake.message_requests) == 2


@pytest.mark.anyio
async def test_cache_breakpoints_and_cache_usage(fake: FakeAnthropic) -> None:
    system = (
        SystemBlock(text="You are Reverie. " * 40),
        SystemBlock(text="Profile: likes tea. " * 20, cache_breakpoint=True),
        SystemBlock(text="Recalled just now: the dentist is on Friday."),
    )
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        _, first = await collect(
            model,
            ModelRequest(model="claude-sonnet-4-5", messages=(Message.user("hi"),), system=system),
        )
        turn_two = (Message.user("hi"), Message.assistant(first.text), Message.user("and today?"))
        _, second = await collect(
            model, ModelRequest(model="claude-sonnet-4-5", messages=turn_two, system=system)
        )
    sent = fake.message_requests[0].body
    assert [("cache_control" in b) for b in sent["system"]] == [False, True, False]
    assert sent["system"][1]["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first.usage.cache_write_tokens > 0 and first.usage.cache_read_tokens == 0
    # Turn two re-reads the first turn's whole prefix (system + its last message) from cache.
    assert second.usage.cache_read_tokens >= first.usage.cache_write_tokens
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


@pytest.mark.anyio
async def test_caching_off_sends_no_cache_control(fake: FakeAnthropic) -> None:
    system = (SystemBlock(text="persona", cache_breakpoint=True), SystemBlock(text="dynamic"))
    async with AnthropicModel(settings_for(fake, prompt_caching=False), "sk-test") as model:
        _, response = await collect(
            model,
            ModelRequest(model="claude-sonnet-4-5", messages=(Message.user("hi"),), system=system),
        )
    assert "cache_control" not in str(fake.message_requests[0].body)
    assert response.usage.cache_read_tokens == response.usage.cache_write_tokens == 0


@pytest.mark.anyio
async def test_stop_reason_and_usage_mapping(fake: FakeAnthropic) -> None:
    fake.enqueue(
        Planned.reply(
            "cut short",
            stop_reason="max_tokens",
            usage={
                "input_tokens": 11,
                "output_tokens": 3,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 7,
            },
        )
    )
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        _, response = await collect(model, chat())
    assert response.stop_reason == "max_tokens"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 3)
    assert (response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (100, 7)


@pytest.mark.anyio
async def test_exact_token_counts(fake: FakeAnthropic) -> None:
    request = chat("count these words please", system=(SystemBlock(text="persona"),))
    async with AnthropicModel(settings_for(fake, exact_token_counts=True), "sk-test") as model:
        counted = await model.count_tokens(request)
    assert isinstance(counted, int) and counted > 0
    (sent,) = fake.requests
    assert sent.path == "/v1/messages/count_tokens" and "max_tokens" not in sent.body
    async with AnthropicModel(settings_for(fake), "sk-test") as model:
        assert await model.count_tokens(request) is None
    assert len(fake.requests) == 1


@pytest.mark.anyio
async def test_closed_provider_refuses_reuse(fake: FakeAnthropic) -> None:
    model = AnthropicModel(settings_for(fake), "sk-test")
    await model.aclose()
    with pytest.raises(ModelError, match="closed"):
        await collect(model, chat())


def test_backoff_uses_full_jitter_and_honours_retry_after() -> None:
    settings = AnthropicSettings(backoff_base_s=1.0, backoff_max_s=8.0)
    model = AnthropicModel(settings, "sk-test", rng=random.Random(7))
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        waits = [model.backoff(attempt, None) for _ in range(200)]
        assert all(0 <= w <= ceiling for w in waits)
        assert max(waits) > ceiling * 0.8  # spread over the whole window, not a fixed delay
    assert model.backoff(1, 2.5) == 2.5
    assert model.backoff(3, 0.0) == 0.0


def test_message_mapping_drops_empty_text_and_merges_same_role_turns() -> None:
    messages = (
        Message.user("first"),
        Message.user("second"),
        Message(
            role="assistant",
            content=(
                TextBlock(text=""),
                ToolUseBlock(id="t1", name="recall", input={"query": "x"}),
            ),
        ),
        Message(
            role="user",
            content=(ToolResultBlock(tool_use_id="t1", content="nothing", is_error=True),),
        ),
    )
    wire = to_wire_messages(messages, caching=False)
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert [b["text"] for b in wire[0]["content"]] == ["first", "second"]
    assert wire[1]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "recall", "input": {"query": "x"}}
    ]
    assert wire[2]["content"][0]["is_error"] is True


@pytest.fixture
def fake_process() -> Iterator[str]:
    """The fake served by a separate process, as a daemon subprocess test would run it."""
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.anthropic_server", "--port", "0"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        assert ready, "the fake server did not print its URL within 15 s"
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.anyio
async def test_fake_runs_as_a_subprocess_for_daemon_tests(fake_process: str) -> None:
    assert fake_process.startswith("http://127.0.0.1:")
    settings = AnthropicSettings(base_url=fake_process, max_retries=0)
    async with (
        httpx.AsyncClient(base_url=fake_process) as control,
        AnthropicModel(settings, "sk-test") as model,
    ):
        with anyio.fail_after(10):
            queued = await control.post(
                "/_fake/enqueue",
                json=[{"tool_calls": [["remember", {"text": "x"}]]}, {"status": 529}],
            )
        assert queued.json() == {"queued": 2, "pending": 2}
        _, first = await collect(model, chat("remember x", tools=(REMEMBER,)))
        assert [(c.name, c.input) for c in first.tool_calls] == [("remember", {"text": "x"})]
        with pytest.raises(ModelUnavailable, match="529 overloaded"):
            await collect(model, chat("again"))
        _, echoed = await collect(model, chat("ping from a daemon"))
        assert echoed.text == "Echo: ping from a daemon"
        with anyio.fail_after(10):
            recorded = (await control.get("/_fake/requests")).json()["requests"]
        bad = await control.post("/_fake/enqueue", json=[{"no_such_field": 1}])
    assert [r["body"]["messages"][0]["content"][0]["text"] for r in recorded] == [
        "remember x",
        "again",
        "ping from a daemon",
    ]
    assert bad.status_code == 400


@pytest.mark.anyio
async def test_an_event_that_is_not_json_is_retried_like_an_outage(fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.malformed(after_deltas=0), Planned.reply("clean second attempt"))
    async with AnthropicModel(settings_for(fake, max_retries=1), "sk-test") as model:
        _, response = await collect(model, chat())
    assert response.text == "clean second attempt"
    assert len(fake.message_requests) == 2


@pytest.mark.anyio
async def test_garbage_on_every_attempt_makes_the_api_unavailable(fake: FakeAnthropic) -> None:
    fake.outage(Planned.malformed(after_deltas=0))
    async with AnthropicModel(settings_for(fake, max_retries=1), "sk-test") as model:
        with anyio.fail_after(10), pytest.raises(ModelUnavailable, match="unreadable response"):
            await collect(model, chat())
    assert len(fake.message_requests) == 2
