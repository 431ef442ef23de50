"""Lifecycle seams in-process: the state machine, hold/switch under load, working memory within
the window, and a context that cannot fail silently."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.agent.budget import RequestBudget, RequestSizer
from daemon.agent.gateway import CommandBusy, turn_frame
from daemon.agent.inbox import Inbox
from daemon.agent.loop import AgentLoop, ContextFailed
from daemon.agent.session import Session
from daemon.agent.trunk import SWITCH_KEY, Trunk
from daemon.agent.turns import Delta, ToolPhase, TurnDone, TurnEvent, TurnFailed
from daemon.app import register_commands
from daemon.bus import EventBus, Veto
from daemon.chat.protocol import ErrorCode
from daemon.clock import FakeClock
from daemon.context.assembler import ContextAssembler
from daemon.events import SessionBeforeSwitch, SessionShutdown, StateChanged
from daemon.lifecycle import DaemonState, IllegalTransition, Lifecycle
from daemon.memory.embedders import HashEmbedder
from daemon.models.base import ModelRequest
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.services import Services, open_services
from daemon.settings import load_settings
from daemon.store.db import Database
from daemon.testing import Reply, ScriptedModel, static_context
from daemon.tokens import TokenCounter
from daemon.tools.registry import Tool, ToolContext, ToolRegistry
from daemon.topics.router import TopicRouter

pytestmark = pytest.mark.anyio


# -- the state machine -----------------------------------------------------------------------


async def test_only_legal_transitions_are_accepted_and_the_bus_hears_each() -> None:
    heard: list[StateChanged] = []
    async with EventBus() as bus:
        life = Lifecycle(FakeClock(), bus)
        bus.on(StateChanged, heard.append, name="test.heard")
        assert life.state is DaemonState.STARTING
        with pytest.raises(
            IllegalTransition,
            match=r"cannot go from starting to asleep; .* may become: awake, stopping",
        ):
            life.transition(DaemonState.ASLEEP)
        life.transition(DaemonState.AWAKE)
        with pytest.raises(IllegalTransition):
            life.transition(DaemonState.ASLEEP)  # never straight to sleep: wind down first
        life.transition(DaemonState.WINDING_DOWN, detail="context at 81%")
        life.transition(DaemonState.AWAKE, detail="a message arrived")
        life.transition(DaemonState.WINDING_DOWN)
        life.transition(DaemonState.ASLEEP)
        life.set_phase("dreams")
        assert life.snapshot()["phase"] == "dreams"
        life.transition(DaemonState.AWAKE)
        assert life.phase is None
        life.transition(DaemonState.STOPPING)
        with pytest.raises(IllegalTransition, match="nothing"):
            life.transition(DaemonState.AWAKE)
        with anyio.fail_after(5):
            await bus.drain()
    assert [(str(c.previous), str(c.state)) for c in heard] == [
        ("starting", "awake"),
        ("awake", "winding-down"),
        ("winding-down", "awake"),
        ("awake", "winding-down"),
        ("winding-down", "asleep"),
        ("asleep", "awake"),
        ("awake", "stopping"),
    ]
    assert heard[1].detail == "context at 81%"


async def test_a_failing_or_slow_state_handler_neither_stops_the_others_nor_the_transition() -> (
    None
):
    heard: list[str] = []
    stuck = anyio.Event()

    def broken(_c: StateChanged) -> None:
        raise RuntimeError("handler bug")

    async def slow(_c: StateChanged) -> None:
        await stuck.wait()

    async with EventBus() as bus:
        life = Lifecycle(FakeClock(), bus)
        bus.on(StateChanged, broken, name="test.broken")
        bus.on(StateChanged, slow, name="test.slow")
        bus.on(StateChanged, lambda c: heard.append(str(c.state)), name="test.heard")
        life.transition(DaemonState.AWAKE)
        life.transition(DaemonState.WINDING_DOWN)
        assert life.state is DaemonState.WINDING_DOWN
        with anyio.fail_after(5):
            await anyio.wait_all_tasks_blocked()
            assert heard == ["awake", "winding-down"]
            stuck.set()
            await bus.drain()


def test_turn_events_become_protocol_frames() -> None:
    assert turn_frame(Delta(turn_id="t", text="hi")) == {
        "type": "delta",
        "turn_id": "t",
        "text": "hi",
    }
    frame = turn_frame(
        ToolPhase(
            turn_id="t",
            name="delegate",
            phase="progress",
            detail="step 2",
            depth=1,
            fork_id="fork-1",
        )
    )
    assert frame == {
        "type": "tool",
        "turn_id": "t",
        "name": "delegate",
        "phase": "progress",
        "detail": "step 2",
        "depth": 1,
        "fork_id": "fork-1",
    }
    assert turn_frame(TurnDone(turn_id="t", text="ok", stop_reason="end_turn"))["type"] == "done"
    err = turn_frame(TurnFailed(turn_id="t", code=ErrorCode.CONTEXT_FAILED, message="no context"))
    assert err == {
        "type": "error",
        "code": "context_failed",
        "message": "no context",
        "turn_id": "t",
    }
    with pytest.raises(ValueError):
        ErrorCode("not_a_code")


# -- the trunk: hold, release, switch ---------------------------------------------------------


def _roles(model: ScriptedModel) -> ModelRoles:
    return ModelRoles(load_settings(None), None, overrides={"trunk": model})


async def _wait(pred: Any, what: str, limit_s: float = 10) -> None:
    with anyio.fail_after(limit_s):
        while not pred():
            await anyio.sleep(0.01)


def _records(home: Home) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(home.trunk_dir.glob("*.jsonl")):
        out.extend(
            dict(json.loads(line), _file=path.stem)
            for line in path.read_text().splitlines()
            if line.strip()
        )
    return out


@asynccontextmanager
async def _services(
    root: Path,
    model: ScriptedModel,
    bus: EventBus | None = None,
) -> AsyncIterator[Services]:
    """The daemon's services as `app.py` builds them (without the socket), not yet serving."""
    home = Home(root)
    home.ensure()
    settings = load_settings(home.root)
    async with open_services(
        home,
        settings,
        FakeClock(),
        models={"trunk": model},
        embedder=HashEmbedder(),
        bus=bus,
        watch_files=False,
    ) as services:
        register_commands(services)
        yield services


