"""The SQLite index: one WAL database per home, with FTS5, on the stdlib `sqlite3`.

Vectors are BLOBs searched in numpy; no extension is loaded. sqlite-vec was measured for the
candidate pass and as the vectors' store and lost both (bench/README.md, docs/storage.md).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite

from daemon.log import get_logger
from daemon.store.migrations import apply_migrations

log = get_logger("store")


def _wal_checkpoint(conn: sqlite3.Connection) -> Any:
    cur = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    try:
        return cur.fetchone()
    finally:
        cur.close()


def connect_sync(
    path: Path | str, *, readonly: bool = False, busy_timeout_ms: int = 5000
) -> sqlite3.Connection:
    """Open a configured connection (WAL, foreign keys, a busy timeout)."""
    if readonly:
        uri = f"file:{Path(path).resolve()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    else:
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys=ON")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # Keep the WAL bounded even between explicit checkpoints.
        conn.execute("PRAGMA wal_autocheckpoint=1000")
        conn.execute("PRAGMA journal_size_limit=67108864")
    return conn


class Database:
    """An async handle on the home's index database (aiosqlite over the stdlib `sqlite3`).

    Use as `async with Database.open(path) as db:`; the connection is closed (after a
    checkpoint) when the block exits, including on cancellation.
    """

    def __init__(self, conn: aiosqlite.Connection, path: Path, readonly: bool) -> None:
        self.conn = conn
        self.path = path
        self.readonly = readonly
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        readonly: bool = False,
        migrate: bool = True,
        busy_timeout_ms: int = 5000,
    ) -> Database:
        def connector() -> sqlite3.Connection:
            return connect_sync(path, readonly=readonly, busy_timeout_ms=busy_timeout_ms)

        aconn = aiosqlite.Connection(connector, iter_chunk_size=64)
        await aconn
        db = cls(aconn, path, readonly)
        if migrate and not readonly:
            await aconn._execute(apply_migrations, aconn._conn)  # type: ignore[attr-defined]
        return db

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self.readonly:
                await self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception as exc:
            log.warning("final checkpoint failed", error=repr(exc))
        await self.conn.close()

    async def checkpoint(self) -> tuple[int, int, int]:
        """Checkpoint the WAL (PASSIVE then TRUNCATE when idle); return (busy, log, checkpointed)."""
        # In one step on the database thread: the pragma left open between an execute and a
        # fetch fails another task's commit meanwhile ("SQL statements in progress").
        row = await self.run(_wal_checkpoint)
        return (row[0], row[1], row[2]) if row else (0, 0, 0)

    async def run(self, fn: Any, *args: Any) -> Any:
        """Run `fn(sync_connection, *args)` on the database thread (for batch work)."""
        return await self.conn._execute(fn, self.conn._conn, *args)  # type: ignore[attr-defined]

    async def fetchall(self, sql: str, params: Any = ()) -> list[Any]:
        async with self.conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Any = ()) -> Any:
        async with self.conn.execute(sql, params) as cur:
            return await cur.fetchone()

    async def execute(self, sql: str, params: Any = ()) -> int:
        """Execute one statement (autocommit); return lastrowid."""
        async with self.conn.execute(sql, params) as cur:
            return cur.lastrowid or 0
