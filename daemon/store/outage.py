"""Writes the PostgreSQL store takes later: queued in the home while the server is away.

While the server is away (`daemon.store.postgres.StoreAway`) the daemon goes on answering,
and the writes it would have made to the store are appended here, one JSON line each,
fsynced, in the order they were made: the messages index, the usage ledger, turn reports, the
trunk's kv notes. When a probe finds the server back, the queue is applied in that order on
the database thread before the statement that probed runs, so nothing in the daemon reads the
store before it holds them.

Applied exactly once: each entry is run in one transaction with a note in `kv`
(`store_queue_applied`: the queue's id and the last entry applied), so a replay cut short — the
server gone again, the daemon killed — and run again starts after the last entry it applied.
The file is removed once all of it is in; a leftover file (the daemon stopped mid-outage) is
applied when the daemon next opens the store.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daemon.log import get_logger

log = get_logger("store.outage")

QUEUE_NAME = "store-queue.jsonl"
APPLIED_KEY = "store_queue_applied"
_MARK_SQL = (
    "INSERT INTO kv(key, value, updated_at) VALUES (?,?,?) ON CONFLICT(key) DO UPDATE SET "
    "value=excluded.value, updated_at=excluded.updated_at"
)


class WriteQueue:
    """The home's queue of store writes made while the server was away (see the module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._count: int | None = None
        # Sessions whose messages were queued and applied since last asked (`take_applied`):
        # what the memory index chunks once the server is back.
        self._applied_sessions: set[str] = set()
        self._applied = 0

    # ----- while away ----------------------------------------------------------------------
    def append(self, sql: str, params: Any, *, session: str | None = None) -> int:
        """Append one write durably (fsynced); return its number in the queue."""
        with self._lock:
            last = self._count if self._count is not None else _last(self._read()[1])
            lines: list[str] = []
            if not self.path.exists():
                lines.append(json.dumps({"queue": uuid.uuid4().hex}))
                last = 0
            n = last + 1
            entry: dict[str, Any] = {"n": n, "sql": sql, "params": _plain(params)}
            if session:
                entry["session"] = session
            lines.append(json.dumps(entry, ensure_ascii=False))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, ("\n".join(lines) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            self._count = n
            return n

    def pending(self) -> int:
        """Entries in the queue (counting those a replay cut short had applied)."""
        with self._lock:
            if self._count is None:
                self._count = _last(self._read()[1])
            return self._count

    # ----- back ------------------------------------------------------------------------------
    def replay(self, conn: Any) -> None:
        """Apply the queue in order on `conn` (a `PgConnection`), each entry once.

        Raises what the connection raises (the server gone again): what was applied stays
        applied and noted, the rest waits for the next replay.
        """
        import psycopg

        with self._lock:
            queue_id, entries = self._read()
            if queue_id is None:
                return
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (APPLIED_KEY,)).fetchone()
            mark = json.loads(row[0]) if row else {}
            done = int(mark.get("upto", 0)) if mark.get("queue") == queue_id else 0
            applied = 0
            for entry in entries:
                n = int(entry["n"])
                if n <= done:
                    continue
                conn.execute("BEGIN")
                try:
                    conn.execute(entry["sql"], _params(entry["params"]))
                except psycopg.OperationalError:
                    conn.rollback()
                    raise
                except psycopg.Error as exc:
                    # The statement itself is refused (not the server gone): it would be
                    # refused every time, so it is logged and passed, never blocking the rest.
                    conn.rollback()
                    log.error("a queued write was refused; passed over", n=n, error=repr(exc))
                    conn.execute("BEGIN")
                mark = json.dumps({"queue": queue_id, "upto": n})
                try:
                    conn.execute(_MARK_SQL, (APPLIED_KEY, mark, _now()))
                    conn.commit()
                except BaseException:
                    conn.rollback()
                    raise
                applied += 1
                self._applied += 1
                if entry.get("session"):
                    self._applied_sessions.add(str(entry["session"]))
            self.path.unlink(missing_ok=True)
            _sync_dir(self.path.parent)
            self._count = 0
            if applied:
                log.info("writes queued while the store was away applied", count=applied)

    def take_applied(self) -> tuple[int, set[str]]:
        """How many entries were applied since last asked, and the sessions among them."""
        with self._lock:
            out = (self._applied, self._applied_sessions)
            self._applied, self._applied_sessions = 0, set()
            return out

    # ----- the file --------------------------------------------------------------------------
    def _read(self) -> tuple[str | None, Iterator[dict[str, Any]]]:
        """The queue's id and its entries in order; a line torn by a crash is skipped."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None, iter(())
        queue_id: str | None = None
        entries: list[dict[str, Any]] = []
        for line in text.splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(obj, dict):
                continue
            if "queue" in obj and queue_id is None:
                queue_id = str(obj["queue"])
            elif "n" in obj and "sql" in obj:
                entries.append(obj)
        return queue_id, iter(entries)


def _last(entries: Iterator[dict[str, Any]]) -> int:
    return max((int(e["n"]) for e in entries), default=0)


def _plain(params: Any) -> Any:
    """Parameters as JSON keeps them (a tuple becomes a list; bytes are not queued)."""
    if isinstance(params, dict):
        return {"named": {str(k): v for k, v in params.items()}}
    return list(params)


def _params(stored: Any) -> Any:
    if isinstance(stored, dict) and "named" in stored:
        return dict(stored["named"])
    return tuple(stored)


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat()


def _sync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
