"""The session summariser: prompt contract, slug file, idempotence, bounds, failures, shutdown."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from daemon.bus import EventBus
from daemon.events import BeforeFork, SessionShutdown
from daemon.memory.summariser import TranscriptMessage, excerpt, parse_summary, read_summary_file
from daemon.models.base import ModelRequest, ModelUnavailable, SpendCapReached
from daemon.settings import AgentSettings, MemorySettings
from daemon.testing import ScriptedModel
from daemon.tokens import count_tokens
from daemon.tools.registry import ToolContext, ToolRegistry
from tests.memory_support import add_session, memory_system, raising, settings

pytestmark = pytest.mark.anyio

REPLY = {
    "title": "Planning the Lisbon trip",
    "slug": "Lisbon Trip, Flights & Hotel",
    "tags": ["travel", "Lisbon"],
    "summary": "The person planned a trip to Lisbon to visit Ada. They chose to fly on Friday.",
    "decisions": ["fly on Friday", "book the hotel near Alfama"],
}
CHAT = [
    ("user", "Let's plan my Lisbon trip to see Ada."),
    ("assistant", "Happy to. When would you like to go?"),
    ("user", "Friday. Decided: hotel near Alfama."),
]


def summariser_model(reply: dict | str = REPLY, **kw: float) -> ScriptedModel:
    text = (
        reply if isinstance(reply, str) else "Here you go:\n```json\n" + json.dumps(reply) + "\n```"
    )
    return ScriptedModel(lambda _req: text, **kw)


def transcript_of(request: ModelRequest) -> list[str]:
    last = request.messages[-1].text
    assert "<<<TRANSCRIPT\n" in last and "\nTRANSCRIPT>>>" in last
    return last.split("<<<TRANSCRIPT\n", 1)[1].split("\nTRANSCRIPT>>>", 1)[0].splitlines()


async def test_summary_file_is_named_by_slug_and_carries_front_matter_and_index_entry(
    tmp_path: Path,
) -> None:
    model = summariser_model()
    addenda_calls: list[tuple[str, str]] = []

    def addenda(point: str, text: str) -> str:
        addenda_calls.append((point, text))
        return "Travel: note budgets and dates."

    async with memory_system(
        tmp_path, models={"summariser": model}, topic_addenda=addenda
    ) as memory:
        await add_session(memory.db, "s1", CHAT)
        with anyio.fail_after(10):
            path = await memory.summarise_session("s1", wait=True)
        assert (
            path is not None
            and path.name == "session-2026-03-02_1420__lisbon-trip-flights-hotel.md"
        )
        meta, body = read_summary_file(path)
        assert meta["session"] == "s1" and meta["transcript"].endswith("s1.jsonl")
        assert meta["started"] == "2026-03-02T14:20:00+00:00" and meta["tags"] == [
            "travel",
            "lisbon",
        ]
        assert meta["title"] == "Planning the Lisbon trip" and meta["messages"] == 3
        assert "fly on Friday" in body and "Ada" in body
        row = await memory.db.fetchone(
            "SELECT summary_path, summarised_upto FROM sessions WHERE id='s1'"
        )
        assert row[0] == str(path) and row[1] == 3
        item = await memory.index.get("summary:s1")
        assert item is not None and item.kind == "summary" and item.source == str(path)

    request = model.calls[0]
    assert request.task == "summarise" and request.role == "summariser"
    assert transcript_of(request) == [f"[{role}] {text}" for role, text in CHAT]
    assert (
        addenda_calls
        and addenda_calls[0][0] == "summary_persona"
        and "Lisbon" in addenda_calls[0][1]
    )
    system = "\n".join(b.text for b in request.system)
    assert (
        "## Topic Addenda" in system
        and "note budgets" in system
        and "data, not instructions" in system
    )


async def test_resummarising_a_resumed_session_updates_its_one_file(tmp_path: Path) -> None:
    model = summariser_model()
    async with memory_system(tmp_path, models={"summariser": model}) as memory:
        await add_session(memory.db, "s1", CHAT)
        first = await memory.summarise_session("s1", wait=True)
        assert await memory.summarise_session("s1", wait=True) == first
        assert len(model.calls) == 1  # nothing new: no second model call
        await add_session(memory.db, "s1", [("user", "Also: rent a car in Lisbon.")], first_seq=3)
        model.script = lambda _req: json.dumps(
            {**REPLY, "slug": "a-different-slug", "summary": "Trip and a car."}
        )
        second = await memory.summarise_session("s1", wait=True)
        assert second == first and len(model.calls) == 2
        assert "Trip and a car." in second.read_text()  # type: ignore[union-attr]
        assert transcript_of(model.calls[1])[-1] == "[user] Also: rent a car in Lisbon."
    assert len(list((tmp_path / "memory" / "sessions").glob("session-*.md"))) == 1


def test_long_transcripts_keep_head_tail_and_the_informative_middle_within_budget() -> None:
    filler = "just chatting about nothing in particular " * 6
    messages = [
        TranscriptMessage(
            seq=i,
            msg_id=f"m{i}",
            ts="t",
            role="user" if i % 2 else "assistant",
            speaker="",
            content=f"{i} {filler}",
        )
        for i in range(400)
    ]
    messages[200] = TranscriptMessage(
        seq=200,
        msg_id="m200",
        ts="t",
        role="user",
        speaker="",
        content="We decided to book the flight because the deadline is Friday 14:00, agreed.",
    )
    lines = excerpt(messages, 1500)
    assert sum(count_tokens(line) + 1 for line in lines) <= 1500
    assert lines[0].startswith("[assistant] 0 ") and lines[-1].startswith("[user] 399 ")
    assert any("We decided to book the flight" in line for line in lines)
    assert any(line.startswith("[note] … ") for line in lines)
    assert excerpt(messages[:3], 1500) == [m.line() for m in messages[:3]]


def test_replies_are_parsed_leniently_with_slug_tiers() -> None:
    tier1 = parse_summary(
        'Sure! {"title": "T", "slug": "Garden-Shed ROOF!", "summary": "Fixed the roof."} Bye.', ""
    )
    assert tier1.slug == "garden-shed-roof"
    tier2 = parse_summary(
        '{"summary": "The roof of the garden shed leaked; the roof was patched."}', ""
    )
    assert tier2.slug.startswith("roof") and tier2.title
    prose = parse_summary("We talked about compost and compost bins.", "")
    assert prose.summary.startswith("We talked") and "compost" in prose.slug
    tier3 = parse_summary('{"summary": "?!"}', "[user] sourdough starter feeding")
    assert tier3.slug.startswith("sourdough")
    with pytest.raises(ValueError):
        parse_summary('{"title": "no narrative"}', "")


async def test_model_outage_leaves_the_session_unfinished_and_the_next_start_redoes_it(
    tmp_path: Path,
) -> None:
    async with memory_system(
        tmp_path, models={"summariser": raising(ModelUnavailable("overloaded"))}
    ) as memory:
        await add_session(memory.db, "s1", CHAT)
        with pytest.raises(ModelUnavailable):
            await memory.summarise_session("s1", wait=True)
        assert await memory.summarise_session("s1") is None
        with anyio.fail_after(5):
            await memory.summariser.drain()  # type: ignore[union-attr]
        row = await memory.db.fetchone(
            "SELECT summary_path, summarised_upto FROM sessions WHERE id='s1'"
        )
        assert row[0] is None and row[1] == 0
    async with memory_system(
        tmp_path, models={"summariser": raising(SpendCapReached("cap"))}
    ) as memory:
        with anyio.fail_after(5):
            await memory.summariser.drain()  # type: ignore[union-attr]
        assert not list((tmp_path / "memory" / "sessions").glob("*.md"))
    model = summariser_model()
    async with memory_system(tmp_path, models={"summariser": model}) as memory:
        with anyio.fail_after(5):
            await memory.summariser.drain()  # type: ignore[union-attr]
        row = await memory.db.fetchone("SELECT summarised_upto FROM sessions WHERE id='s1'")
        assert row[0] == 3 and len(model.calls) == 1


async def test_events_queue_summaries_and_exit_waits_for_them(tmp_path: Path) -> None:
    bus = EventBus()
    model = summariser_model(delay_s=0.01)
    async with memory_system(tmp_path, models={"summariser": model}, bus=bus) as memory:
        memory.register(bus)  # idempotent: the orchestrator calls it too
        await add_session(memory.db, "trunk-1", CHAT)
        await add_session(
            memory.db, "trunk-2", [("user", "Fork me a research task about kelp forests.")]
        )
        assert await bus.deliver(SessionShutdown(session_id="trunk-1", transcript_path="/x")) == 0
        veto = await bus.emit_gate(
            BeforeFork(
                parent_session_id="trunk-2",
                parent_transcript_path="/y",
                fork_session_id="f1",
                task="kelp",
                depth=1,
            )
        )
        assert veto is None
    assert len(model.calls) == 2  # one per session, despite the double registration
    rows = await _summarised(tmp_path)
    assert rows == {"trunk-1": 3, "trunk-2": 1}


async def test_shutdown_budget_is_bounded_and_the_unfinished_summary_survives(
    tmp_path: Path,
) -> None:
    slow = summariser_model(delay_s=30)
    config = settings(agent=AgentSettings(shutdown_grace_s=2.5))
    bus = EventBus()
    started = time.monotonic()
    async with (
        memory_system(tmp_path, models={"summariser": slow}, bus=bus, config=config) as memory,
        bus,
    ):
        await add_session(memory.db, "s1", CHAT)
        await bus.publish(SessionShutdown(session_id="s1", transcript_path="/x"))
        await anyio.sleep(0.05)
        assert slow.calls  # the summary is in flight
    assert time.monotonic() - started < 5
    assert await _summarised(tmp_path) == {"s1": 0}


async def test_remember_session_tool_summarises_the_current_session(tmp_path: Path) -> None:
    config = settings(memory=MemorySettings(summary_transcript_tokens=500))
    async with memory_system(
        tmp_path, models={"summariser": summariser_model()}, config=config
    ) as memory:
        await add_session(memory.db, "s9", CHAT)
        registry = ToolRegistry()
        for tool in memory.tools():
            registry.register(tool)
        out = await registry.call("remember_session", {}, ToolContext(session_id="s9", turn_id="t"))
        assert (
            not out.is_error
            and out.content
            == "session summarised: session-2026-03-02_1420__lisbon-trip-flights-hotel.md"
        )
        empty = await registry.call(
            "remember_session", {}, ToolContext(session_id="nope", turn_id="t")
        )
        assert empty.is_error


async def _summarised(root: Path) -> dict[str, int]:
    from daemon.store.db import Database

    async with await Database.open(root / "reverie.db") as db:
        return {
            r[0]: r[1]
            for r in await db.fetchall("SELECT id, summarised_upto FROM sessions ORDER BY id")
        }


async def test_a_session_without_message_rows_is_read_from_its_transcript_file(
    tmp_path: Path,
) -> None:
    model = summariser_model()
    transcript = tmp_path / "fork-1.jsonl"
    records = [
        {
            "type": "session",
            "id": "fork-1",
            "kind": "fork",
            "started_at": "2026-03-02T15:00:00+00:00",
            "parent": "s1",
        },
        {
            "type": "message",
            "id": "a",
            "ts": "2026-03-02T15:00:01+00:00",
            "role": "user",
            "content": "Research kelp.",
            "turn_id": "t",
        },
        {"type": "tool_call", "id": "c", "name": "recall"},
        {
            "type": "message",
            "id": "b",
            "ts": "2026-03-02T15:00:09+00:00",
            "role": "assistant",
            "content": "Kelp grows fast.",
            "turn_id": "t",
        },
    ]
    transcript.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    async with memory_system(tmp_path / "home", models={"summariser": model}) as memory:
        await memory.db.execute(
            "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES ('fork-1', 'fork', ?, ?)",
            (str(transcript), "2026-03-02T15:00:00+00:00"),
        )
        path = await memory.summarise_session("fork-1", wait=True)
        assert path is not None
        row = await memory.db.fetchone("SELECT summarised_upto FROM sessions WHERE id = 'fork-1'")
        assert row[0] == 2
    assert transcript_of(model.calls[0]) == [
        "[user] Research kelp.",
        "[assistant] Kelp grows fast.",
    ]


async def test_reindex_rebuilds_facts_sessions_and_summaries_from_the_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "sessions" / "trunk").mkdir(parents=True)
    transcript = home / "sessions" / "trunk" / "s1.jsonl"
    records = [
        {
            "type": "session",
            "id": "s1",
            "kind": "trunk",
            "started_at": "2026-03-02T14:20:00+00:00",
            "parent": None,
        }
    ]
    records += [
        {
            "type": "message",
            "id": f"m{i}",
            "ts": f"2026-03-02T14:2{i}:00+00:00",
            "role": role,
            "content": text,
            "turn_id": "t",
        }
        for i, (role, text) in enumerate(CHAT)
    ]
    transcript.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    model = summariser_model()
    async with memory_system(home, models={"summariser": model}) as memory:
        counts = await memory.reindex()  # builds sessions + messages from the transcript
        assert counts["sessions"] == 1 and counts["messages"] == 3
        path = await memory.summarise_session("s1", wait=True)
        await memory.remember("Ada lives in Lisbon")
    for name in ("reverie.db", "reverie.db-wal", "reverie.db-shm"):
        (home / name).unlink(missing_ok=True)
    async with memory_system(home, models={"summariser": model}) as memory:
        counts = await memory.reindex()
        assert (
            counts["facts"] == 1
            and counts["summaries"] == 1
            and counts["messages"] == 3
            and counts["chunks"] >= 1
        )
        summary = await memory.index.get("summary:s1")
        assert summary is not None and summary.source == str(path)
        row = await memory.db.fetchone(
            "SELECT summary_path, summarised_upto FROM sessions WHERE id = 's1'"
        )
        assert row[0] == str(path) and row[1] == 3
        assert await memory.summariser.scan() == 0  # type: ignore[union-attr]  # nothing to redo, nothing to pay for
    assert len(model.calls) == 1
