"""What a function on the database thread asks of its connection: which backend it is, and
how to begin a write transaction there.

A function given to `Database.run` receives the bare connection — `sqlite3.Connection` or
`daemon.store.postgres.PgConnection` — and, where the two dialects differ, chooses the
statement written for its backend (`on_postgres`). Importing nothing, so a repository can use
it without loading the database's own module (cold commands must not).
"""

from __future__ import annotations

from typing import Any


def on_postgres(conn: Any) -> bool:
    """Whether `conn` is PostgreSQL's (`PgConnection.dialect`); a `sqlite3` one has none."""
    return getattr(conn, "dialect", "sqlite") == "postgres"


def begin_write(conn: Any) -> None:
    """Begin a write transaction on `conn`, as its backend does it.

    SQLite: `BEGIN IMMEDIATE`, which takes the write lock at once (a deferred `BEGIN` that
    reads first could fail when it comes to write, another connection having written
    meanwhile). PostgreSQL: `PgConnection.begin_write`, a plain `BEGIN` — the rows a
    transaction writes are locked as it writes them.
    """
    if on_postgres(conn):
        conn.begin_write()
    else:
        conn.execute("BEGIN IMMEDIATE")
