"""Append-only, named schema migrations, recorded in the `_migrations` table.

Each migration is a file `NNNN_name.sql` in this folder, applied once, in order, inside a
transaction. Never edit a migration that has shipped: add a new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class Migration:
    number: int
    name: str
    sql: str


def discover() -> list[Migration]:
    return discover_in(HERE)


def discover_in(folder: Path) -> list[Migration]:
    """The migrations in `folder`, in order (each backend keeps its own folder)."""
    out: list[Migration] = []
    for path in sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        number = int(path.name[:4])
        out.append(Migration(number=number, name=path.stem, sql=path.read_text()))
    numbers = [m.number for m in out]
    if len(numbers) != len(set(numbers)):
        raise RuntimeError(f"duplicate migration numbers in {folder}: {numbers}")
    return out


def applied(conn: Any) -> set[str]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    return {row[0] for row in conn.execute("SELECT name FROM _migrations")}


def apply_migrations(conn: Any) -> list[str]:
    """Apply every pending migration in order; return the names applied now."""
    done = applied(conn)
    now: list[str] = []
    for mig in discover():
        if mig.name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split(mig.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO _migrations(name, applied_at) VALUES (?, ?)",
                (mig.name, datetime.now(UTC).isoformat()),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        now.append(mig.name)
    return now


def _split(sql: str) -> list[str]:
    """Split a migration into statements (triggers keep their inner semicolons)."""
    statements: list[str] = []
    buf: list[str] = []
    for line in sql.splitlines():
        stripped = line.strip()
        if stripped.startswith("--") and not buf:
            continue
        buf.append(line)
        candidate = "\n".join(buf)
        if stripped.endswith(";") and _complete(candidate):
            statements.append(candidate.strip())
            buf = []
    if "\n".join(buf).strip():
        statements.append("\n".join(buf).strip())
    return statements


def _complete(sql: str) -> bool:
    import sqlite3

    return sqlite3.complete_statement(sql)
