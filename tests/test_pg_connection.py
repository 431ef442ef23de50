"""The PostgreSQL connection across a lost server session (daemon.store.postgres)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import anyio
import psycopg
import pytest

from daemon.store.db import Database
from daemon.store.placeholders import SqliteOnly
from daemon.store.postgres import PgConnection, StorageUnavailable
from tests.postgres_server import pg_server, pg_url  # noqa: F401


def test_session_settings_survive_a_reconnect(pg_url: str) -> None:  # noqa: F811
    conn = PgConnection.connect(pg_url, "agent_settings")
    try:
        conn.set_session("SET default_transaction_read_only = on")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # The first statement after the loss runs again on a new session, set as the old one was.
        row = conn.execute("SHOW default_transaction_read_only").fetchone()
        assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] != pid  # type: ignore[index]
        assert row is not None and row[0] == "on"
    finally:
        conn.close()


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace").fetchall()
    return {r[0] for r in rows}


def test_a_read_only_open_creates_nothing_on_the_server(pg_url: str, tmp_path: Path) -> None:  # noqa: F811
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION IF NOT EXISTS vector")  # the server's owner did, once

    async def main() -> None:
        async with await Database.open(
            tmp_path / "reverie.db", url=pg_url, namespace="reader", readonly=True
        ) as db:
            assert (await db.fetchone("SELECT 1"))[0] == 1
            # A reconnect opens the reader's session the same way.
            pid = (await db.fetchone("SELECT pg_backend_pid()"))[0]
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert (await db.fetchone("SELECT 2"))[0] == 2

    anyio.run(main)
    assert not {"agent_reader", "shared"} & _schemas(pg_url)


def _try_lock(conn: psycopg.Connection, key: str) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()
    return bool(row and row[0])


def _kill(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_session_lock_held_across_a_reconnect_is_taken_again(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    key = "reverie.agent_locks.maintenance"

    async def main() -> None:
        async with await Database.open(
            tmp_path / "reverie.db", url=pg_url, namespace="locks"
        ) as db:
            async with db.exclusive("maintenance") as held:
                assert held
                _kill(pg_url, (await db.fetchone("SELECT pg_backend_pid()"))[0])
                await db.fetchone("SELECT 1")  # renews the session, and the lock with it
                assert db.still_holds("maintenance")
                with psycopg.connect(pg_url, autocommit=True) as other:
                    assert not _try_lock(other, key)
            with psycopg.connect(pg_url, autocommit=True) as other:
                assert _try_lock(other, key)  # released at the block's end

    anyio.run(main)


def test_a_holder_whose_lock_another_took_during_a_reconnect_knows_it_lost_it(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    key = "reverie.agent_lost.maintenance"

    async def main() -> None:
        async with await Database.open(tmp_path / "reverie.db", url=pg_url, namespace="lost") as db:
            with psycopg.connect(pg_url, autocommit=True) as rival:
                async with db.exclusive("maintenance") as held:
                    assert held
                    _kill(pg_url, (await db.fetchone("SELECT pg_backend_pid()"))[0])
                    # The server frees the dead session's lock a moment later: the rival takes it.
                    for _ in range(200):
                        if _try_lock(rival, key):
                            break
                        await anyio.sleep(0.05)
                    else:
                        raise AssertionError("the rival never got the lock")
                    await db.fetchone("SELECT 1")
                    assert not db.still_holds("maintenance")
                # The rival's lock is left alone by the holder that lost it.
                with psycopg.connect(pg_url, autocommit=True) as third:
                    assert not _try_lock(third, key)

    anyio.run(main)


def test_after_a_lost_connection_only_a_statement_safe_to_repeat_is_run_again(
    pg_url: str,  # noqa: F811
) -> None:
    conn = PgConnection.connect(pg_url, "agent_rerun")

    def cut() -> None:
        # The connection drops with no word from the server (a network failure): whether a
        # statement sent then ran cannot be known.
        socket.socket(fileno=os.dup(conn.raw.fileno())).shutdown(socket.SHUT_RDWR)

    try:
        conn.execute("CREATE TABLE t (id BIGSERIAL PRIMARY KEY, v TEXT UNIQUE)")
        # A plain INSERT may have committed before the connection died: it is not run again,
        # and the caller is told so (its own retry path decides).
        cut()
        with pytest.raises(StorageUnavailable, match="not run again"):
            conn.execute("INSERT INTO t(v) VALUES (?)", ("plain",))
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0  # type: ignore[index]
        # One that ignores a row already there runs again on the new session.
        cut()
        conn.execute("INSERT INTO t(v) VALUES (?) ON CONFLICT DO NOTHING", ("ignored",))
        assert conn.execute("SELECT v FROM t").fetchall() == [("ignored",)]
        # The server saying it ended the session means the statement never ran: run again.
        _kill(pg_url, conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        conn.execute("INSERT INTO t(v) VALUES (?)", ("after a kill",))
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 2  # type: ignore[index]
    finally:
        conn.close()


def test_statements_reach_the_server_as_written_and_sqlite_s_own_are_refused_by_name(
    pg_url: str,  # noqa: F811
) -> None:
    conn = PgConnection.connect(pg_url, "agent_as_written")
    try:
        conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)")
        conn.execute("INSERT INTO t(k, v) VALUES (?, ?)", ("Abc", "50%"))
        # LIKE is PostgreSQL's own (case-sensitive): nothing turns it into ILIKE on the way.
        assert conn.execute("SELECT count(*) FROM t WHERE k LIKE ?", ("a%",)).fetchone()[0] == 0  # type: ignore[index]
        assert conn.execute("SELECT count(*) FROM t WHERE k LIKE ?", ("A%",)).fetchone()[0] == 1  # type: ignore[index]
        # `%` in a literal arrives as one `%`.
        assert conn.execute("SELECT v FROM t WHERE v LIKE '%\\%' ESCAPE '\\'").fetchall() == [
            ("50%",)
        ]
        # SQLite's own syntax is refused before anything is sent, the statement named.
        for sql in (
            "INSERT OR REPLACE INTO t(k, v) VALUES (?, ?)",
            "INSERT OR IGNORE INTO t(k, v) VALUES (?, ?)",
        ):
            with pytest.raises(SqliteOnly, match="INSERT OR") as refused:
                conn.execute(sql, ("Abc", "replaced"))
            assert sql in str(refused.value)
            with pytest.raises(SqliteOnly, match="INSERT OR"):
                conn.executemany(sql, [("Abc", "replaced"), ("new", "row")])
        with pytest.raises(SqliteOnly, match="PRAGMA page_count"):
            conn.execute("PRAGMA page_count")
        assert not conn.in_transaction
        assert conn.execute("SELECT k, v FROM t").fetchall() == [("Abc", "50%")]
    finally:
        conn.close()