@asynccontextmanager
async def _serving(services: Services) -> AsyncIterator[Services]:
    """Serve `services` (without the scheduled jobs) until the block exits."""
    async with anyio.create_task_group() as tg:
        await tg.start(partial(services.serve, jobs=False), name="services")
        yield services
        tg.cancel_scope.cancel()


@asynccontextmanager
async def _daemon(root: Path, model: ScriptedModel, bus: EventBus) -> AsyncIterator[Services]:
    """The daemon's services, serving."""
    async with _services(root, model, bus) as services, _serving(services):
        yield services


async def test_switch_under_load_answers_later_messages_in_the_new_session(tmp_path: Path) -> None:
    model = ScriptedModel(
        script=lambda req: Reply(text=f"re: {req.messages[-1].content[0].text}"),
        delay_s=0.01,
        chunk_words=1,
    )
    bus = EventBus()
    switching: list[SessionBeforeSwitch] = []
    ended: list[SessionShutdown] = []
    bus.on(SessionBeforeSwitch, switching.append)
    bus.on(SessionShutdown, ended.append)
    events: list[TurnEvent] = []
    async with _daemon(tmp_path / "home", model, bus) as services:
        home, db, trunk = services.home, services.db, services.trunk
        switch = services.gateway.commands["switch"]
        old_id = trunk.session.id  # type: ignore[union-attr]
        async with anyio.create_task_group() as tg:
            first = await trunk.submit("one two three four five six", observer=events.append)
            await _wait(
                lambda: any(isinstance(e, Delta) for e in events), "the first turn streaming"
            )
            result: dict[str, Any] = {}

            async def do_switch() -> None:
                result["switched"] = await switch({"reason": "test under load"})

            tg.start_soon(do_switch, name="switch")
            await _wait(lambda: trunk.held, "the hold")
            during = [await trunk.submit(f"during {i}", observer=events.append) for i in range(3)]
            await _wait(lambda: "switched" in result, "the switch")
            after = await trunk.submit("after", observer=events.append)
            done_ids = {first.turn_id, after.turn_id, *(d.turn_id for d in during)}
            await _wait(
                lambda: done_ids <= {e.turn_id for e in events if isinstance(e, TurnDone)},
                "every answer",
            )
            new_id = trunk.session.id  # type: ignore[union-attr]
        row = await db.fetchone(
            "SELECT previous_id, switch_reason FROM sessions WHERE id = ?", (new_id,)
        )
        kv = await db.fetchone("SELECT value FROM kv WHERE key = ?", (SWITCH_KEY,))
    assert new_id != old_id and result["switched"]["previous_id"] == old_id
    assert result["switched"]["session_id"] == new_id
    assert tuple(row) == (old_id, "test under load") and kv is None
    assert [s.session_id for s in switching] == [old_id]
    assert old_id in [e.session_id for e in ended]
    recs = _records(home)
    answered = {
        r["turn_id"]: r["_file"]
        for r in recs
        if r.get("type") == "turn_end" and r.get("status") == "answered"
    }
    assert answered[first.turn_id] == old_id  # the turn in progress finished where it started
    for entry in [*during, after]:
        assert answered[entry.turn_id] == new_id
    assert len([r for r in recs if r.get("type") == "turn_end"]) == 5  # each answered exactly once
    header = next(r for r in recs if r.get("type") == "session" and r["id"] == new_id)
    assert header["continues"] == old_id
    assert Inbox(home.inbox_file).load() == []
    # The new session's first request does not replay the old session's history.
    last = model.calls[-1]
    assert "one two three" not in json.dumps(
        [b.text for m in last.messages for b in m.content if hasattr(b, "text")]
    )


