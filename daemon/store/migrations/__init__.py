"""Append-only, named schema migrations: one history for both backends, recorded in `_migrations`.

Each version is one pair of files in this folder, its statements written per dialect side by
side: `NNNN_name.sqlite.sql` (SQLite: FTS5 tables, triggers) and `NNNN_name.postgres.sql`
(PostgreSQL: a tsvector column for full text, pgvector values, identities for integer keys).
`versions()` lists the versions once and refuses a version missing one dialect's file; each
backend applies its own dialect's statements, once, in order, in one transaction, and records
the version's name (`NNNN_name`, the same on both backends and the same as when each backend
had its own folder of `NNNN_name.sql`) in its `_migrations` table. Never edit a migration that
has shipped: add a new version, both files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# The dialects every version is written in, as the files' second suffix names them.
DIALECTS = ("sqlite", "postgres")


@dataclass(frozen=True, slots=True)
class Version:
    """One step of the history: its number, its recorded name and its file per dialect."""

    number: int
    name: str
    files: Mapping[str, Path]


@dataclass(frozen=True, slots=True)
class Migration:
    """One version's statements in one dialect."""

    number: int
    name: str
    sql: str


def versions(folder: Path = HERE) -> list[Version]:
    """Every version in `folder` once, in order.

    Raises `RuntimeError` naming the file when a version lacks a dialect's file, when a file's
    name does not end in a known dialect (`.sqlite.sql`, `.postgres.sql`), or when two names
    share a number: a history one backend could apply and the other not never loads.
    """
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        name, _, dialect = path.name.removesuffix(".sql").rpartition(".")
        if not name or dialect not in DIALECTS:
            raise RuntimeError(
                f"migration file {path.name} in {folder} names no dialect: "
                f"write it as NNNN_name.<dialect>.sql, dialect one of {', '.join(DIALECTS)}"
            )
        found.setdefault(name, {})[dialect] = path
    out: list[Version] = []
    for name, files in sorted(found.items()):
        missing = [d for d in DIALECTS if d not in files]
        if missing:
            wanted = ", ".join(f"{name}.{d}.sql" for d in missing)
            raise RuntimeError(f"migration {name} lacks {wanted} (in {folder})")
        out.append(Version(number=int(name[:4]), name=name, files=files))
    numbers = [v.number for v in out]
    if len(numbers) != len(set(numbers)):
        raise RuntimeError(f"duplicate migration numbers in {folder}: {[v.name for v in out]}")
    return out


def discover(dialect: str = "sqlite", folder: Path = HERE) -> list[Migration]:
    """The history's statements in `dialect`, in order."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}: one of {', '.join(DIALECTS)}")
    return [
        Migration(number=v.number, name=v.name, sql=v.files[dialect].read_text())
        for v in versions(folder)
    ]


def applied(conn: Any) -> set[str]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    return {row[0] for row in conn.execute("SELECT name FROM _migrations")}


def apply_migrations(conn: Any) -> list[str]:
    """Apply every pending version to a SQLite connection; return the names applied now."""
    done = applied(conn)
    now: list[str] = []
    for mig in discover("sqlite"):
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


def apply_pg_migrations(conn: Any) -> list[str]:
    """Apply every pending version to a `PgConnection`'s schema; return the names applied now.

    The statements go to the server as written (no translation), all in one transaction under
    an advisory lock: two daemons starting on one database never apply a version twice.
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
        for mig in discover("postgres"):
            if mig.name in done:
                continue
            raw.execute(mig.sql)
            raw.execute(
                "INSERT INTO _migrations(name, applied_at) VALUES (%s, %s)",
                (mig.name, datetime.now(UTC).isoformat()),
            )
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
