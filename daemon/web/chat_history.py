"""The chat page's opening history: the trunk session's last turns, with their tool lines.

A turn reads as the page drew it live: what the person said, the reply, and under it one line
per tool call — done or failed, with the call's one-line summary — and, under a `delegate`
call, a line for each fork it started (its status and result) with the fork's own calls
under it, indented by depth. Everything comes from what the daemon recorded: the trunk's
transcript (its calls and their results), the fork lineage, and each fork's transcript (a
fork whose transcript was pruned shows its own line only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from daemon.agent.transcript import Transcript
from daemon.delegate.lineage import ForkLineage, ForkRow
from daemon.models.base import Message, ToolResultBlock, ToolUseBlock
from daemon.records import Record, ToolCallRecord, ToolResultRecord
from daemon.tools.summary import summarise_call

if TYPE_CHECKING:
    from daemon.services import Services

# The chat page opens with this many of the session's last turns.
HISTORY_TURNS = 20
# A fork's result on its line is cut to this many characters (as the live line is).
RESULT_CHARS = 200


@dataclass(frozen=True, kw_only=True)
class ToolLine:
    """One line under a reply: a tool call, or a fork and how it ended."""

    name: str
    what: str
    status: str  # done | failed | running (a fork that has not ended)
    depth: int = 0
    fork_id: str = ""

    @property
    def label(self) -> str:
        shown = f"fork {self.fork_id}" if self.name == "fork" and self.fork_id else self.name
        return f"{shown} — {self.what}" if self.what else shown


@dataclass(kw_only=True)
class ShownTurn:
    turn_id: str
    person: str
    reply: str
    tools: list[ToolLine] = field(default_factory=list)
    # Being answered now: the page's live stream carries on from its tool steps so far.
    running: bool = False


@dataclass(frozen=True, kw_only=True)
class _Call:
    turn_id: str
    call_id: str
    name: str
    input: Any
    failed: bool


async def recent_turns(services: Services, limit: int = HISTORY_TURNS) -> list[ShownTurn]:
    """The trunk session's last `limit` conversation turns, oldest first, with their tool lines."""
    session = services.trunk.session
    if session is None:
        return []
    current = services.trunk.current_turn
    shown: list[tuple[ShownTurn, list[_Call]]] = []
    for turn_id, messages in session.history():
        if turn_id.startswith("schedule:") or not messages:
            continue  # a scheduled task's note, not a conversation
        if turn_id == current:
            # Not interrupted, only unfinished: its whole tool steps so far, no reply yet.
            steps = session.finished_steps(turn_id)
            turn = ShownTurn(turn_id=turn_id, person=messages[0].text, reply="", running=True)
            shown.append((turn, _calls(turn_id, steps)))
            continue
        reply = next((m.text for m in reversed(messages) if m.role == "assistant" and m.text), "")
        turn = ShownTurn(turn_id=turn_id, person=messages[0].text, reply=reply)
        shown.append((turn, _calls(turn_id, messages)))
    shown = shown[-limit:]
    turn_ids = [t.turn_id for t, calls in shown if any(c.name == "delegate" for c in calls)]
    forks = await _forks(services, session.id, turn_ids)
    out = []
    for turn, calls in shown:
        turn.tools = await _lines(services, calls, forks, parent=session.id)
        out.append(turn)
    return out


def _calls(turn_id: str, messages: list[Message]) -> list[_Call]:
    """The turn's tool calls in the order made, each with whether its result was an error."""
    failed = {
        b.tool_use_id: b.is_error
        for m in messages
        for b in m.content
        if isinstance(b, ToolResultBlock)
    }
    return [
        _Call(
            turn_id=turn_id,
            call_id=b.id,
            name=b.name,
            input=b.input,
            failed=failed.get(b.id, False),
        )
        for m in messages
        if m.role == "assistant"
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]


async def _forks(services: Services, root: str, turn_ids: list[str]) -> dict[str, list[ForkRow]]:
    """The forks of the trunk session `root`, by the session that started them (only when a
    shown turn delegated)."""
    if not turn_ids:
        return {}
    by_parent: dict[str, list[ForkRow]] = {}
    for row in await ForkLineage(services.db).all():
        if row.root_session_id == root:
            by_parent.setdefault(row.parent_session_id, []).append(row)
    return by_parent


async def _lines(
    services: Services,
    calls: list[_Call],
    forks: dict[str, list[ForkRow]],
    *,
    parent: str,
    depth: int = 0,
    fork_id: str = "",
) -> list[ToolLine]:
    lines = []
    for call in calls:
        tool = services.tools.get(call.name)
        lines.append(
            ToolLine(
                name=call.name,
                what=summarise_call(call.name, call.input, subject=tool.subject if tool else None),
                status="failed" if call.failed else "done",
                depth=depth,
                fork_id=fork_id,
            )
        )
        if call.name != "delegate":
            continue
        started = [
            f
            for f in forks.get(parent, [])
            if f.parent_call_id == call.call_id
            or (f.parent_call_id is None and f.parent_turn_id == call.turn_id)
        ]
        for fork in started:
            lines.append(_fork_line(fork))
            records = await anyio.to_thread.run_sync(_read_fork, fork)
            lines += await _lines(
                services,
                _fork_calls(records),
                forks,
                parent=fork.id,
                depth=fork.depth,
                fork_id=fork.id,
            )
    return lines


def _fork_line(fork: ForkRow) -> ToolLine:
    result = " ".join((fork.summary or fork.stop_reason or "").split())[:RESULT_CHARS]
    status = "running" if fork.status == "running" else "done"
    if fork.status not in ("running", "complete"):
        status = "failed"
    return ToolLine(
        name="fork",
        fork_id=fork.id,
        what=f"{fork.status}: {result}" if result else str(fork.status),
        status=status,
        depth=fork.depth,
    )


def _read_fork(fork: ForkRow) -> list[Record]:
    path = Path(fork.transcript_path)
    if fork.retained == "pruned" or not path.is_file():
        return []
    try:
        return Transcript(path=path, session_id=fork.id).read()
    except (OSError, ValueError):
        return []  # unreadable: the fork's own line says how it ended


def _fork_calls(records: list[Record]) -> list[_Call]:
    # A call whose result never landed (the fork was stopped mid-call) has no line.
    failed = {r.call_id: r.is_error for r in records if isinstance(r, ToolResultRecord)}
    return [
        _Call(
            turn_id=r.turn_id,
            call_id=r.call_id,
            name=r.name,
            input=dict(r.input),
            failed=failed[r.call_id],
        )
        for r in records
        if isinstance(r, ToolCallRecord) and r.call_id in failed
    ]