async def test_a_vetoed_switch_leaves_the_trunk_where_it_was(tmp_path: Path) -> None:
    bus = EventBus()
    bus.on(SessionBeforeSwitch, lambda e: Veto(reason="mid-thought"))
    async with _daemon(tmp_path / "home", ScriptedModel(script=["hi"]), bus) as services:
        trunk = services.trunk
        before = trunk.session.id  # type: ignore[union-attr]
        with pytest.raises(CommandBusy, match="mid-thought"):
            await services.gateway.commands["switch"]({"reason": "try"})
        assert trunk.session.id == before and not trunk.held  # type: ignore[union-attr]
        assert (
            await services.db.fetchone("SELECT value FROM kv WHERE key = ?", (SWITCH_KEY,)) is None
        )
        # Only an awake daemon switches: a wind-down is already on its way to a new session.
        services.lifecycle.transition(DaemonState.WINDING_DOWN, detail="test")
        with pytest.raises(CommandBusy, match="winding-down; a session switch needs it awake"):
            await services.gateway.commands["switch"]({})
        assert trunk.session.id == before  # type: ignore[union-attr]


async def test_a_switch_interrupted_by_a_crash_is_finished_at_the_next_start(
    tmp_path: Path,
) -> None:
    root = tmp_path / "home"
    model = ScriptedModel(script=lambda r: "ok")
    # The first daemon goes down before it answers anything: its trunk never serves. Its stop
    # touches neither the switch intent nor the inbox, so what it leaves on disk is what a crash
    # leaves (the daemon killed mid-switch is tests/test_daemon_lifecycle.py's).
    async with _services(root, model) as crashed:
        old = crashed.trunk.session.id  # type: ignore[union-attr]
        # The crash came after the intent was written and a message was accepted on hold.
        await crashed.trunk.kv.write_json(
            SWITCH_KEY,
            {"from": old, "to": "trunk-next", "reason": "nightly"},
            at=crashed.clock.now(),
        )
        entry = await crashed.trunk.inbox.put("arrived during the hold")
    events: list[TurnEvent] = []
    async with _services(root, model) as again:
        home, db = again.home, again.db
        assert again.trunk.session.id == "trunk-next"  # type: ignore[union-attr]
        again.trunk.attach(entry.id, events.append)
        async with _serving(again):
            await _wait(
                lambda: any(isinstance(e, TurnDone) for e in events),
                "the held message answered",
            )
        row = await db.fetchone(
            "SELECT previous_id, switch_reason FROM sessions WHERE id = 'trunk-next'"
        )
        assert tuple(row) == (old, "nightly")
        assert await db.fetchone("SELECT value FROM kv WHERE key = ?", (SWITCH_KEY,)) is None
    answered = [
        r for r in _records(home) if r.get("type") == "turn_end" and r.get("turn_id") == entry.id
    ]
    assert [r["_file"] for r in answered] == ["trunk-next"]


