"""One migration history for both backends (issue 36).

`daemon/store/migrations/` holds each version once, its statements per dialect side by side
(`NNNN_name.sqlite.sql`, `NNNN_name.postgres.sql`). These tests hold the history whole (a
version written for one backend only fails here, and the loader refuses it) and check that a
home migrated when each backend had its own tree (`migrations/NNNN_name.sql` for SQLite,
`pg_migrations/NNNN_name.sql` for PostgreSQL, each recording `NNNN_name`) opens with this code
and applies nothing again.

tests/fixtures/home_two_trees_c8c6630.db.gz is a SQLite home migrated by the two-tree code at
commit c8c6630 (`apply_migrations` on a new file, one kv row `made-by` written after, VACUUMed).
"""

from __future__ import annotations

import gzip
import shutil
from collections import defaultdict
from pathlib import Path

import anyio
import pytest

from daemon.store.db import Database, connect_sync
from daemon.store.migrations import (
    DIALECTS,
    HERE,
    apply_migrations,
    apply_pg_migrations,
    discover,
    versions,
)
from daemon.store.postgres import PgConnection, schema_name
from tests.postgres_server import database_url, pg_server, pg_url  # noqa: F401

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "home_two_trees_c8c6630.db.gz"

# What the two-tree layout recorded in `_migrations` (each file's stem), on either backend.
TWO_TREE_NAMES = [
    "0001_core",
    "0002_memory",
    "0003_memory_recent",
    "0004_lifecycle",
    "0005_delegate",
    "0006_sleep",
    "0007_sleep_dreams",
    "0008_journal",
    "0010_matrix_identity",
    "0011_notices",
    "0012_schedules",
    "0013_sleep_changes",
    "0014_fact_use",
    "0015_shared_history",
    "0016_daemon_runs",
    "0017_self_exams",
    "0018_threads",
    "0019_mention_links",
]


def _by_dialect(folder: Path) -> dict[str, list[str]]:
    """The versions each dialect has a file for, read off the folder's file names."""
    out: dict[str, list[str]] = defaultdict(list)
    for path in sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        version, _, dialect = path.name.removesuffix(".sql").rpartition(".")
        out[dialect].append(version)
    return dict(out)


def test_every_version_has_both_dialects() -> None:
    files = _by_dialect(HERE)
    assert set(files) == set(DIALECTS), f"files of unknown dialects: {sorted(files)}"
    sqlite, postgres = files["sqlite"], files["postgres"]
    assert sqlite == postgres, (
        f"only SQLite: {sorted(set(sqlite) - set(postgres))}; "
        f"only PostgreSQL: {sorted(set(postgres) - set(sqlite))}"
    )
    listed = versions()
    assert [v.name for v in listed] == sqlite
    assert [m.name for m in discover("sqlite")] == [m.name for m in discover("postgres")] == sqlite
    for v in listed:
        assert set(v.files) == set(DIALECTS)
        for path in v.files.values():
            assert path.read_text().strip(), f"{path.name} is empty"
    # Renaming a shipped version would run it again on every existing home.
    assert set(TWO_TREE_NAMES) <= set(sqlite)
    assert sqlite == sorted(sqlite) and len({n[:4] for n in sqlite}) == len(sqlite)


def test_the_loader_refuses_a_version_with_one_dialect(tmp_path: Path) -> None:
    for path in HERE.glob("*.sql"):
        shutil.copy(path, tmp_path / path.name)
    assert [v.name for v in versions(tmp_path)] == [v.name for v in versions()]
    (tmp_path / "0012_schedules.postgres.sql").unlink()
    with pytest.raises(RuntimeError, match=r"0012_schedules lacks 0012_schedules\.postgres\.sql"):
        versions(tmp_path)
    with pytest.raises(RuntimeError, match="0012_schedules"):
        discover("sqlite", tmp_path)


def test_the_loader_refuses_a_file_naming_no_dialect(tmp_path: Path) -> None:
    for path in HERE.glob("*.sql"):
        shutil.copy(path, tmp_path / path.name)
    # A file written in the old layout's way, as someone used to it might add one.
    (tmp_path / "0020_next.sql").write_text("CREATE TABLE next_thing (id TEXT);\n")
    with pytest.raises(RuntimeError, match=r"0020_next\.sql .* names no dialect"):
        versions(tmp_path)
    with pytest.raises(ValueError, match="unknown dialect"):
        discover("mysql")


