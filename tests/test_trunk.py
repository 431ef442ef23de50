"""The trunk's pieces in-process: inbox durability, transcripts, history, the agent loop."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.agent.gateway import turn_frame
from daemon.agent.inbox import Inbox
from daemon.agent.loop import AgentLoop, ContextFailed
from daemon.agent.session import Session
from daemon.agent.transcript import Transcript
from daemon.agent.trunk import Trunk
from daemon.bus import EventBus, Veto
from daemon.clock import FakeClock
from daemon.durable import append_lines, read_jsonl
from daemon.events import (
    BeforeAgentStart,
    CompactionApproaching,
    Composer,
    Contribution,
    SessionShutdown,
    SystemNote,
    TurnContext,
)
from daemon.memory.embedders import HashEmbedder
from daemon.models.base import (
    ModelRequest,
    ModelUnavailable,
    SystemBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from daemon.models.ledger import UsageLedger
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.records import MessageRecord, parse_records
from daemon.services import Services, open_services
from daemon.settings import load_settings
from daemon.store.db import Database
from daemon.testing import Reply, ScriptedModel, static_context
from daemon.tokens import TokenCounter
from daemon.tools.registry import Tool, ToolContext, ToolRegistry

pytestmark = pytest.mark.anyio


async def test_inbox_survives_restart_and_keeps_order(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path, FakeClock())
    inbox.load()
    a = await inbox.put("first")
    b = await inbox.put("second")
    c = await inbox.put("third")
    await inbox.done(a.id)
    # A torn write at the end (crash mid-append) is ignored.
    with open(path, "ab") as fh:
        fh.write(b'{"op": "put", "id": "tor')
    again = Inbox(path, FakeClock())
    pending = again.load()
    assert [e.text for e in pending] == ["second", "third"]
    assert [e.id for e in pending] == [b.id, c.id]
    with anyio.fail_after(2):
        assert (await again.next()).id == b.id
    # Compaction left only the pending entries on disk.
    assert [r["id"] for r in read_jsonl(path)] == [b.id, c.id]


async def test_transcript_append_is_durable_and_torn_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    t = Transcript(path=path, session_id="s")
    await t.append(MessageRecord(id="1", ts="t", role="user", content="a"))
    with open(path, "ab") as fh:
        fh.write(b'{"type": "mess')  # crash mid-write
    await t.append(MessageRecord(id="2", ts="t", role="user", content="b"))
    assert [r["id"] for r in t.records()] == ["1", "2"]
    append_lines(path, ['{"type":"message","id":"3"}'])
    assert [r["id"] for r in read_jsonl(path)] == ["1", "2", "3"]


async def _env(
    tmp_path: Path,
    model: ScriptedModel,
    *,
    tools: ToolRegistry | None = None,
    bus: EventBus | None = None,
) -> tuple[Any, ...]:
    settings = load_settings(None)
    db = await Database.open(tmp_path / "db.sqlite")
    ledger = UsageLedger(db, settings.spend, FakeClock())
    roles = ModelRoles(settings, ledger, overrides={"trunk": model})
    if bus is None:
        bus = EventBus()
        static_context(bus)
    loop = AgentLoop(
        roles=roles,
        tools=tools or ToolRegistry(),
        bus=bus,
        clock=FakeClock(),
        counter=TokenCounter(),
    )
    return settings, db, ledger, roles, loop


async def test_loop_runs_tools_and_history_replays_them(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []

    async def add(ctx: ToolContext, args: dict[str, Any]) -> str:
        calls.append(args)
        return str(args["a"] + args["b"])

    tools = ToolRegistry()
    tools.register(
        Tool(
            name="add",
            description="add",
            input_schema={
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
            handler=add,
        )
    )
    model = ScriptedModel(
        script=[
            Reply(
                text="Let me add.", tool_calls=(("add", {"a": 2, "b": "x"}),)
            ),  # invalid: model sees an error
            Reply(tool_calls=(("add", {"a": 2, "b": 3}),)),
            Reply(text="It is 5."),
            Reply(text="Still 5."),
        ]
    )
    _, db, _, roles, loop = await _env(tmp_path, model, tools=tools)
    async with db, roles, loop.bus:
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s1", kind="trunk", now=FakeClock().now()
        )
        frames: list[dict[str, Any]] = []
        with anyio.fail_after(10):
            result = await loop.run_turn(
                session,
                turn_id="t1",
                prompt="what is 2+3?",
                observer=lambda e: frames.append(turn_frame(e)),
                ts="2026-01-01T00:00:00+00:00",
            )
        assert result.text == "Let me add.\n\nIt is 5."
        assert result.tool_calls == 2 and calls == [{"a": 2, "b": 3}]
        errors = [
            b for m in model.calls[1].messages for b in m.content if isinstance(b, ToolResultBlock)
        ]
        assert errors and errors[0].is_error and "invalid arguments" in errors[0].content
        tool_frames = [f for f in frames if f["type"] == "tool"]
        assert [f["phase"] for f in tool_frames] == ["started", "finished", "started", "finished"]
        assert tool_frames[1]["is_error"] is True
        # The next turn replays the whole first turn, tool calls and results included.
        with anyio.fail_after(10):
            await loop.run_turn(
                session,
                turn_id="t2",
                prompt="and again?",
                observer=lambda e: frames.append(turn_frame(e)),
                ts="2026-01-01T00:01:00+00:00",
            )
        history = model.calls[-1].messages
        assert [m.role for m in history] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
        rows = await db.fetchall(
            "SELECT role, content FROM messages WHERE session_id='s1' ORDER BY seq"
        )
        assert [r[0] for r in rows] == ["user", "assistant", "assistant", "user", "assistant"]


async def test_the_composer_builds_the_prompt_and_notes_follow_it_whatever_the_order(
    tmp_path: Path,
) -> None:
    """Contributions returned before and after the composer all reach it; notes come after
    the composed prompt; a second composer is left out; a composer that raises fails the turn."""
    bus = EventBus()
    seen: list[tuple[str, ...]] = []

    def compose(contributions: tuple[Contribution, ...]) -> TurnContext:
        seen.append(tuple(c.text for c in contributions))
        if any(c.text == "explode" for c in contributions):
            raise RuntimeError("cannot compose that")
        return TurnContext(
            system_blocks=(SystemBlock(text="COMPOSED " + " + ".join(seen[-1])),),
            report={"memory_origins": []},
        )

    bus.on(BeforeAgentStart, lambda e: SystemNote(text="NOTE EARLY"), priority=10, name="early")
    bus.on(BeforeAgentStart, lambda e: Contribution(layer="recall", text="a"), priority=20)
    bus.on(BeforeAgentStart, lambda e: Composer(compose=compose), priority=50, name="composer")
    bus.on(
        BeforeAgentStart,
        lambda e: Composer(compose=lambda c: TurnContext(system_blocks=(SystemBlock(text="X"),))),
        priority=60,
        name="second",
    )
    bus.on(
        BeforeAgentStart,
        lambda e: Contribution(layer="recall", text="explode" if "boom" in e.prompt else "b"),
        priority=70,
    )
    bus.on(BeforeAgentStart, lambda e: SystemNote(text="NOTE LATE"), priority=80, name="late")
    model = ScriptedModel(script=["hi"])
    _, db, _, roles, loop = await _env(tmp_path, model, bus=bus)
    async with db, roles, loop.bus:
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s1", kind="trunk", now=FakeClock().now()
        )
        with anyio.fail_after(10):
            await loop.run_turn(
                session, turn_id="t1", prompt="hello", observer=lambda e: None, ts="x"
            )
            with pytest.raises(ContextFailed, match="RuntimeError: cannot compose that"):
                await loop.run_turn(
                    session, turn_id="t2", prompt="boom", observer=lambda e: None, ts="x"
                )
        assert session.turn_ended("t2") == "failed"
    [request] = model.calls
    assert [b.text for b in request.system] == ["COMPOSED a + b", "NOTE EARLY", "NOTE LATE"]
    assert seen == [("a", "b"), ("a", "explode")]


async def test_context_from_gate_handlers_reaches_the_model_and_veto_stops(tmp_path: Path) -> None:
    bus = EventBus()

    def contribute(event: BeforeAgentStart) -> Veto | SystemNote:
        if "forbidden" in event.prompt:
            return Veto(reason="not today")
        return SystemNote(text="PERSONA", cache_breakpoint=True)

    bus.on(BeforeAgentStart, contribute)
    model = ScriptedModel(script=["hi"])
    _, db, _, roles, loop = await _env(tmp_path, model, bus=bus)
    async with db, roles, loop.bus:
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s1", kind="trunk", now=FakeClock().now()
        )
        with anyio.fail_after(10):
            await loop.run_turn(
                session, turn_id="t1", prompt="hello", observer=lambda e: None, ts="x"
            )
            vetoed = await loop.run_turn(
                session, turn_id="t2", prompt="forbidden", observer=lambda e: None, ts="x"
            )
        assert model.calls[0].system[0].text == "PERSONA"
        assert vetoed.vetoed == "not today" and len(model.calls) == 1


async def test_compaction_approaching_is_published_once(tmp_path: Path) -> None:
    bus = EventBus()
    static_context(bus)
    seen: list[CompactionApproaching] = []
    bus.on(CompactionApproaching, seen.append)
    model = ScriptedModel(script=lambda req: Reply(text="ok " * 50))
    _, db, _, roles, loop = await _env(tmp_path, model, bus=bus)
    loop.context_window = 200
    loop.compaction_threshold = 0.5
    async with db, roles, loop.bus:
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s1", kind="trunk", now=FakeClock().now()
        )
        with anyio.fail_after(10):
            for i in range(3):
                await loop.run_turn(
                    session, turn_id=f"t{i}", prompt="x " * 200, observer=lambda e: None, ts="x"
                )
    assert len(seen) == 1 and seen[0].fraction >= 0.5


@asynccontextmanager
async def _daemon(
    root: Path, trunk_model: Any, *, retry_s: float = 0.01, retry_max_s: float = 300.0
) -> AsyncIterator[Services]:
    """The daemon's services with `trunk_model` answering for the trunk, not yet serving."""
    home = Home(root)
    home.ensure()
    settings = load_settings(None)
    agent = settings.agent.model_copy(
        update={"unavailable_retry_s": retry_s, "unavailable_retry_max_s": retry_max_s}
    )
    async with open_services(
        home,
        settings.model_copy(update={"agent": agent}),
        FakeClock(),
        models={"trunk": trunk_model},
        embedder=HashEmbedder(),
        watch_files=False,
    ) as services:
        yield services