# -- working memory within the window --------------------------------------------------------


async def test_a_history_far_larger_than_the_window_never_makes_an_oversized_request(
    tmp_path: Path,
) -> None:
    """Twenty long turns, a huge message and a flood of tool output, against a 16k window."""
    counter = TokenCounter()
    sizer = RequestSizer(TokenCounter())  # an independent measure of what was sent

    async def flood(ctx: ToolContext, args: dict[str, Any]) -> str:
        return "log line with some words in it\n" * 3000

    tools = ToolRegistry(default_max_chars=200_000)
    tools.register(
        Tool(
            name="flood",
            description="prints a lot",
            input_schema={"type": "object", "properties": {}},
            handler=flood,
        )
    )

    def script(req: ModelRequest) -> Reply:
        last = req.messages[-1].content[0]
        text = getattr(last, "text", "")
        if "use the tool" in text:
            return Reply(tool_calls=(("flood", {}),))
        return Reply(text="a long answer " * 150)

    model = ScriptedModel(script=script)
    bus = EventBus()
    static_context(bus, "You are a test agent. " * 20)
    async with await Database.open(tmp_path / "db.sqlite") as db, bus:
        loop = AgentLoop(
            roles=_roles(model),
            tools=tools,
            bus=bus,
            clock=FakeClock(),
            counter=counter,
            context_window=16384,
        )
        budget = loop.budget()
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s", kind="trunk", now=FakeClock().now()
        )
        prompts = [f"question {i}: " + "tell me more about the garden " * 120 for i in range(20)]
        prompts += [
            "an enormous paste: " + "x y z " * 20_000,
            "use the tool please",
            "and a short one",
        ]
        with anyio.fail_after(30):
            for i, prompt in enumerate(prompts):
                result = await loop.run_turn(
                    session, turn_id=f"t{i}", prompt=prompt, observer=lambda e: None, ts="x"
                )
    assert budget.limit == int(16384 * 0.95) - 4096
    for req in model.calls:
        size = (
            sum(sizer.text(b.text) for b in req.system)
            + sizer.tools(req.tools)
            + sizer.messages(list(req.messages))
        )
        assert size <= RequestBudget(window=16384, reserve_output=req.max_tokens).limit, size
        assert req.messages[0].role == "user"
    # The newest turns are kept whole while older ones give way, and the report says so.
    assert result.report["request"]["dropped_turns"] > 0
    assert result.context_tokens > 16384  # the measured next request (unbounded) is over the window
    # The enormous paste went to the model shortened, with a marker, not whole.
    paste_request = next(
        r
        for r in model.calls
        if "an enormous paste"
        in json.dumps([getattr(b, "text", "") for b in r.messages[-1].content])
    )
    assert "not replayed to fit the context window" in paste_request.messages[-1].content[0].text  # type: ignore[union-attr]


async def test_compaction_approaching_fires_from_the_measured_next_request(tmp_path: Path) -> None:
    from daemon.events import CompactionApproaching

    bus = EventBus()
    static_context(bus)
    seen: list[CompactionApproaching] = []
    bus.on(CompactionApproaching, seen.append)
    # The model reports no usage at all: the measure must come from the request itself.
    from daemon.models.base import Usage

    model = ScriptedModel(script=lambda r: Reply(text="fine", usage=Usage()))
    async with await Database.open(tmp_path / "db.sqlite") as db, bus:
        loop = AgentLoop(
            roles=_roles(model),
            tools=ToolRegistry(),
            bus=bus,
            clock=FakeClock(),
            counter=TokenCounter(),
            context_window=8192,
        )
        loop.compaction_threshold = 0.5
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s", kind="trunk", now=FakeClock().now()
        )
        sizes = []
        with anyio.fail_after(20):
            for i in range(12):
                r = await loop.run_turn(
                    session, turn_id=f"t{i}", prompt="words " * 400, observer=lambda e: None, ts="x"
                )
                sizes.append(r.context_tokens)
    assert sizes == sorted(sizes) and sizes[-1] > 4096
    assert len(seen) == 1 and seen[0].used_tokens >= 4096 and seen[0].fraction >= 0.5


