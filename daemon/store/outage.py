"""The PostgreSQL store while its server is away: the breaker, what may run twice, and the
writes it takes later, queued in the home.

The breaker (`Breaker`): once the server is known away every store call fails at once, and
one reconnection is tried after a backoff (capped), so a turn's many store calls never each
wait out a reconnection. `rerun_safe` says which statements may be run again after a lost
connection without their work being done twice.

The queue (`WriteQueue`): writes the PostgreSQL store takes later, while the server is away.

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
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.log import get_logger
from daemon.store.placeholders import SqliteOnly

log = get_logger("store.outage")

# Once the server is known away, one reconnection is tried this long after the last failed
# one (doubling up to the cap); every store call in between fails at once (`StoreAway`).
PROBE_FIRST_S = 1.0
PROBE_MAX_S = 15.0
QUEUE_NAME = "store-queue.jsonl"
APPLIED_KEY = "store_queue_applied"
_MARK_SQL = (
    "INSERT INTO kv(key, value, updated_at) VALUES (?,?,?) ON CONFLICT(key) DO UPDATE SET "
    "value=excluded.value, updated_at=excluded.updated_at"
)


# Statements run twice to the same effect: reads, and writes that ignore or replace a row
# already there. Anything else may double a row if it is run again after a lost connection.
_READ = re.compile(r"^\s*(SELECT|SHOW|SET|VALUES|EXPLAIN)\b", re.IGNORECASE)
_IDEMPOTENT = re.compile(
    r"\bON\s+CONFLICT\b.*\bDO\s+NOTHING\b|^\s*INSERT\s+OR\s+(IGNORE|REPLACE)\b|"
    r"^\s*REPLACE\b|\bIF\s+NOT\s+EXISTS\b|\bIF\s+EXISTS\b",
    re.IGNORECASE | re.DOTALL,
)
_UPSERT = re.compile(r"\bON\s+CONFLICT\b.*?\bDO\s+UPDATE\s+SET\s+(.*)$", re.IGNORECASE | re.DOTALL)


_AGAIN = re.compile(r"^\s*(BEGIN|ROLLBACK|DELETE)\b", re.IGNORECASE)
_UPDATE = re.compile(
    r"^\s*UPDATE\s+\S+\s+SET\s+(.*?)(?:\s+WHERE\s+.*)?$", re.IGNORECASE | re.DOTALL
)
_ASSIGN = re.compile(r"(?:^|,)\s*(\w+)\s*=(?!=)")


def rerun_safe(sql: str) -> bool:
    """Whether `sql` may be run again when it is unknown if it ran (read, never rewritten).

    An UPDATE is, when no column it sets is read on the right (`x = ?`, not `x = x + 1`).
    """
    if _READ.match(sql) or _IDEMPOTENT.search(sql) or _AGAIN.match(sql):
        return True
    # An upsert's update is, when it sets from the new row (`excluded.x`), never the old one.
    update = _UPSERT.search(sql) or _UPDATE.match(sql)
    if update is None:
        return False
    sets = re.split(r"\s+WHERE\s+", update.group(1), flags=re.IGNORECASE)[0]
    targets = _ASSIGN.findall(sets)
    values = re.sub(r"\bexcluded\.\w+", "", " ".join(_ASSIGN.split(sets)[2::2]), flags=re.I)
    return bool(targets) and not any(re.search(rf"\b{t}\b", values) for t in targets)


class Breaker:
    """Whether the server is away, since when, and when to try it again (capped backoff).

    Read from the event loop (status, the context) while the database thread changes it:
    plain attributes, each replaced whole.
    """

    def __init__(self) -> None:
        self.since: datetime | None = None
        self.error = ""
        self.delay = PROBE_FIRST_S
        self.next_probe = 0.0  # time.monotonic()
        self.probes = 0
        # Told (on the database thread) each time the breaker trips: the daemon's watcher
        # sleeps until then instead of looking every second while the server answers.
        self.on_trip: Callable[[], None] | None = None

    @property
    def away(self) -> bool:
        return self.since is not None

    def trip(self, error: str) -> None:
        """The server is away: fail fast until the next probe."""
        if self.since is None:
            self.since = datetime.now(UTC)
            self.delay = PROBE_FIRST_S
        else:
            self.delay = min(self.delay * 2, PROBE_MAX_S)
        self.error = error
        self.next_probe = time.monotonic() + self.delay
        if self.on_trip is not None:
            self.on_trip()

    def due(self) -> bool:
        return time.monotonic() >= self.next_probe

    def close(self) -> None:
        self.since = None
        self.error = ""
        self.delay = PROBE_FIRST_S
        self.probes = 0

    def refusal(self) -> str:
        """Why a store call is refused now, for the `StoreAway` it raises."""
        since = f"{self.since:%H:%M:%S} UTC" if self.since else "now"
        wait = max(0.0, self.next_probe - time.monotonic())
        return (
            f"the PostgreSQL server is away since {since} ({self.error}); next try in {wait:.0f}s"
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
                except (psycopg.Error, SqliteOnly) as exc:
                    # The statement itself is refused (not the server gone; or SQLite's own
                    # syntax, queued by an older build): it would be refused every time, so
                    # it is logged and passed, never blocking the rest.
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