@asynccontextmanager
async def _serving(services: Services) -> AsyncIterator[None]:
    """Serve `services` (without the scheduled jobs) until the block exits."""
    async with anyio.create_task_group() as tg:
        await tg.start(partial(services.serve, jobs=False), name="services")
        yield
        tg.cancel_scope.cancel()


class _Flaky:
    """A provider that is down for the first `down` calls, then answers."""

    provider = "flaky"

    def __init__(self, down: int) -> None:
        self.down = down
        self.inner = ScriptedModel(script=lambda req: Reply(text="back online"))

    async def stream(self, request: ModelRequest):  # type: ignore[no-untyped-def]
        if self.down > 0:
            self.down -= 1
            raise ModelUnavailable("API unavailable after 5 attempts: 529 overloaded", status=529)
        async for ev in self.inner.stream(request):
            yield ev

    async def count_tokens(self, request: ModelRequest) -> int | None:
        return None

    async def aclose(self) -> None:
        return None


async def test_trunk_keeps_a_message_queued_through_an_outage_and_tells_it_once(
    tmp_path: Path,
) -> None:
    flaky = _Flaky(down=2)
    shutdowns: list[SessionShutdown] = []
    frames: list[dict[str, Any]] = []
    async with _daemon(tmp_path / "home", flaky) as services:
        home, trunk = services.home, services.trunk
        services.bus.on(SessionShutdown, shutdowns.append)
        async with _serving(services):
            with anyio.fail_after(10):
                accepted = await trunk.submit(
                    "are you there?", observer=lambda e: frames.append(turn_frame(e))
                )
                while not any(f["type"] == "done" for f in frames):
                    await anyio.sleep(0.01)
    errors = [f for f in frames if f["type"] == "error"]
    # Told once per outage, however many retries it takes.
    assert [e["code"] for e in errors] == ["model_unavailable"]
    assert trunk.waiting_for_model is None
    assert "saved" in errors[0]["message"]
    assert frames[-1]["type"] == "done" and frames[-1]["text"] == "back online"
    assert frames[-1]["turn_id"] == accepted.turn_id
    assert len(shutdowns) == 1
    assert Inbox(home.inbox_file).load() == []


