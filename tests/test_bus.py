from __future__ import annotations

import anyio
import pytest

from daemon.bus import EventBus, Veto
from daemon.events import BeforeAgentStart, Heartbeat, SessionShutdown

pytestmark = pytest.mark.anyio


async def test_gate_runs_in_priority_order_and_stops_at_veto() -> None:
    bus = EventBus()
    seen: list[str] = []
    bus.on(BeforeAgentStart, lambda e: seen.append("b"), priority=20, name="b")
    bus.on(BeforeAgentStart, lambda e: seen.append("a"), priority=10, name="a")

    def veto(e: BeforeAgentStart) -> Veto:
        seen.append("v")
        return Veto(reason="no")

    bus.on(BeforeAgentStart, veto, priority=30, name="veto")
    bus.on(BeforeAgentStart, lambda e: seen.append("never"), priority=40)
    with anyio.fail_after(5):
        result = await bus.emit_gate(BeforeAgentStart(session_id="s", turn_id="t", prompt="hi"))
    assert seen == ["a", "b", "v"]
    assert result is not None and result.reason == "no" and result.by == "veto"


async def test_gate_handlers_contribute_context() -> None:
    bus = EventBus()
    bus.on(BeforeAgentStart, lambda e: e.context.contribute("recall", "a memory", origin="person"))
    event = BeforeAgentStart(session_id="s", turn_id="t", prompt="hi")
    assert await bus.emit_gate(event) is None
    assert [c.text for c in event.context.contributions] == ["a memory"]


async def test_observer_failures_are_isolated_and_counted() -> None:
    bus = EventBus()
    seen: list[str] = []

    def boom(e: SessionShutdown) -> None:
        raise RuntimeError("handler bug")

    async def slow(e: SessionShutdown) -> None:
        await anyio.sleep(10)

    bus.on(SessionShutdown, boom, priority=1)
    bus.on(SessionShutdown, slow, priority=2, timeout_s=0.05)
    bus.on(SessionShutdown, lambda e: seen.append(e.session_id), priority=3)
    with anyio.fail_after(5):
        failed = await bus.publish(SessionShutdown(session_id="s1", transcript_path="/x"))
    assert failed == 2
    assert seen == ["s1"]


async def test_failing_gate_handler_is_not_a_veto() -> None:
    bus = EventBus()

    def boom(e: BeforeAgentStart) -> None:
        raise ValueError("bug")

    bus.on(BeforeAgentStart, boom)
    assert await bus.emit_gate(BeforeAgentStart(session_id="s", turn_id="t", prompt="x")) is None


async def test_wrong_dispatch_kind_is_refused() -> None:
    bus = EventBus()
    from datetime import UTC, datetime

    with pytest.raises(TypeError):
        await bus.emit_gate(Heartbeat(at=datetime.now(UTC)))
    with pytest.raises(TypeError):
        await bus.publish(BeforeAgentStart(session_id="s", turn_id="t", prompt="x"))


async def test_unsubscribe() -> None:
    bus = EventBus()
    seen: list[int] = []
    off = bus.on(SessionShutdown, lambda e: seen.append(1))
    off()
    await bus.publish(SessionShutdown(session_id="s", transcript_path="/x"))
    assert seen == []
