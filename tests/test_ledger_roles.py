"""The usage ledger's cost math and spend cap, and `ModelRoles` routing and recording."""

from __future__ import annotations

import errno
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from daemon.clock import FakeClock
from daemon.models.anthropic import AnthropicModel
from daemon.models.base import (
    Message,
    ModelError,
    ModelRequest,
    SpendCapReached,
    StreamEvent,
    SystemBlock,
    TextDelta,
    Usage,
)
from daemon.models.ledger import UsageLedger, cost_of, price_for
from daemon.models.offline import OfflineModel
from daemon.models.openai_compat import OpenAICompatModel
from daemon.models.roles import ModelRoles, resolve_provider
from daemon.settings import Price, Settings
from daemon.store.db import Database
from daemon.testing import Reply, ScriptedModel
from tests.fakes.anthropic_server import FakeAnthropic

SONNET = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with await Database.open(tmp_path / "index.db") as database:
        yield database


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def settings(**sections: object) -> Settings:
    return Settings.model_validate(sections)


def test_cost_uses_every_token_kind() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=200_000,
        cache_read_tokens=2_000_000,
        cache_write_tokens=400_000,
    )
    assert cost_of(usage, SONNET) == pytest.approx(3.0 + 3.0 + 0.6 + 1.5)
    assert cost_of(usage, None) == 0.0


def test_dated_snapshots_price_like_their_family() -> None:
    prices = Settings().spend.prices
    assert price_for("claude-haiku-4-5-20251001", prices) == prices["claude-haiku-4-5"]
    assert price_for("claude-sonnet-4-5", prices) == prices["claude-sonnet-4-5"]
    assert price_for("llama-3.1-8b", prices) is None


@pytest.mark.anyio
async def test_ledger_sums_today_and_cache_hit_rate(db: Database) -> None:
    clock = FakeClock()
    ledger = UsageLedger(db, Settings().spend, clock)
    cost = await ledger.record(
        role="trunk",
        provider="anthropic",
        model="claude-sonnet-4-5",
        usage=Usage(
            input_tokens=1000, output_tokens=100, cache_read_tokens=3000, cache_write_tokens=0
        ),
    )
    assert cost == pytest.approx((1000 * 3.0 + 100 * 15.0 + 3000 * 0.3) / 1_000_000)
    await ledger.record(
        role="summariser",
        provider="offline",
        model="offline",
        usage=Usage(input_tokens=500, output_tokens=50),
    )
    today = await ledger.today()
    assert today.calls == 2 and today.cost_usd == pytest.approx(cost)
    assert today.cache_hit_rate == pytest.approx(3000 / 4500)
    clock.advance(days=1)
    assert (await ledger.today()).calls == 0


@pytest.mark.anyio
async def test_roles_record_every_call(db: Database) -> None:
    ledger = UsageLedger(db, Settings().spend, FakeClock())
    scripted = ScriptedModel(
        [Reply(text="hi there", usage=Usage(input_tokens=10, output_tokens=2)), "streamed reply"]
    )
    async with ModelRoles(Settings(), ledger, overrides={"trunk": scripted}, environ={}) as roles:
        await roles.complete(
            roles.request("trunk", messages=[Message.user("hello")]), session_id="s1", turn_id="t1"
        )
        async for _ in roles.stream(roles.request("trunk", messages=[Message.user("again")])):
            pass
        # The summariser resolves to the offline model with no key, and is recorded too.
        await roles.complete(
            roles.request(
                "summariser",
                messages=[Message.user("<<<TRANSCRIPT\n[user] hi\nTRANSCRIPT>>>")],
                task="summarise",
            )
        )
    rows = await db.fetchall(
        "SELECT role, provider, model, input_tokens, output_tokens, session_id, turn_id FROM usage_ledger ORDER BY id"
    )
    assert [tuple(r) for r in rows[:1]] == [
        ("trunk", "scripted", "claude-sonnet-4-5", 10, 2, "s1", "t1")
    ]
    assert [r[0] for r in rows] == ["trunk", "trunk", "summariser"]
    assert (rows[2][1], rows[2][2]) == ("offline", "offline")


