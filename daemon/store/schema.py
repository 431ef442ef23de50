"""What a store holds and what its engine can do: the checks `reverie doctor` and the commands
that read an older home make before they use a table or a feature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database


def sqlite_fts5_version() -> str:
    """The version of the stdlib `sqlite3`'s SQLite, once an FTS5 table was made with it (in
    memory); raises the engine's error when it has no FTS5."""
    from daemon.store.db import connect_sync

    conn = connect_sync(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return str(conn.execute("SELECT sqlite_version()").fetchone()[0])
    finally:
        conn.close()


async def has_table(db: Database, name: str) -> bool:
    """Whether the database has the table `name` yet (a home older than the migration that
    adds it). PostgreSQL reads `sqlite_master` as the view its first migration makes."""
    row = await db.fetchone(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    )
    return row is not None