async def test_the_backoff_follows_the_outage_attempts_that_status_shows(tmp_path: Path) -> None:
    """The delay doubles with the outage's own attempt count (what status reports), whatever
    happened to the turns in between, and starts again once the model is reached."""
    async with _daemon(
        tmp_path / "home", _Flaky(down=0), retry_s=2.0, retry_max_s=10.0
    ) as services:
        trunk, clock = services.trunk, services.clock
        delays = [trunk.retry.model_unreachable("down") for _ in range(4)]
        assert delays == [2.0, 4.0, 8.0, 10.0]
        waiting = trunk.waiting_for_model
        assert waiting is not None and waiting.attempts == 4
        assert waiting.next_retry == clock.now() + timedelta(seconds=10)
        trunk.retry.model_reached()
        assert trunk.retry.model_unreachable("down again") == 2.0


async def test_every_listener_on_a_queued_turn_hears_of_the_outage_and_is_answered_after(
    tmp_path: Path,
) -> None:
    flaky = _Flaky(down=10**9)
    frames: list[dict[str, Any]] = []
    async with _daemon(tmp_path / "home", flaky, retry_max_s=0.01) as services:
        home, trunk = services.home, services.trunk
        # Queued behind the first before the model is known to be down: told when it is.
        a = await trunk.submit("first", observer=lambda e: frames.append(turn_frame(e)))
        b = await trunk.submit("second", observer=lambda e: frames.append(turn_frame(e)))
        assert not trunk.tell_if_waiting(b.turn_id)  # nothing known to be wrong yet
        async with _serving(services):
            with anyio.fail_after(10):
                while {f.get("turn_id") for f in frames if f["type"] == "error"} != {
                    a.turn_id,
                    b.turn_id,
                }:
                    await anyio.sleep(0.01)
                waiting = trunk.waiting_for_model
                assert waiting is not None and "529" in waiting.error and waiting.attempts >= 1
                # Accepted during the outage: told right away (here, or by a retry that
                # came first: the retries spin on the fake clock), and only once.
                c = await trunk.submit("third", observer=lambda e: frames.append(turn_frame(e)))
                trunk.tell_if_waiting(c.turn_id)
                assert not trunk.tell_if_waiting(c.turn_id)
                assert [f["turn_id"] for f in frames if f["type"] == "error"].count(c.turn_id) == 1
                told = next(f for f in frames if f["type"] == "error" and f["turn_id"] == c.turn_id)
                assert told["code"] == "model_unavailable"
                assert "saved" in told["message"] and "2 messages ahead" in told["message"]
                on_disk = read_jsonl(home.inbox_file)
                assert [r["text"] for r in on_disk if r["op"] == "put"] == [
                    "first",
                    "second",
                    "third",
                ]
                assert not [r for r in on_disk if r["op"] == "done"]
                flaky.down = 0
                while sum(f["type"] == "done" for f in frames) < 3:
                    await anyio.sleep(0.01)
        errors = [f["turn_id"] for f in frames if f["type"] == "error"]
        assert sorted(errors) == sorted([a.turn_id, b.turn_id, c.turn_id])
        assert [f["turn_id"] for f in frames if f["type"] == "done"] == [
            a.turn_id,
            b.turn_id,
            c.turn_id,
        ]
        assert trunk.waiting_for_model is None
        assert Inbox(home.inbox_file).load() == []


