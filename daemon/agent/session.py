"""A conversation session: its transcript, its rows in the index, and the history it replays.

The JSONL transcript is the truth; the `messages` table is an index of it written right
after. History for the model is rebuilt from the transcript: complete turns in full, and
for a turn that never finished (crash, cancel) only the person's message.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.agent.transcript import Transcript
from daemon.models.base import Block, Message, TextBlock, ToolResultBlock, ToolUseBlock
from daemon.records import (
    MessageRecord,
    Record,
    ScheduleFired,
    SessionStart,
    ToolCallRecord,
    ToolResultRecord,
    TurnEnd,
    TurnStatus,
)
from daemon.store.db import Database
from daemon.store.sessions import IndexedMessage, SessionsRepo


def new_session_id(kind: str, when: datetime) -> str:
    import uuid

    return f"{kind}-{when.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


@dataclass
class Session:
    """One session (trunk or fork): append records, index messages, replay history."""

    id: str
    kind: str
    transcript: Transcript
    db: Database
    started_at: datetime
    parent_id: str | None = None
    _seq: int = 0
    _records: list[Record] = field(default_factory=list)
    # Kept as records are added, so a turn does not rescan the whole transcript for them.
    _message_ids: set[str] = field(default_factory=set)
    _last_reply: str = ""

    @classmethod
    async def open(
        cls,
        *,
        db: Database,
        directory: Path,
        session_id: str,
        kind: str,
        now: datetime,
        parent_id: str | None = None,
        header: dict[str, Any] | None = None,
    ) -> Session:
        """Open (resume) or create a session and its transcript (`header` adds to a new one's first line)."""
        path = directory / f"{session_id}.jsonl"
        transcript = Transcript(path=path, session_id=session_id)
        records = transcript.read()
        started = now
        if records and isinstance(records[0], SessionStart) and records[0].started_at:
            started = datetime.fromisoformat(records[0].started_at)
        session = cls(
            id=session_id,
            kind=kind,
            transcript=transcript,
            db=db,
            started_at=started,
            parent_id=parent_id,
        )
        session._records = []
        session._remember(records)
        if not records:
            first = SessionStart(
                id=session_id,
                kind=kind,
                started_at=now.isoformat(),
                parent=parent_id,
                extra=header or {},
            )
            await transcript.append(first)
            session._remember([first])
        index = SessionsRepo(db)
        await index.add(
            session_id,
            kind=kind,
            parent_id=parent_id,
            transcript_path=str(path),
            started_at=session.started_at.isoformat(),
        )
        session._seq = await index.last_seq(session_id)
        await session._reindex_missing()
        return session

    async def _reindex_missing(self) -> None:
        """Index transcript messages the database missed (a crash between the two writes)."""
        known = await SessionsRepo(self.db).message_ids(self.id)
        for rec in self._records:
            if isinstance(rec, MessageRecord) and rec.id not in known:
                await self._index_message(rec)

    async def _index_message(self, rec: MessageRecord) -> None:
        self._seq += 1
        # While a PostgreSQL server is away the row is queued in the home and applied when it
        # is back (the transcript, written first, holds the message either way).
        await SessionsRepo(self.db).index_message(
            IndexedMessage(
                session_id=self.id,
                msg_id=rec.id,
                seq=self._seq,
                ts=rec.ts,
                role=rec.role,
                speaker=rec.speaker,
                content=rec.content,
                turn_id=rec.turn_id,
            )
        )

    @property
    def path(self) -> Path:
        return self.transcript.path

    def _remember(self, records: list[Record] | tuple[Record, ...]) -> None:
        for rec in records:
            self._records.append(rec)
            if isinstance(rec, MessageRecord):
                self._message_ids.add(rec.id)
                if rec.role == "assistant":
                    self._last_reply = rec.content

    def has_message(self, msg_id: str) -> bool:
        return msg_id in self._message_ids

    async def record(self, *records: Record) -> None:
        """Append records durably, then index the conversation messages among them."""
        await self.transcript.append(*records)
        self._remember(records)
        for rec in records:
            if isinstance(rec, MessageRecord):
                await self._index_message(rec)

    def turn_ended(self, turn_id: str) -> TurnStatus | str | None:
        """The recorded end status of `turn_id` in this session (answered, failed, …), or None."""
        for rec in reversed(self._records):
            if isinstance(rec, TurnEnd) and rec.turn_id == turn_id:
                return rec.status
        return None

    def finished_steps(self, turn_id: str) -> list[Message]:
        """The whole tool steps an unfinished turn took: (assistant call, its results) pairs.

        A turn tried again (a reply broke off, a restart) resumes after these instead of
        running their tools a second time; a step whose results are not all on disk is not
        whole and is taken again.
        """
        recs = [r for r in self._records if isinstance(r, _STEP) and r.turn_id == turn_id]
        messages = _turn_messages(_last_attempt(recs))
        body = messages[1:] if messages and messages[0].role == "user" else messages
        steps: list[Message] = []
        for call, results in zip(body[::2], body[1::2], strict=False):
            asked = {b.id for b in call.content if isinstance(b, ToolUseBlock)}
            answered = {b.tool_use_id for b in results.content if isinstance(b, ToolResultBlock)}
            if call.role != "assistant" or results.role != "user" or not asked or asked != answered:
                break
            steps += [call, results]
        return steps

    def message_count(self) -> int:
        return len(self._message_ids)

    def last_reply(self) -> str:
        return self._last_reply

    def history_turns(self, *, exclude_turn: str | None = None) -> list[list[Message]]:
        """The model-facing history, one list of messages per past turn, oldest first (see `history`)."""
        return [messages for _, messages in self.history(exclude_turn=exclude_turn)]

    def message_ids(self, turn_ids: Collection[str]) -> frozenset[str]:
        """The transcript message ids recorded for `turn_ids` (what replaying those turns shows)."""
        wanted = set(turn_ids)
        return frozenset(
            r.id
            for r in self._records
            if isinstance(r, MessageRecord) and r.turn_id in wanted and r.id
        )

    def history(self, *, exclude_turn: str | None = None) -> list[tuple[str, list[Message]]]:
        """The model-facing history as (turn id, messages) per past turn, oldest first.

        A finished turn is replayed in full; a turn that never finished (crash, cancel) as the
        person's message and a marker, so roles still alternate. Each turn starts with a user
        message, so any suffix of whole turns is a valid history.
        """
        finished = {
            r.turn_id
            for r in self._records
            if isinstance(r, TurnEnd) and r.status == TurnStatus.ANSWERED
        }
        turns: list[tuple[str, list[Step]]] = []
        index: dict[str, list[Step]] = {}
        # A scheduled task's result, recorded between turns: replayed as a note of its own.
        notes: dict[str, ScheduleFired] = {}
        for rec in self._records:
            if isinstance(rec, ScheduleFired):
                note_id = f"schedule:{rec.schedule_id}:{rec.due_at}"
                if note_id not in index:
                    index[note_id] = []
                    turns.append((note_id, index[note_id]))
                notes[note_id] = rec
                continue
            if not isinstance(rec, _STEP) or not rec.turn_id or rec.turn_id == exclude_turn:
                continue
            tid = rec.turn_id
            if tid not in index:
                index[tid] = []
                turns.append((tid, index[tid]))
            index[tid].append(rec)
        out: list[tuple[str, list[Message]]] = []
        for tid, recs in turns:
            if tid in notes:
                messages = [Message.user(notes[tid].note()), Message.assistant("(noted)")]
            elif tid in finished:
                messages = _turn_messages(_last_attempt(recs))
            else:
                messages = [
                    m
                    for rec in recs
                    if isinstance(rec, MessageRecord) and rec.role == "user"
                    for m in (
                        Message.user(rec.content),
                        Message.assistant("(no reply: this turn was interrupted)"),
                    )
                ]
            if (
                messages
                and messages[0].role == "user"
                and not any(isinstance(b, ToolResultBlock) for b in messages[0].content)
            ):
                out.append((tid, messages))
        return out


Step = MessageRecord | ToolCallRecord | ToolResultRecord
_STEP = (MessageRecord, ToolCallRecord, ToolResultRecord)


def _last_attempt(recs: list[Step]) -> list[Step]:
    """A turn's records as its last attempt left them.

    A step taken again after a retry writes its message id a second time (the later record
    stands), and a tool call whose result never landed was taken again or abandoned: the
    API refuses a call without its result, so it is left out.
    """
    calls = {r.call_id for r in recs if isinstance(r, ToolCallRecord)}
    results = {r.call_id for r in recs if isinstance(r, ToolResultRecord)}
    whole = calls & results
    last = {r.id: i for i, r in enumerate(recs) if isinstance(r, MessageRecord)}
    return [
        r
        for i, r in enumerate(recs)
        if (last[r.id] == i if isinstance(r, MessageRecord) else r.call_id in whole)
    ]


def _turn_messages(recs: list[Step]) -> list[Message]:
    """Turn a finished turn's records into alternating model messages."""
    out: list[Message] = []
    pending_assistant: list[Block] = []
    pending_results: list[Block] = []

    def flush_assistant() -> None:
        nonlocal pending_assistant
        if pending_assistant:
            out.append(Message(role="assistant", content=tuple(pending_assistant)))
            pending_assistant = []

    def flush_results() -> None:
        nonlocal pending_results
        if pending_results:
            out.append(Message(role="user", content=tuple(pending_results)))
            pending_results = []

    for rec in recs:
        if isinstance(rec, MessageRecord) and rec.role == "user":
            flush_assistant()
            flush_results()
            out.append(Message.user(rec.content))
        elif isinstance(rec, MessageRecord) and rec.role == "assistant":
            flush_results()
            if rec.content:
                pending_assistant.append(TextBlock(text=rec.content))
            if not rec.has_tool_calls:
                flush_assistant()
        elif isinstance(rec, ToolCallRecord):
            flush_results()
            pending_assistant.append(
                ToolUseBlock(id=rec.call_id, name=rec.name, input=dict(rec.input))
            )
        elif isinstance(rec, ToolResultRecord):
            flush_assistant()
            pending_results.append(
                ToolResultBlock(tool_use_id=rec.call_id, content=rec.content, is_error=rec.is_error)
            )
    flush_assistant()
    flush_results()
    return out


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