# -- context assembly cannot fail silently --------------------------------------------------


class _BrokenCounter(TokenCounter):
    """A token counter that fails: the assembler cannot finish."""

    def count(self, text: str) -> int:
        raise RuntimeError("tokenizer exploded")


async def test_a_failing_assembler_fails_the_turn_visibly(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    settings = load_settings(home.root)
    clock = FakeClock()
    bus = EventBus()
    assembler = ContextAssembler(
        home=home,
        settings=settings,
        view=None,
        router=TopicRouter(home, settings.topics),
        counter=_BrokenCounter(),
        clock=clock,
    )
    assembler.register(bus)
    assert (
        bus.policy(__import__("daemon.events", fromlist=["BeforeAgentStart"]).BeforeAgentStart)[0][
            "required"
        ]
        is True
    )
    model = ScriptedModel(script=["should never be asked"])
    events: list[TurnEvent] = []
    async with await Database.open(home.db_file) as db, bus:
        loop = AgentLoop(
            roles=_roles(model), tools=ToolRegistry(), bus=bus, clock=clock, counter=TokenCounter()
        )
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s", kind="trunk", now=clock.now()
        )
        with pytest.raises(ContextFailed, match="tokenizer exploded"):
            await loop.run_turn(
                session, turn_id="t0", prompt="hello", observer=events.append, ts="x"
            )
        async with Trunk(home=home, db=db, loop=loop, clock=clock) as trunk:
            async with anyio.create_task_group() as tg:
                await tg.start(trunk.serve)
                entry = await trunk.submit("hello again", observer=events.append)
                await _wait(lambda: any(isinstance(e, TurnFailed) for e in events), "the failure")
                tg.cancel_scope.cancel()
    failed = [e for e in events if isinstance(e, TurnFailed)]
    assert failed[0].turn_id == entry.turn_id and failed[0].code is ErrorCode.CONTEXT_FAILED
    assert "could not be assembled" in failed[0].message
    assert model.calls == []  # never sent on a bare prompt
    ends = [r for r in _records(home) if r.get("type") == "turn_end"]
    assert ends[-1]["status"] == "failed"


async def test_no_context_at_all_is_a_failure_not_a_bare_prompt(tmp_path: Path) -> None:
    model = ScriptedModel(script=["never"])
    bus = EventBus()
    async with await Database.open(tmp_path / "db.sqlite") as db, bus:
        loop = AgentLoop(
            roles=_roles(model),
            tools=ToolRegistry(),
            bus=bus,
            clock=FakeClock(),
            counter=TokenCounter(),
        )
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s", kind="trunk", now=FakeClock().now()
        )
        with pytest.raises(ContextFailed, match="no before_agent_start handler"):
            await loop.run_turn(session, turn_id="t0", prompt="hi", observer=lambda e: None, ts="x")
    assert model.calls == []


async def test_a_turn_finished_just_before_a_crash_is_not_answered_again(tmp_path: Path) -> None:
    root = tmp_path / "home"
    model = ScriptedModel(script=lambda r: "answer")
    # As above, the first daemon's stop finishes nothing the trunk left undone: a crash's state.
    async with _services(root, model) as crashed:
        trunk = crashed.trunk
        entry = await trunk.inbox.put("answered, then the power went")
        # The turn ran to its end in the transcript; the inbox never heard of it.
        await trunk.loop.run_turn(
            trunk.session,  # type: ignore[arg-type]
            turn_id=entry.id,
            prompt=entry.text,
            observer=lambda e: None,
            ts=crashed.clock.now().isoformat(),
        )
        assert len(model.calls) == 1
    async with _services(root, model) as again, _serving(again):
        await _wait(lambda: not again.trunk.inbox.pending(), "the entry finished")
    assert len(model.calls) == 1
    assert Inbox(again.home.inbox_file).load() == []