async def test_cancel_stops_a_running_turn(tmp_path: Path) -> None:
    slow = ScriptedModel(
        script=lambda req: Reply(
            text=" ".join(["word"] * (400 if "long" in req.messages[-1].text else 3))
        ),
        delay_s=0.02,
    )
    frames: list[dict[str, Any]] = []
    async with _daemon(tmp_path / "home", slow) as services:
        trunk = services.trunk
        async with _serving(services):
            with anyio.fail_after(10):
                a = await trunk.submit(
                    "long answer please", observer=lambda e: frames.append(turn_frame(e))
                )
                b = await trunk.submit("then this", observer=lambda e: frames.append(turn_frame(e)))
                while not any(f["type"] == "delta" for f in frames):
                    await anyio.sleep(0.01)
                assert await trunk.cancel(a.turn_id)
                while not any(f["type"] == "done" and f["turn_id"] == b.turn_id for f in frames):
                    await anyio.sleep(0.01)
    assert any(
        f["type"] == "error" and f["code"] == "cancelled" and f["turn_id"] == a.turn_id
        for f in frames
    )
    records = [json.loads(x) for x in trunk.session.path.read_text().splitlines()]  # type: ignore[union-attr]
    ends = {r["turn_id"]: r["status"] for r in records if r["type"] == "turn_end"}
    assert ends == {a.turn_id: "cancelled", b.turn_id: "answered"}


