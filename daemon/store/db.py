"""The SQLite index: one WAL database per home, FTS5 and sqlite-vec loaded.

The stdlib `sqlite3` is used when it can load extensions; otherwise a build that can
(`sqlean`, then `pysqlite3`) is used, with one log line saying so. When no build can load
sqlite-vec the database still opens and `vec_available` is False; only a migration marked
`-- requires: vec` waits for it (none is). Memory search does not use it: vectors are BLOBs
searched in numpy, whose sign-bit sketch beat sqlite-vec's bit KNN (docs/memory.md).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import aiosqlite

from daemon.log import get_logger
from daemon.store.migrations import apply_migrations

log = get_logger("store")


@dataclass(frozen=True, slots=True)
class SqliteBackend:
    module: ModuleType
    name: str
    can_load_extensions: bool


def pick_backend() -> SqliteBackend:
    """Choose the sqlite3-compatible module to use, preferring the stdlib."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return SqliteBackend(module=sqlite3, name="sqlite3", can_load_extensions=True)
    for modname in ("sqlean", "pysqlite3.dbapi2"):
        try:
            module = __import__(modname, fromlist=["connect"])
        except ImportError:
            continue
        if hasattr(module.Connection, "enable_load_extension"):
            return SqliteBackend(
                module=module, name=modname.split(".")[0], can_load_extensions=True
            )
    return SqliteBackend(module=sqlite3, name="sqlite3", can_load_extensions=False)


_announced = False


def _load_vec(conn: Any, backend: SqliteBackend) -> bool:
    if not backend.can_load_extensions:
        return False
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        return True
    except Exception as exc:  # a missing or broken extension must not stop the daemon
        log.info("sqlite-vec could not be loaded", error=repr(exc))
        return False


def connect_sync(
    path: Path | str, *, readonly: bool = False, busy_timeout_ms: int = 5000
) -> tuple[Any, bool]:
    """Open a configured connection; return (connection, vec_available)."""
    global _announced
    backend = pick_backend()
    if not _announced:
        _announced = True
        if backend.module is not sqlite3:
            log.info(
                "stdlib sqlite3 cannot load extensions; using fallback build", backend=backend.name
            )
        elif not backend.can_load_extensions:
            log.info("no sqlite build here can load extensions (see `reverie doctor`)")
    if readonly:
        uri = f"file:{Path(path).resolve()}?mode=ro"
        conn = backend.module.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    else:
        conn = backend.module.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.row_factory = backend.module.Row
    vec = _load_vec(conn, backend)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys=ON")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # Keep the WAL bounded even between explicit checkpoints.
        conn.execute("PRAGMA wal_autocheckpoint=1000")
        conn.execute("PRAGMA journal_size_limit=67108864")
    return conn, vec


class Database:
    """An async handle on the home's index database (aiosqlite over the chosen backend).

    Use as `async with Database.open(path) as db:`; the connection is closed (after a
    checkpoint) when the block exits, including on cancellation.
    """

    def __init__(
        self, conn: aiosqlite.Connection, path: Path, vec_available: bool, readonly: bool
    ) -> None:
        self.conn = conn
        self.path = path
        self.vec_available = vec_available
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
        vec_flag: dict[str, bool] = {}

        def connector() -> Any:
            conn, vec = connect_sync(path, readonly=readonly, busy_timeout_ms=busy_timeout_ms)
            vec_flag["vec"] = vec
            return conn

        aconn = aiosqlite.Connection(connector, iter_chunk_size=64)
        await aconn
        db = cls(aconn, path, vec_flag.get("vec", False), readonly)
        if migrate and not readonly:
            await aconn._execute(apply_migrations, aconn._conn, db.vec_available)  # type: ignore[attr-defined]
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
        async with self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cur:
            row = await cur.fetchone()
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