@pytest.mark.anyio
async def test_spend_cap_stops_non_essential_work_first(db: Database) -> None:
    clock = FakeClock()
    config = settings(spend={"daily_cap_usd": 1.0, "non_essential_fraction": 0.8})
    ledger = UsageLedger(db, config.spend, clock)
    scripted = ScriptedModel(lambda request: "ok")
    async with ModelRoles(
        config, ledger, overrides={"trunk": scripted, "heartbeat": scripted}, environ={}
    ) as roles:
        # $0.75 spent: everything still runs.
        await ledger.record(
            role="trunk",
            provider="anthropic",
            model="claude-sonnet-4-5",
            usage=Usage(input_tokens=250_000),
        )
        await roles.complete(roles.request("heartbeat", messages=[Message.user("tick")]))
        # $0.90: past the soft limit, non-essential roles are refused, the trunk is not.
        await ledger.record(
            role="trunk",
            provider="anthropic",
            model="claude-sonnet-4-5",
            usage=Usage(input_tokens=50_000),
        )
        with pytest.raises(SpendCapReached, match=r"non-essential work stopped"):
            await roles.complete(roles.request("heartbeat", messages=[Message.user("tick")]))
        await roles.complete(roles.request("trunk", messages=[Message.user("still here?")]))
        # $1.05: at the cap even the trunk stops, until tomorrow.
        await ledger.record(
            role="trunk",
            provider="anthropic",
            model="claude-sonnet-4-5",
            usage=Usage(input_tokens=50_000),
        )
        with pytest.raises(SpendCapReached, match=r"daily spend cap reached: \$1\.05 of \$1\.00"):
            await roles.complete(roles.request("trunk", messages=[Message.user("hello?")]))
        calls_before = len(scripted.calls)
        clock.advance(days=1)
        await roles.complete(roles.request("trunk", messages=[Message.user("new day")]))
        assert len(scripted.calls) == calls_before + 1


@pytest.mark.anyio
async def test_zero_cap_means_no_cap(db: Database) -> None:
    config = settings(spend={"daily_cap_usd": 0})
    ledger = UsageLedger(db, config.spend, FakeClock())
    await ledger.record(
        role="trunk",
        provider="anthropic",
        model="claude-opus-4-1",
        usage=Usage(input_tokens=10_000_000),
    )
    assert await ledger.allows(essential=False) == (True, "")


@pytest.mark.anyio
async def test_auto_provider_resolves_by_key(tmp_path: Path) -> None:
    config = Settings()
    assert resolve_provider(config.models.trunk, config, {}) == "offline"
    assert (
        resolve_provider(config.models.trunk, config, {"ANTHROPIC_API_KEY": "sk-x"}) == "anthropic"
    )
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "ANTHROPIC_API_KEY").write_text("sk-from-systemd\n")
    assert (
        resolve_provider(config.models.trunk, config, {"CREDENTIALS_DIRECTORY": str(creds)})
        == "anthropic"
    )
    async with ModelRoles(config, None, environ={}) as roles:
        assert isinstance(roles.model_for("trunk"), OfflineModel)
        assert roles.model_name("trunk") == "offline"
    async with ModelRoles(config, None, environ={"ANTHROPIC_API_KEY": "sk-x"}) as roles:
        assert isinstance(roles.model_for("trunk"), AnthropicModel)
        assert roles.model_for("summariser") is roles.model_for("trunk")  # one client per provider
        assert roles.model_name("summariser") == "claude-haiku-4-5"
    local = settings(models={"trunk": {"provider": "openai", "model": "llama-3.1-8b"}})
    async with ModelRoles(local, None, environ={}) as roles:
        assert isinstance(roles.model_for("trunk"), OpenAICompatModel)
        assert isinstance(roles.model_for("summariser"), OfflineModel)


