"""The durable inbox: a person's message is on disk before it is acknowledged.

`inbox.jsonl` is an append-only log of `put` and `done` records. A message received but not
yet answered (daemon killed mid-turn, API down) is still `put` without `done` at the next
start, and is answered then, in the order it arrived. The log is compacted at start-up to
its pending entries (written to a temporary file, fsynced, renamed).
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import anyio

from daemon.clock import Clock, SystemClock
from daemon.durable import append_lines, read_jsonl, write_atomic
from daemon.records import TurnStatus


@dataclass(frozen=True, kw_only=True)
class InboxEntry:
    id: str
    ts: datetime
    text: str
    origin: str = "person"
    client_msg_id: str | None = None
    attempts: int = 0


class Inbox:
    """An ordered, durable queue of incoming messages. One owner: the trunk."""

    def __init__(self, path: Path, clock: Clock | None = None) -> None:
        self.path = path
        self.clock = clock or SystemClock()
        self._queue: deque[InboxEntry] = deque()
        self._wakeup = anyio.Event()
        self._lock = anyio.Lock()

    def load(self) -> list[InboxEntry]:
        """Read the log, keep what is pending, compact the file; return pending entries."""
        pending: dict[str, InboxEntry] = {}
        for rec in read_jsonl(self.path):
            if rec.get("op") == "put" and isinstance(rec.get("id"), str):
                pending[rec["id"]] = InboxEntry(
                    id=rec["id"],
                    ts=datetime.fromisoformat(rec["ts"]),
                    text=str(rec.get("text", "")),
                    origin=str(rec.get("origin", "person")),
                    client_msg_id=rec.get("client_msg_id"),
                    attempts=int(rec.get("attempts", 0)),
                )
            elif rec.get("op") == "done":
                pending.pop(rec.get("id", ""), None)
        entries = list(pending.values())
        write_atomic(
            self.path,
            "".join(json.dumps(self._put_record(e), ensure_ascii=False) + "\n" for e in entries),
            mode=0o600,
        )
        self._queue.extend(entries)
        if entries:
            self._wakeup.set()
        return entries

    @staticmethod
    def _put_record(e: InboxEntry) -> dict[str, object]:
        return {
            "op": "put",
            "id": e.id,
            "ts": e.ts.isoformat(),
            "text": e.text,
            "origin": e.origin,
            "client_msg_id": e.client_msg_id,
            "attempts": e.attempts,
        }

    async def put(
        self, text: str, *, origin: str = "person", client_msg_id: str | None = None
    ) -> InboxEntry:
        """Durably enqueue a message; returns once it is fsynced. Shielded from cancellation."""
        entry = InboxEntry(
            id=f"turn-{uuid.uuid4().hex[:16]}",
            ts=self.clock.now(),
            text=text,
            origin=origin,
            client_msg_id=client_msg_id,
        )
        line = json.dumps(self._put_record(entry), ensure_ascii=False)
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await anyio.to_thread.run_sync(append_lines, self.path, [line])
                self._queue.append(entry)
                self._wakeup.set()
        return entry

    async def done(self, entry_id: str, status: TurnStatus = TurnStatus.ANSWERED) -> None:
        line = json.dumps(
            {
                "op": "done",
                "id": entry_id,
                "status": str(status),
                "ts": self.clock.now().isoformat(),
            }
        )
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await anyio.to_thread.run_sync(append_lines, self.path, [line])

    async def next(self) -> InboxEntry:
        """Wait for and return the oldest pending entry (it stays pending until `done`)."""
        while not self._queue:
            self._wakeup = anyio.Event()
            await self._wakeup.wait()
        return self._queue[0]

    def pop(self, entry_id: str) -> None:
        """Remove the head entry from the in-memory queue once it is handled."""
        if self._queue and self._queue[0].id == entry_id:
            self._queue.popleft()
        else:
            self._queue = deque(e for e in self._queue if e.id != entry_id)

    def remove(self, entry_id: str) -> bool:
        """Drop a queued (not running) entry, e.g. when the person cancels it."""
        before = len(self._queue)
        self._queue = deque(e for e in self._queue if e.id != entry_id)
        return len(self._queue) != before

    def pending(self) -> list[InboxEntry]:
        return list(self._queue)
