from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest

from daemon.bus import BusNotRunning, EventBus, Veto
from daemon.events import (
    BeforeAgentStart,
    BeforeFork,
    Contribution,
    ForkNote,
    Heartbeat,
    SessionShutdown,
    SleepStarted,
    SystemNote,
)

pytestmark = pytest.mark.anyio


def _shutdown(session_id: str = "s1") -> SessionShutdown:
    return SessionShutdown(session_id=session_id, transcript_path="/x")


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


async def test_gate_handlers_contribute_context_by_returning_it() -> None:
    bus = EventBus()
    bus.on(
        BeforeAgentStart,
        lambda e: Contribution(layer="recall", text="a memory", origin="person"),
        name="recall",
    )
    bus.on(BeforeAgentStart, lambda e: SystemNote(text="a note"), name="note")
    gathered = await bus.gather(BeforeAgentStart(session_id="s", turn_id="t", prompt="hi"))
    assert gathered.veto is None
    assert [(h, c.text) for h, c in gathered.of(Contribution)] == [("recall", "a memory")]
    assert [(h, n.text) for h, n in gathered.of(SystemNote)] == [("note", "a note")]


async def test_a_slow_observer_never_delays_the_publisher() -> None:
    release = anyio.Event()
    seen: list[str] = []

    async def slow(e: SessionShutdown) -> None:
        await release.wait()
        seen.append(f"slow {e.session_id}")

    async with EventBus() as bus:
        bus.on(SessionShutdown, slow, name="slow")
        bus.on(SessionShutdown, lambda e: seen.append(f"quick {e.session_id}"), name="quick")
        with anyio.fail_after(5):
            await bus.publish(_shutdown())
            # The publisher is back while the slow handler still waits; the quick one is not
            # held up behind it either.
            await anyio.wait_all_tasks_blocked()
            assert seen == ["quick s1"]
            release.set()
            await bus.drain()
        assert seen == ["quick s1", "slow s1"]


async def test_observer_failures_are_isolated_logged_and_counted() -> None:
    seen: list[str] = []

    def boom(e: SessionShutdown) -> None:
        raise RuntimeError("handler bug")

    async def slow(e: SessionShutdown) -> None:
        await anyio.sleep(10)

    async with EventBus() as bus:
        bus.on(SessionShutdown, boom, priority=1)
        bus.on(SessionShutdown, slow, priority=2, timeout_s=0.05)
        bus.on(SessionShutdown, lambda e: seen.append(e.session_id), priority=3)
        with anyio.fail_after(5):
            assert await bus.deliver(_shutdown("s1")) == 2
            assert seen == ["s1"]
            # Handed off, the same failures stay inside the bus: the publisher never sees them.
            await bus.publish(_shutdown("s2"))
            await bus.drain()
        assert seen == ["s1", "s2"]


async def test_wait_true_returns_once_every_handler_is_done() -> None:
    done: list[str] = []

    async def writes(e: SessionShutdown) -> None:
        await anyio.sleep(0.01)
        done.append(e.session_id)

    async with EventBus() as bus:
        bus.on(SessionShutdown, writes)
        with anyio.fail_after(5):
            await bus.publish(_shutdown(), wait=True)
        assert done == ["s1"]


async def test_a_hook_whose_publisher_waits_is_awaited_by_policy() -> None:
    done: list[str] = []

    async def before_sleep(e: SleepStarted) -> None:
        await anyio.sleep(0.01)
        done.append(e.session_id)

    async with EventBus() as bus:
        bus.on(SleepStarted, before_sleep)
        with anyio.fail_after(5):
            await bus.publish(SleepStarted(reason="nightly", session_id="trunk-1"))
        assert done == ["trunk-1"]
        with pytest.raises(TypeError, match="sleep_started"):
            bus.publish_nowait(SleepStarted(reason="nightly", session_id="trunk-1"))


async def test_shielded_cleanup_still_runs_its_handlers_to_completion() -> None:
    done: list[str] = []

    async def summarise(e: SessionShutdown) -> None:
        await anyio.sleep(0.05)
        done.append(e.session_id)

    async with EventBus() as bus:
        bus.on(SessionShutdown, summarise)
        with anyio.fail_after(5), anyio.CancelScope() as outer:
            outer.cancel()
            with anyio.CancelScope(shield=True):
                await bus.publish(_shutdown(), wait=True)
        assert done == ["s1"]


async def test_leaving_the_bus_lets_handlers_in_flight_finish() -> None:
    done: list[str] = []

    async def slow(e: SessionShutdown) -> None:
        await anyio.sleep(0.05)
        done.append(e.session_id)

    with anyio.fail_after(5):
        async with EventBus() as bus:
            bus.on(SessionShutdown, slow)
            await bus.publish(_shutdown())
            assert done == []
    assert done == ["s1"]


async def test_publishing_to_handlers_outside_the_running_bus_is_refused() -> None:
    bus = EventBus(name="test-bus")
    # Nothing to deliver needs no task group.
    await bus.publish(_shutdown())
    bus.on(SessionShutdown, lambda e: None)
    with pytest.raises(BusNotRunning, match=r"test-bus is not running: enter it"):
        await bus.publish(_shutdown())


async def test_failing_gate_handler_is_not_a_veto() -> None:
    bus = EventBus()

    def boom(e: BeforeAgentStart) -> None:
        raise ValueError("bug")

    bus.on(BeforeAgentStart, boom)
    assert await bus.emit_gate(BeforeAgentStart(session_id="s", turn_id="t", prompt="x")) is None


async def test_wrong_dispatch_kind_is_refused() -> None:
    bus = EventBus()
    with pytest.raises(TypeError):
        await bus.emit_gate(Heartbeat(at=datetime.now(UTC)))
    with pytest.raises(TypeError):
        await bus.publish(BeforeAgentStart(session_id="s", turn_id="t", prompt="x"))


async def test_unsubscribe() -> None:
    seen: list[int] = []
    async with EventBus() as bus:
        off = bus.on(SessionShutdown, lambda e: seen.append(1))
        off()
        await bus.publish(_shutdown())
        with anyio.fail_after(5):
            await bus.drain()
    assert seen == []


async def test_gate_contributions_are_returned_in_order_up_to_the_veto() -> None:
    bus = EventBus()
    event = BeforeFork(
        parent_session_id="trunk-1",
        parent_transcript_path="/x",
        fork_session_id="f",
        task="t",
        depth=1,
    )
    bus.on(BeforeFork, lambda e: ForkNote(text="second"), priority=20, name="two")
    bus.on(BeforeFork, lambda e: ForkNote(text="first"), priority=10, name="one")
    bus.on(BeforeFork, lambda e: None, priority=15, name="silent")
    with anyio.fail_after(5):
        gathered = await bus.gather(event)
    assert gathered.veto is None
    assert [(h, n.text) for h, n in gathered.of(ForkNote)] == [("one", "first"), ("two", "second")]
    bus.on(BeforeFork, lambda e: Veto(reason="no"), priority=18, name="veto")
    with anyio.fail_after(5):
        vetoed = await bus.gather(event)
    assert vetoed.veto is not None and vetoed.veto.by == "veto"
    assert [n.text for _, n in vetoed.of(ForkNote)] == ["first"]