def test_atomic_write_replaces_whole_and_leaves_no_temp_file(tmp_path: Path) -> None:
    from daemon.durable import write_atomic

    path = tmp_path / "sub" / "WAKE.md"
    write_atomic(path, "first version\n")
    write_atomic(path, "second version\n")
    assert path.read_text() == "second version\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["WAKE.md"]


async def test_a_reply_that_breaks_after_a_tool_step_resumes_without_running_the_tool_again(
    tmp_path: Path,
) -> None:
    """The stream breaks mid-reply after a tool ran: the message is kept (never failed), the
    retry goes on after the finished tool step, and the reply is delivered once."""
    ran: list[dict[str, Any]] = []

    async def water(ctx: ToolContext, args: dict[str, Any]) -> str:
        ran.append(args)
        return "watered"

    tools = ToolRegistry()
    tools.register(
        Tool(
            name="water",
            description="water a plant",
            input_schema={"type": "object", "properties": {"plant": {"type": "string"}}},
            handler=water,
        )
    )
    model = ScriptedModel(
        script=[
            Reply(text="On it.", tool_calls=(("water", {"plant": "fern"}),)),
            Reply(text="The fern is", error=ConnectionResetError("stream cut")),
            Reply(text="The fern is watered."),
            Reply(text="Nothing else."),
        ]
    )
    home = Home(tmp_path / "home")
    home.ensure()
    settings = load_settings(None)
    clock = FakeClock()
    async with await Database.open(home.db_file) as db:
        roles = ModelRoles(settings, None, overrides={"trunk": model})
        bus = EventBus()
        static_context(bus)
        loop = AgentLoop(roles=roles, tools=tools, bus=bus, clock=clock, counter=TokenCounter())
        frames: list[dict[str, Any]] = []
        async with (
            loop.bus,
            Trunk(home=home, db=db, loop=loop, clock=clock, retry_base_s=0.01) as trunk,
        ):
            async with anyio.create_task_group() as tg:
                await tg.start(trunk.serve)
                with anyio.fail_after(10):
                    await trunk.submit(
                        "water the fern", observer=lambda e: frames.append(turn_frame(e))
                    )
                    while not any(f["type"] == "done" for f in frames):
                        await anyio.sleep(0.01)
                    await trunk.submit(
                        "anything else?", observer=lambda e: frames.append(turn_frame(e))
                    )
                    while sum(f["type"] == "done" for f in frames) < 2:
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
            session = trunk.session
            assert session is not None
            history = session.history_turns()
    assert ran == [{"plant": "fern"}]
    errors = [f for f in frames if f["type"] == "error"]
    assert [e["code"] for e in errors] == ["model_unavailable"] and "saved" in errors[0]["message"]
    done = [f for f in frames if f["type"] == "done"]
    assert done[0]["text"] == "On it.\n\nThe fern is watered."
    # The retried request carried the finished tool step, not a second call of the tool.
    retry = model.calls[2]
    assert [m.role for m in retry.messages][-3:] == ["user", "assistant", "user"]
    assert any(isinstance(b, ToolResultBlock) for b in retry.messages[-1].content)
    # History replays the first turn whole and valid: one call, one result, roles alternate.
    first = history[0]
    assert [m.role for m in first] == ["user", "assistant", "user", "assistant"]
    assert Inbox(home.inbox_file).load() == []