async def test_a_sqlite_home_of_the_two_trees_applies_nothing_again(tmp_path: Path) -> None:
    path = tmp_path / "reverie.db"
    with gzip.open(FIXTURE) as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    conn = connect_sync(path)
    before = conn.execute("SELECT name, applied_at FROM _migrations ORDER BY name").fetchall()
    conn.close()
    assert [n for n, _ in before] == TWO_TREE_NAMES
    async with await Database.open(path) as db:
        after = await db.fetchall("SELECT name, applied_at FROM _migrations ORDER BY name")
        assert [tuple(r) for r in after] == [tuple(r) for r in before]
        row = await db.fetchone("SELECT value FROM kv WHERE key = 'made-by'")
        assert row is not None and row[0] == '"old layout"'
    conn = connect_sync(path)
    try:
        assert apply_migrations(conn) == []
    finally:
        conn.close()


def test_a_sqlite_home_part_way_through_the_two_trees_gets_the_rest(tmp_path: Path) -> None:
    """A home whose two-tree code stopped at 0010 gets exactly the versions after it."""
    conn = connect_sync(tmp_path / "reverie.db")
    try:
        conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        upto = TWO_TREE_NAMES.index("0010_matrix_identity") + 1
        sql = {m.name: m.sql for m in discover("sqlite")}
        for name in TWO_TREE_NAMES[:upto]:
            conn.executescript(sql[name])
            conn.execute("INSERT INTO _migrations VALUES (?, 'two trees')", (name,))
        conn.commit()
        assert apply_migrations(conn) == [v.name for v in versions()][upto:]
    finally:
        conn.close()


def _two_tree_pg_home(url: str, namespace: str, upto: int) -> None:
    """A PostgreSQL schema as the two-tree code left it: the first `upto` versions applied from
    pg_migrations/ (whose files are now the .postgres.sql ones), recorded under their stems."""
    conn = PgConnection.connect(url, schema_name(namespace))
    try:
        raw = conn.raw
        with raw.transaction():
            raw.execute(
                "CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            sql = {m.name: m.sql for m in discover("postgres")}
            for name in TWO_TREE_NAMES[:upto]:
                raw.execute(sql[name])
                raw.execute(
                    "INSERT INTO _migrations(name, applied_at) VALUES (%s, 'two trees')", (name,)
                )
            raw.execute(
                "INSERT INTO kv(key, value, updated_at) VALUES ('made-by', '\"two trees\"', 'then')"
            )
    finally:
        conn.close()


async def test_a_postgres_home_of_the_two_trees_applies_nothing_again(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        await anyio.to_thread.run_sync(_two_tree_pg_home, pg_url, "h7", len(TWO_TREE_NAMES))
        async with await Database.open(tmp_path / "reverie.db", url=pg_url, namespace="h7") as db:
            rows = await db.fetchall("SELECT name, applied_at FROM _migrations ORDER BY name")
            assert [tuple(r) for r in rows] == [(n, "two trees") for n in TWO_TREE_NAMES]
            row = await db.fetchone("SELECT value FROM kv WHERE key = 'made-by'")
            assert row is not None and row[0] == '"two trees"'
            assert await db.run(apply_pg_migrations) == []


async def test_a_postgres_home_part_way_through_the_two_trees_gets_the_rest(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    upto = TWO_TREE_NAMES.index("0010_matrix_identity") + 1
    with anyio.fail_after(60):
        await anyio.to_thread.run_sync(_two_tree_pg_home, pg_url, "h7", upto)
        async with await Database.open(
            tmp_path / "reverie.db", url=pg_url, namespace="h7", migrate=False
        ) as db:
            assert await db.run(apply_pg_migrations) == [v.name for v in versions()][upto:]
            names = [r[0] for r in await db.fetchall("SELECT name FROM _migrations ORDER BY name")]
            assert names == [v.name for v in versions()]