@pytest.mark.anyio
async def test_prompt_caching_is_measured_in_the_ledger(db: Database, fake: FakeAnthropic) -> None:
    config = settings(
        providers={"anthropic": {"base_url": fake.url, "max_retries": 0}},
        spend={"daily_cap_usd": 5.0},
    )
    ledger = UsageLedger(db, config.spend, FakeClock())
    system = [
        SystemBlock(text="You are Reverie, a steady companion. " * 30, cache_breakpoint=True),
        SystemBlock(text="Now: Monday."),
    ]
    history: list[Message] = []
    async with ModelRoles(config, ledger, environ={"ANTHROPIC_API_KEY": "sk-test"}) as roles:
        for said in ("hello", "how was the weekend?", "and the garden?"):
            history.append(Message.user(said))
            with anyio.fail_after(10):
                response = await roles.complete(
                    roles.request("trunk", messages=history, system=system)
                )
            history.append(Message(role="assistant", content=response.content))
    today = await ledger.today()
    assert today.calls == 3
    assert today.cache_write_tokens > 0 and today.cache_read_tokens > today.cache_write_tokens / 2
    assert 0.3 < today.cache_hit_rate < 1.0
    rows = await db.fetchall(
        "SELECT cache_read_tokens, cache_write_tokens, cost_usd FROM usage_ledger ORDER BY id"
    )
    assert rows[0][0] == 0 and rows[1][0] > 0 and rows[2][0] > rows[1][0]
    first = Usage(cache_write_tokens=rows[0][1])
    assert rows[0][2] == pytest.approx(
        cost_of(first, config.spend.prices["claude-sonnet-4-5"]), rel=0.2
    )


class _ClosingProbe:
    """A provider that notes whether its stream was closed (what releases an HTTP stream)."""

    provider = "probe"

    def __init__(self) -> None:
        self.closed_streams = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        try:
            for word in ("one ", "two ", "three"):
                await anyio.lowlevel.checkpoint()
                yield TextDelta(text=word)
        finally:
            self.closed_streams += 1

    async def count_tokens(self, request: ModelRequest) -> int | None:
        return None

    async def aclose(self) -> None:
        return None


@pytest.mark.anyio
async def test_roles_close_the_provider_stream_when_the_caller_stops_early() -> None:
    probe = _ClosingProbe()
    async with ModelRoles(Settings(), None, overrides={"trunk": probe}, environ={}) as roles:
        with anyio.fail_after(5):
            stream = roles.stream(roles.request("trunk", messages=[Message.user("hi")]))
            assert isinstance(stream, AsyncGenerator)
            async with aclosing(stream) as events:
                async for _ in events:
                    break
    assert probe.closed_streams == 1


@pytest.mark.anyio
async def test_anything_a_provider_raises_reaches_the_caller_as_a_retryable_model_error() -> None:
    """A provider's own bug or an unreadable response must never be its caller's crash."""
    scripted = ScriptedModel([Reply(text="half a", error=KeyError("content_block"))])
    async with ModelRoles(Settings(), None, overrides={"trunk": scripted}, environ={}) as roles:
        seen: list[str] = []
        with anyio.fail_after(5), pytest.raises(ModelError) as caught:
            async for event in roles.stream(roles.request("trunk", messages=[Message.user("hi")])):
                if isinstance(event, TextDelta):
                    seen.append(event.text)
    assert seen == ["half ", "a"]
    assert caught.value.retryable
    assert "KeyError" in str(caught.value)


@pytest.mark.anyio
async def test_a_full_disk_under_a_provider_is_not_called_a_model_error() -> None:
    """Storage refusing a write is the home's problem: the caller keeps the work, not retries."""
    full = OSError(errno.ENOSPC, "No space left on device")
    scripted = ScriptedModel([Reply(text="x", error=full)])
    async with ModelRoles(Settings(), None, overrides={"trunk": scripted}, environ={}) as roles:
        with anyio.fail_after(5), pytest.raises(OSError) as caught:
            async for _ in roles.stream(roles.request("trunk", messages=[Message.user("hi")])):
                pass
    assert caught.value.errno == errno.ENOSPC