async def test_a_finished_turn_replays_its_last_attempt_only(tmp_path: Path) -> None:
    """A tool call whose result never landed (a crash mid-tool) and the step taken again after
    it: history shows the step once, every call with its result, roles alternating."""
    async with await Database.open(tmp_path / "db.sqlite") as db:
        session = await Session.open(
            db=db, directory=tmp_path, session_id="trunk-x", kind="trunk", now=FakeClock().now()
        )
        t = "turn-1"
        await session.record(
            *parse_records(
                [
                    {
                        "type": "message",
                        "id": t,
                        "ts": "t",
                        "role": "user",
                        "content": "go",
                        "turn_id": t,
                    },
                    {
                        "type": "message",
                        "id": f"{t}-a0",
                        "ts": "t",
                        "role": "assistant",
                        "content": "first try",
                        "turn_id": t,
                        "has_tool_calls": True,
                    },
                    {
                        "type": "tool_call",
                        "turn_id": t,
                        "call_id": "c1",
                        "name": "water",
                        "input": {},
                    },
                ]
            )
        )
        assert session.finished_steps(t) == []
        await session.record(
            *parse_records(
                [
                    {
                        "type": "message",
                        "id": f"{t}-a0",
                        "ts": "t",
                        "role": "assistant",
                        "content": "second try",
                        "turn_id": t,
                        "has_tool_calls": True,
                    },
                    {
                        "type": "tool_call",
                        "turn_id": t,
                        "call_id": "c2",
                        "name": "water",
                        "input": {},
                    },
                    {
                        "type": "tool_result",
                        "turn_id": t,
                        "call_id": "c2",
                        "name": "water",
                        "content": "ok",
                        "is_error": False,
                    },
                ]
            )
        )
        assert len(session.finished_steps(t)) == 2
        await session.record(
            *parse_records(
                [
                    {
                        "type": "message",
                        "id": f"{t}-a1",
                        "ts": "t",
                        "role": "assistant",
                        "content": "done",
                        "turn_id": t,
                        "has_tool_calls": False,
                    },
                    {"type": "turn_end", "turn_id": t, "status": "answered"},
                ]
            )
        )
        [(_, messages)] = session.history()
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    calls = [b for m in messages for b in m.content if isinstance(b, ToolUseBlock)]
    assert [c.id for c in calls] == ["c2"]
    texts = [b.text for m in messages for b in m.content if isinstance(b, TextBlock)]
    assert texts == ["go", "second try", "done"]


async def test_a_full_disk_refuses_new_messages_only_while_a_kept_one_waits(tmp_path: Path) -> None:
    async with _daemon(tmp_path / "home", ScriptedModel([])) as services:
        trunk = services.trunk
        kept = await trunk.submit("call the plumber")
        trunk.retry.storage_refused("No space left on device")
        refusal = trunk.refusal()
        assert refusal is not None and "No space left on device" in refusal
        # The person cancels the kept message: nothing is left to retry the disk with, so
        # the next message is let through to try its own write.
        assert await trunk.cancel(kept.turn_id)
        assert trunk.refusal() is None
        assert trunk.storage_down is None
