"""PostgreSQL's migrations: the same numbers and names as SQLite's, in PostgreSQL's dialect.

Each `NNNN_name.sql` here is the counterpart of `daemon/store/migrations/NNNN_name.sql`
(full text is a tsvector column, vectors are pgvector values, integer keys are identities),
recorded in the namespace's own `_migrations` table, so a namespace's schema version reads
the same on both backends. A migration is applied once, in order, in one transaction, under
an advisory lock: two daemons starting on one database never apply it twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.store.migrations import Migration, discover_in

HERE = Path(__file__).resolve().parent


def discover() -> list[Migration]:
    return discover_in(HERE)


def apply_pg_migrations(conn: Any) -> list[str]:
    """Apply every pending migration to the connection's schema; return the names applied now.

    `conn` is a `PgConnection`; its statements go to the server as written (no translation).
    """
    raw = conn.raw
    now: list[str] = []
    with raw.transaction():
        raw.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"reverie.migrate.{conn.schema}",)
        )
        raw.execute(
            "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        done = {r[0] for r in raw.execute("SELECT name FROM _migrations").fetchall()}
        for mig in discover():
            if mig.name in done:
                continue
            raw.execute(mig.sql)
            raw.execute(
                "INSERT INTO _migrations(name, applied_at) VALUES (%s, %s)",
                (mig.name, datetime.now(UTC).isoformat()),
            )
            now.append(mig.name)
    return now
