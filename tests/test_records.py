"""Transcript records: the typed lines read and write the JSONL the daemon has always written.

The files under tests/golden/transcripts were written by the daemon before the records were
typed (a trunk turn with a delegate call, forks that completed, were cancelled and were
stopped, a vetoed turn, a turn whose context failed), and since (tool calls the person
approved, declined by timeout or by absence, and allowed by a saved answer); they must still load, and write back
byte for byte.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.agent.loop import AgentLoop
from daemon.agent.session import Session
from daemon.agent.transcript import Transcript
from daemon.bus import EventBus, Veto
from daemon.clock import FakeClock
from daemon.delegate.lineage import ForkStatus, row_from_transcript
from daemon.events import BeforeAgentStart, SystemNote
from daemon.memory.transcripts import read_session_header, read_transcript
from daemon.models.base import TextBlock, ToolResultBlock, ToolUseBlock
from daemon.models.ledger import UsageLedger
from daemon.models.roles import ModelRoles
from daemon.records import (
    ApprovalRecord,
    ForkEnd,
    MessageRecord,
    OtherRecord,
    SessionStart,
    ToolCallRecord,
    ToolResultRecord,
    TurnEnd,
    TurnStatus,
    parse_record,
)
from daemon.settings import load_settings
from daemon.store.db import Database
from daemon.testing import Reply, ScriptedModel
from daemon.tokens import TokenCounter
from daemon.tools.registry import Tool, ToolContext, ToolRegistry

GOLDEN = Path(__file__).parent / "golden" / "transcripts"
FILES = sorted(GOLDEN.glob("*.jsonl"))
TYPED = {
    "session": SessionStart,
    "message": MessageRecord,
    "tool_call": ToolCallRecord,
    "tool_result": ToolResultRecord,
    "turn_end": TurnEnd,
    "fork_end": ForkEnd,
    "approval": ApprovalRecord,
}


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_golden_transcripts_cover_every_record_type_and_turn_status() -> None:
    records = [json.loads(line) for path in FILES for line in _lines(path)]
    assert {r["type"] for r in records} == set(TYPED)
    statuses = {r["status"] for r in records if r["type"] == "turn_end"}
    assert statuses == {s.value for s in TurnStatus}


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_line_written_before_parses_typed_and_writes_back_byte_for_byte(path: Path) -> None:
    for line in _lines(path):
        obj = json.loads(line)
        record = parse_record(obj)
        assert isinstance(record, TYPED[obj["type"]]), line
        assert record.to_json() == obj
        assert json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":")) == line


@pytest.mark.anyio
async def test_a_transcript_written_before_rebuilds_its_history(tmp_path: Path) -> None:
    shutil.copy(GOLDEN / "trunk-tools.jsonl", tmp_path / "trunk-1.jsonl")
    before = (tmp_path / "trunk-1.jsonl").read_bytes()
    async with await Database.open(tmp_path / "db.sqlite") as db:
        session = await Session.open(
            db=db, directory=tmp_path, session_id="trunk-1", kind="trunk", now=FakeClock().now()
        )
        [(turn, messages)] = session.history()
        assert session.turn_ended("t1") == TurnStatus.ANSWERED
        assert session.last_reply().startswith("Done: [fork fork-20260303-100000-b6b6de")
        rows = await db.fetchall("SELECT msg_id, role FROM messages ORDER BY seq")
    assert turn == "t1"
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    [call] = messages[1].content
    assert isinstance(call, ToolUseBlock) and call.name == "delegate"
    assert call.input == {
        "task": "survey the kelp farms",
        "context": "The person (zanzibarian) wants numbers.",
    }
    [result] = messages[2].content
    assert isinstance(result, ToolResultBlock) and result.tool_use_id == call.id
    assert isinstance(messages[3].content[0], TextBlock)
    assert [tuple(r) for r in rows] == [("t1", "user"), ("t1-a1", "assistant")]
    # Opening it reindexed the messages and wrote nothing: the file is as it was.
    assert (tmp_path / "trunk-1.jsonl").read_bytes() == before


def test_an_older_or_unknown_line_is_read_with_defaults_and_kept_whole() -> None:
    bare = parse_record({"type": "turn_end", "turn_id": "t1", "status": "answered"})
    assert bare == TurnEnd(turn_id="t1", status=TurnStatus.ANSWERED, ts="")
    message = parse_record({"type": "message", "id": "m1", "role": "user", "content": "hi"})
    assert isinstance(message, MessageRecord) and message.turn_id is None
    assert message.to_json() == {
        "type": "message",
        "id": "m1",
        "ts": "",
        "role": "user",
        "content": "hi",
    }
    later = {"type": "checkpoint", "turn_id": "t1", "note": {"kept": True}}
    other = parse_record(later)
    assert isinstance(other, OtherRecord) and other.to_json() == later
    odd = parse_record({"type": "turn_end", "turn_id": "t2", "status": "paused", "ts": "x"})
    assert isinstance(odd, TurnEnd) and odd.to_json()["status"] == "paused"


@pytest.mark.anyio
async def test_todays_turns_write_the_lines_the_golden_files_hold(tmp_path: Path) -> None:
    """An answered turn with a tool call, a vetoed turn and a failed one, written now, have
    the same keys in the same order as the lines written before."""

    async def add(ctx: ToolContext, args: dict[str, Any]) -> str:
        return str(args["a"] + args["b"])

    tools = ToolRegistry()
    tools.register(
        Tool(
            name="add",
            description="add",
            input_schema={"type": "object", "properties": {"a": {}, "b": {}}},
            handler=add,
        )
    )
    bus = EventBus()

    def context(event: BeforeAgentStart) -> Veto | SystemNote:
        if event.prompt == "forbidden":
            return Veto(reason="not today")
        if event.prompt == "broken":
            raise RuntimeError("no context today")
        return SystemNote(text="You are a test agent.")

    bus.on(BeforeAgentStart, context, required=True, name="context")
    model = ScriptedModel(
        script=[Reply(text="Adding.", tool_calls=(("add", {"a": 2, "b": 3}),)), Reply(text="5")]
    )
    settings = load_settings(None)
    async with await Database.open(tmp_path / "db.sqlite") as db, bus:
        roles = ModelRoles(
            settings, UsageLedger(db, settings.spend, FakeClock()), overrides={"trunk": model}
        )
        loop = AgentLoop(
            roles=roles, tools=tools, bus=bus, clock=FakeClock(), counter=TokenCounter()
        )
        session = await Session.open(
            db=db, directory=tmp_path, session_id="s1", kind="trunk", now=FakeClock().now()
        )
        with anyio.fail_after(10):
            await loop.run_turn(
                session, turn_id="t1", prompt="add", observer=lambda e: None, ts="x"
            )
            await loop.run_turn(
                session, turn_id="t2", prompt="forbidden", observer=lambda e: None, ts="x"
            )
            with pytest.raises(Exception, match="no context today"):
                await loop.run_turn(
                    session, turn_id="t3", prompt="broken", observer=lambda e: None, ts="x"
                )

    def shape(obj: dict[str, Any]) -> tuple[str, ...]:
        key = obj["type"]
        if key == "turn_end":
            key += ":" + obj["status"]
        if key == "message":
            key += ":" + obj["role"] + (":tools" if "has_tool_calls" in obj else "")
        return (key, *obj)

    golden = {
        shape(json.loads(line))[0]: shape(json.loads(line))
        for path in FILES
        for line in _lines(path)
        if json.loads(line)["type"] != "session" or json.loads(line)["kind"] == "trunk"
    }
    written = [shape(r) for r in Transcript(path=session.path, session_id="s1").records()]
    kinds = {w[0] for w in written}
    assert kinds >= {
        "session",
        "message:user",
        "message:assistant:tools",
        "tool_call",
        "tool_result",
        "turn_end:answered",
        "turn_end:vetoed",
        "turn_end:failed",
    }
    for w in written:
        assert w == golden[w[0]], w


def test_the_lineage_row_is_rebuilt_from_a_fork_transcript_written_before() -> None:
    complete = row_from_transcript(GOLDEN / "fork-complete.jsonl")
    cancelled = row_from_transcript(GOLDEN / "fork-cancelled.jsonl")
    assert complete is not None and cancelled is not None
    fork_id, parent, parent_turn, parent_call, root, depth, task, status = complete[:8]
    assert (fork_id, parent, root, depth, task) == (
        "fork-20260303-100000-13bfd3",
        "fork-20260303-100000-b6b6de",
        "trunk-1",
        2,
        "count the northern farm",
    )
    assert (parent_turn, parent_call) == ("fork-20260303-100000-b6b6de-t1", "toolu_scripted_2")
    assert status == ForkStatus.COMPLETE and complete[8] == "success" and complete[11] == 5304
    assert cancelled[7] == "cancelled" and cancelled[10] == "the parent's turn was cancelled"
    assert cancelled[8] is None and cancelled[9] is None and cancelled[14]
    assert row_from_transcript(GOLDEN / "trunk-tools.jsonl") is None


def test_memory_reads_the_conversation_of_a_transcript_written_before() -> None:
    header = read_session_header(GOLDEN / "fork-complete.jsonl")
    assert header is not None
    assert (header.id, header.kind, header.parent) == (
        "fork-20260303-100000-13bfd3",
        "fork",
        "fork-20260303-100000-b6b6de",
    )
    assert header.started_at is not None and header.started_at.year == 2026
    lines = read_transcript(GOLDEN / "trunk-tools.jsonl")
    assert [(m.session, m.id, m.role, m.turn_id) for m in lines] == [
        ("trunk-1", "t1", "user", "t1"),
        ("trunk-1", "t1-a1", "assistant", "t1"),
    ]
