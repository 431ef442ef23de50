"""The home's index database: SQLite (the embedded default) or PostgreSQL, behind one handle.

SQLite: one WAL database per home, with FTS5, on the stdlib `sqlite3`. Vectors are BLOBs
searched in numpy; no extension is loaded. sqlite-vec was measured for the candidate pass and
as the vectors' store and lost both (bench/README.md, docs/storage.md).

PostgreSQL (`[storage] url`): the same tables in the agent's own schema, with pgvector and a
tsvector column (daemon.store.postgres); the code above it is the same on both. Statements
are written once where both backends read them alike and per dialect where they differ;
PostgreSQL gets them as written, placeholders aside (daemon.store.placeholders).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite
import anyio

from daemon.log import get_logger
from daemon.store.migrations import apply_migrations, apply_pg_migrations
from daemon.store.outage import QUEUE_NAME, WriteQueue, rerun_safe
from daemon.store.postgres import (
    DEFAULT_BUILD_MEMORY,
    PgConnection,
    StoreAway,
    is_postgres_url,
    schema_name,
)

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


async def _connected(aconn: aiosqlite.Connection) -> None:
    """Await aiosqlite's connection; when the connector fails, wait for its thread to end.

    aiosqlite stops the thread by handing it one more call whose result it posts to the event
    loop; a command that exits at once on the error (a server that cannot be reached) would
    otherwise close the loop first and the thread die printing a traceback."""
    try:
        await aconn
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(aconn._thread.join, 5.0)
        raise


class Database:
    """An async handle on the home's index database (aiosqlite over the stdlib `sqlite3`).

    Use as `async with Database.open(path) as db:`; the connection is closed (after a
    checkpoint) when the block exits, including on cancellation.
    """

    def __init__(
        self,
        conn: aiosqlite.Connection,
        path: Path,
        readonly: bool,
        *,
        backend: str = "sqlite",
        url: str = "",
        schema: str = "",
        build_memory: str = DEFAULT_BUILD_MEMORY,
    ) -> None:
        self.conn = conn
        # SQLite: the database file. PostgreSQL: where its beside-files (the persisted vector
        # matrix) would go — the home's database path, though no file is made there.
        self.path = path
        self.readonly = readonly
        self.backend = backend
        self.url = url
        self.schema = schema
        # PostgreSQL: the most memory the server may use to build the vector index.
        self.build_memory = build_memory
        self._closed = False
        # PostgreSQL opened for writing: the writes queued while the server is away.
        self.queue: WriteQueue | None = None
        self._after_outage: list[Callable[[set[str]], Awaitable[Any]]] = []

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    # ----- a server that goes away (PostgreSQL) ---------------------------------------------
    @property
    def away_since(self) -> datetime | None:
        """When the PostgreSQL server was found away (None: it answers, or this is SQLite)."""
        raw = self._pg()
        return raw.breaker.since if raw is not None else None

    async def store_trouble(self) -> None:
        """Return once the PostgreSQL server is found away (at once if it is; never on SQLite)."""
        raw = self._pg()
        if raw is None:
            await anyio.sleep_forever()
            return
        breaker = raw.breaker
        loop = asyncio.get_running_loop()
        tripped = asyncio.Event()

        def told() -> None:  # on the database thread
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(tripped.set)

        breaker.on_trip = told
        try:
            if not breaker.away:  # tripped before `told` was in place: nothing to wait for
                await tripped.wait()
        finally:
            breaker.on_trip = None

    def outage(self) -> dict[str, Any] | None:
        """The server's absence for status: since, why, probes, writes queued (None: not away)."""
        raw = self._pg()
        breaker = raw.breaker if raw is not None else None
        if breaker is None or breaker.since is None:
            return None
        return {
            "since": breaker.since.isoformat(),
            "error": breaker.error,
            "probes": breaker.probes,
            "retry_in_s": round(breaker.delay, 1),
            "queued_writes": self.queue.pending() if self.queue is not None else 0,
        }

    async def write(self, sql: str, params: Any = (), *, session: str | None = None) -> bool:
        """Run a write the store may take later; return False when it was queued instead.

        On PostgreSQL, a write refused because the server is away is appended to the home's
        queue (fsynced) and applied, in order, when the server is back (daemon.store.outage);
        `session` names the session whose messages it indexes. Only for writes that stand
        alone and whose result nobody reads back. On SQLite (and a read-only handle) it is
        `execute`: a full disk raises as ever.
        """
        if self.queue is None:
            await self.execute(sql, params)
            return True
        applied: bool = await self.run(_write_or_queue, self.queue, sql, params, session)
        return applied

    def after_outage(self, fn: Callable[[set[str]], Awaitable[Any]]) -> None:
        """Run `fn(sessions)` once the queued writes are applied (the sessions whose messages
        they indexed): catching up what is rebuilt from the home's files (facts, chunks)."""
        self._after_outage.append(fn)

    async def catch_up(self) -> int:
        """Probe the server when due; after a replay, run the `after_outage` hooks. Return the
        number of queued writes applied since the last call (0: none, or still away)."""
        if self.queue is None:
            return 0
        if self.away_since is not None:
            try:
                await self.fetchone("SELECT 1")
            except StoreAway:
                return 0
        applied, sessions = self.queue.take_applied()
        if applied or sessions:
            for fn in self._after_outage:
                try:
                    await fn(sessions)
                except Exception as exc:
                    log.warning("catching up after the outage failed", error=repr(exc))
        return applied

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        readonly: bool = False,
        migrate: bool = True,
        busy_timeout_ms: int = 5000,
        url: str | None = None,
        namespace: str = "default",
        build_memory: str = DEFAULT_BUILD_MEMORY,
    ) -> Database:
        """Open the home's index: the SQLite file at `path`, or PostgreSQL when `url` names a server.

        On PostgreSQL `namespace` picks the agent's schema; a server that cannot be reached
        raises `StorageUnavailable` with why.
        """
        if is_postgres_url(url):
            return await cls._open_postgres(
                path,
                str(url),
                namespace,
                readonly=readonly,
                migrate=migrate,
                build_memory=build_memory,
            )

        def connector() -> sqlite3.Connection:
            return connect_sync(path, readonly=readonly, busy_timeout_ms=busy_timeout_ms)

        aconn = aiosqlite.Connection(connector, iter_chunk_size=64)
        await _connected(aconn)
        db = cls(aconn, path, readonly)
        if migrate and not readonly:
            await aconn._execute(apply_migrations, aconn._conn)  # type: ignore[attr-defined]
        return db

    @classmethod
    async def open_configured(
        cls, path: Path, settings: Any, *, readonly: bool = False, migrate: bool = True
    ) -> Database:
        """Open the store `settings` name: `[storage] url` (PostgreSQL) or the SQLite file `path`."""
        return await cls.open(
            path,
            readonly=readonly,
            migrate=migrate,
            busy_timeout_ms=settings.store.busy_timeout_ms,
            url=settings.storage.url or None,
            namespace=settings.storage.namespace or settings.agent.name,
            build_memory=settings.storage.index_build_memory,
        )

    @property
    def describe(self) -> str:
        """Where the store is, for a person: the file, or the server and schema (no password)."""
        if not self.is_postgres:
            return f"sqlite {self.path}"
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(self.url)
        where = f"{info.get('host') or 'localhost'}/{info.get('dbname') or ''}"
        return f"postgresql {where} (schema {self.schema})"

    @classmethod
    async def _open_postgres(
        cls,
        path: Path,
        url: str,
        namespace: str,
        *,
        readonly: bool,
        migrate: bool,
        build_memory: str = DEFAULT_BUILD_MEMORY,
    ) -> Database:
        schema = schema_name(namespace)

        def connector() -> Any:
            conn = PgConnection.connect(url, schema, readonly=readonly)
            if readonly:
                conn.set_session("SET default_transaction_read_only = on")
            return conn

        # aiosqlite runs any connection with the sqlite3 interface on its thread.
        aconn = aiosqlite.Connection(connector, iter_chunk_size=64)
        await _connected(aconn)
        db = cls(
            aconn,
            path,
            readonly,
            backend="postgresql",
            url=url,
            schema=schema,
            build_memory=build_memory,
        )
        if migrate and not readonly:
            await db.run(apply_pg_migrations)
        if not readonly:
            queue = db.queue = WriteQueue(path.with_name(QUEUE_NAME))
            raw: PgConnection = aconn._conn  # type: ignore[attr-defined,assignment]
            raw.on_back = queue.replay
            # Writes a daemon stopped mid-outage left queued go in before anything reads.
            await db.run(queue.replay)
        return db

    @asynccontextmanager
    async def exclusive(self, work: str) -> AsyncIterator[bool]:
        """Hold `work` for this namespace alone while the block runs; yield False if another holds it.

        On PostgreSQL several daemons may write one namespace: a session advisory lock (tried,
        never waited for) keeps, e.g., its nightly maintenance to one of them at a time, and the
        server releases it when the holder's connection ends — a daemon killed mid-way frees
        it for the next. A reconnect mid-block takes the lock again on the new session; if
        another daemon took it in between, `still_holds(work)` turns False and the block
        should stop. A SQLite store has one daemon already (the home's lock): always held.
        """
        if not self.is_postgres:
            yield True
            return
        key = self._lock_key(work)
        held: bool = await self.run(PgConnection.advisory_lock, key)
        if not held:
            yield False
            return
        try:
            yield True
        finally:
            with anyio.CancelScope(shield=True):
                if not self.still_holds(work):
                    log.error("the lock was lost to a reconnect and taken by another", work=work)
                try:
                    await self.run(PgConnection.advisory_unlock, key)
                except Exception as exc:  # the connection is gone: so is the lock
                    log.warning("advisory unlock failed", work=work, error=repr(exc))

    def still_holds(self, work: str) -> bool:
        """Whether this handle still holds `work` taken with `exclusive` (False once a
        reconnect found another daemon had taken it). Always True on SQLite."""
        if not self.is_postgres:
            return True
        raw = self._pg()
        return raw is not None and self._lock_key(work) in raw.locks

    def _pg(self) -> PgConnection | None:
        """The PostgreSQL connection under aiosqlite (None: closed, or SQLite)."""
        try:
            raw = self.conn._conn  # type: ignore[attr-defined]
        except (AttributeError, ValueError):  # aiosqlite: "no active connection"
            return None
        return raw if isinstance(raw, PgConnection) else None

    def _lock_key(self, work: str) -> str:
        return f"reverie.{self.schema}.{work}"

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self.readonly and not self.is_postgres:
                await self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception as exc:
            log.warning("final checkpoint failed", error=repr(exc))
        await self.conn.close()

    async def checkpoint(self) -> tuple[int, int, int]:
        """Checkpoint the WAL (PASSIVE then TRUNCATE when idle); return (busy, log, checkpointed)."""
        # In one step on the database thread: the pragma left open between an execute and a
        # fetch fails another task's commit meanwhile ("SQL statements in progress").
        if self.is_postgres:
            return (0, 0, 0)  # the server keeps its own log
        row = await self.run(_wal_checkpoint)
        return (row[0], row[1], row[2]) if row else (0, 0, 0)

    async def run(self, fn: Any, *args: Any) -> Any:
        """Run `fn(sync_connection, *args)` on the database thread (for batch work)."""
        return await self.conn._execute(fn, self.conn._conn, *args)  # type: ignore[attr-defined]

    async def fetchall(self, sql: str, params: Any = ()) -> list[Any]:
        async with self.conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def fetch_in(
        self, sql: str, keys: Sequence[Any], params: Sequence[Any] = (), *, per: int = 500
    ) -> list[Any]:
        """Rows of `sql` for every key, `per` keys a statement: its `{}` becomes their
        placeholders, bound after `params` (a long list stays within SQLite's variable limit)."""
        out: list[Any] = []
        for i in range(0, len(keys), per):
            part = list(keys[i : i + per])
            out.extend(await self.fetchall(sql.format(",".join("?" * len(part))), (*params, *part)))
        return out

    async def fetchone(self, sql: str, params: Any = ()) -> Any:
        async with self.conn.execute(sql, params) as cur:
            return await cur.fetchone()

    async def execute(self, sql: str, params: Any = ()) -> None:
        """Execute one statement (autocommit). An insert whose new key is wanted says
        `RETURNING` and is read with `fetchone`, the same on both backends (PostgreSQL has no
        `lastrowid`)."""
        async with self.conn.execute(sql, params):
            pass


def _write_or_queue(
    conn: PgConnection, queue: WriteQueue, sql: str, params: Any, session: str | None
) -> bool:
    """On the database thread: run the write, or queue it while the server is away.

    On the one thread, so a replay (also run here) never misses an entry appended beside it.
    """
    try:
        conn.execute(sql, params)
    except StoreAway as exc:
        if exc.tried and not rerun_safe(sql):
            raise  # it may already be in: queued, it could land twice
        queue.append(sql, params, session=session)
        return False
    return True
