"""The PostgreSQL connection across a lost server session (daemon.store.postgres)."""

from __future__ import annotations

import psycopg

from daemon.store.postgres import PgConnection
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
