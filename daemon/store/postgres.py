"""The PostgreSQL backend: a psycopg connection that answers as the stdlib `sqlite3` one does.

The daemon's code talks to `db.conn` (aiosqlite) and, on the database thread, to the
synchronous connection (`db.run(fn)`). Both keep working on PostgreSQL because
`PgConnection` offers the part of `sqlite3.Connection` they use — `execute` returning a
cursor with `fetchone`/`fetchall`/`lastrowid`/`rowcount`, `executemany`, explicit
`BEGIN`/`COMMIT`, rows read by index and by name — and aiosqlite runs it on its thread as it
runs a `sqlite3` connection. Statements are translated by `daemon.store.dialect`.

Values: a Python bool is stored as 0/1 (SQLite's habit, which the INTEGER flag columns
keep); the schema's one BLOB, an embedding, is a pgvector `vector` here, and crosses the
connection as the same little-endian float32 bytes numpy reads on SQLite; numeric sums come
back as int or float, never Decimal.

Each agent's tables live in its own schema (its namespace), set as the connection's
`search_path`, so a statement without a schema name reads and writes that agent's tables only.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import numpy as np

from daemon.store.dialect import Translator, is_named

SHARED_SCHEMA = "shared"
# The systemd credential that holds the server password (`LoadCredential=`).
CREDENTIAL_NAME = "reverie-storage-password"
PASSWORD_ENV = "REVERIE_STORAGE_PASSWORD"


class StorageUnavailable(Exception):
    """The PostgreSQL backend cannot be used (driver missing, server unreachable, no pgvector)."""


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and urlsplit(str(url)).scheme in ("postgresql", "postgres")


def schema_name(namespace: str) -> str:
    """The PostgreSQL schema of an agent namespace: lower-case letters, digits and `_`."""
    slug = re.sub(r"[^a-z0-9_]+", "_", namespace.strip().lower()).strip("_")
    if not slug:
        raise ValueError(f"namespace {namespace!r} has no letters or digits")
    if slug == SHARED_SCHEMA or slug.startswith("pg_"):
        raise ValueError(f"namespace {namespace!r} is reserved")
    return f"agent_{slug}"[:63]


def server_password(environ: dict[str, str] | None = None) -> str | None:
    """The server password from the environment or a systemd credential (never the config file)."""
    env = os.environ if environ is None else environ
    if env.get(PASSWORD_ENV):
        return env[PASSWORD_ENV]
    creds = env.get("CREDENTIALS_DIRECTORY")
    if creds:
        path = Path(creds) / CREDENTIAL_NAME
        if path.is_file():
            return path.read_text().strip()
    # libpq reads PGPASSWORD and ~/.pgpass by itself.
    return None


class Row(tuple):  # type: ignore[type-arg]
    """A result row read by position or by column name, like `sqlite3.Row`."""

    __slots__ = ()
    _names: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_class(names: Sequence[str]) -> type[Row]:
    index: dict[str, int] = {}
    for i, n in enumerate(names):
        index.setdefault(n, i)
    return type("Row", (Row,), {"__slots__": (), "_names": index})


class PgCursor:
    """The result of one statement, read the way a `sqlite3.Cursor` is."""

    def __init__(self, rows: list[Row], rowcount: int, lastrowid: int | None, description: Any):
        self._rows = rows
        self._at = 0
        self.rowcount = rowcount
        self.lastrowid = lastrowid
        self.description = description
        self.arraysize = 1

    def fetchone(self) -> Row | None:
        if self._at >= len(self._rows):
            return None
        row = self._rows[self._at]
        self._at += 1
        return row

    def fetchmany(self, size: int | None = None) -> list[Row]:
        n = size or self.arraysize
        out = self._rows[self._at : self._at + n]
        self._at += len(out)
        return out

    def fetchall(self) -> list[Row]:
        out = self._rows[self._at :]
        self._at = len(self._rows)
        return out

    def __iter__(self) -> Iterator[Row]:
        while (row := self.fetchone()) is not None:
            yield row

    def close(self) -> None:
        self._rows = []


def _adapt(conn: Any) -> None:
    """Teach one psycopg connection SQLite's value habits (see the module docstring)."""
    from psycopg import adapt, postgres, pq

    vector_oid = _type_oid(conn, "vector")

    class BoolAsInt(adapt.Dumper):
        oid = postgres.types["int8"].oid

        def dump(self, obj: Any) -> bytes:
            return b"1" if obj else b"0"

    class EmbeddingDumper(adapt.Dumper):
        # The binary form of pgvector: dim, unused, then big-endian float32s.
        format = pq.Format.BINARY
        oid = vector_oid

        def dump(self, obj: Any) -> bytes:
            floats = np.frombuffer(bytes(obj), dtype="<f4")
            return struct.pack(">HH", len(floats), 0) + floats.astype(">f4").tobytes()

    class EmbeddingLoader(adapt.Loader):
        # Results come as text: "[0.1,0.2,...]".
        def load(self, data: Any) -> bytes:
            return np.array(bytes(data)[1:-1].split(b","), dtype="<f4").tobytes()

    class EmbeddingBinaryLoader(adapt.Loader):
        format = pq.Format.BINARY

        def load(self, data: Any) -> bytes:
            return np.frombuffer(bytes(data)[4:], dtype=">f4").astype("<f4").tobytes()

    class NumericLoader(adapt.Loader):
        def load(self, data: Any) -> int | float:
            value = Decimal(bytes(data).decode())
            return int(value) if value == value.to_integral_value() else float(value)

    conn.adapters.register_dumper(bool, BoolAsInt)
    conn.adapters.register_dumper(bytes, EmbeddingDumper)
    conn.adapters.register_dumper(bytearray, EmbeddingDumper)
    conn.adapters.register_dumper(memoryview, EmbeddingDumper)
    conn.adapters.register_loader(vector_oid, EmbeddingLoader)
    conn.adapters.register_loader(vector_oid, EmbeddingBinaryLoader)
    conn.adapters.register_loader("numeric", NumericLoader)


def _type_oid(conn: Any, name: str) -> int:
    row = conn.execute("SELECT oid FROM pg_type WHERE typname = %s", (name,)).fetchone()
    if row is None:
        raise StorageUnavailable(
            "the PostgreSQL server has no pgvector extension (CREATE EXTENSION vector failed)"
        )
    return int(row[0])


class PgConnection:
    """A synchronous PostgreSQL connection with the `sqlite3.Connection` subset the daemon uses.

    In autocommit mode, as the SQLite connection is (`isolation_level=None`): a statement
    outside `BEGIN … COMMIT` commits by itself.
    """

    def __init__(self, raw: Any, schema: str) -> None:
        self.raw = raw
        self.schema = schema
        self.row_factory: Any = None  # accepted and ignored: rows always read by name and index
        self._keys: dict[str, tuple[str, ...]] = {}
        self._identities: dict[str, str | None] = {}
        self._cols: dict[str, frozenset[str]] = {}
        self.translate = Translator(self._primary_keys, self._identity, self._columns)

    @classmethod
    def connect(cls, url: str, schema: str, *, connect_timeout_s: int = 10) -> PgConnection:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StorageUnavailable(
                "PostgreSQL storage needs psycopg: pip install 'reverie[postgres]'"
            ) from exc
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": connect_timeout_s}
        password = server_password()
        if password:
            kwargs["password"] = password
        try:
            raw = psycopg.connect(url, **kwargs)
        except psycopg.OperationalError as exc:
            raise StorageUnavailable(f"cannot reach the PostgreSQL server: {exc}") from exc
        try:
            prepare_schema(raw, schema)
            _adapt(raw)
        except BaseException:
            raw.close()
            raise
        return cls(raw, schema)

    # ----- the sqlite3.Connection subset -------------------------------------------------------
    def execute(self, sql: str, params: Any = ()) -> PgCursor:
        named = is_named(params)
        text, returning = self.translate(sql, named=named)
        cur = self.raw.execute(text, params if named else tuple(params))
        rows = self._rows(cur)
        lastrowid = None
        if returning:
            lastrowid = rows[-1][0] if rows else None
            rows = []
        return PgCursor(rows, cur.rowcount, lastrowid, cur.description)

    def executemany(self, sql: str, seq: Any) -> PgCursor:
        seq = list(seq)
        if not seq:
            return PgCursor([], 0, None, None)
        named = is_named(seq[0])
        text, returning = self.translate(sql, named=named)
        if returning:
            text = text[: text.rfind(" RETURNING ")]
        with self.raw.cursor() as cur:
            cur.executemany(text, seq if named else [tuple(p) for p in seq])
            return PgCursor([], cur.rowcount, None, None)

    def cursor(self) -> PgConnection:
        return self

    @property
    def in_transaction(self) -> bool:
        from psycopg import pq

        return bool(self.raw.info.transaction_status != pq.TransactionStatus.IDLE)

    def commit(self) -> None:
        if self.in_transaction:
            self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.in_transaction:
            self.raw.execute("ROLLBACK")

    def close(self) -> None:
        self.raw.close()

    # ----- schema facts the translation needs ---------------------------------------------------
    def _rows(self, cur: Any) -> list[Row]:
        if cur.description is None:
            return []
        cls = _row_class([d.name for d in cur.description])
        return [cls(r) for r in cur.fetchall()]

    def _primary_keys(self, table: str) -> tuple[str, ...]:
        if table not in self._keys:
            rows = self.raw.execute(
                "SELECT a.attname FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary ORDER BY a.attnum",
                (table,),
            ).fetchall()
            self._keys[table] = tuple(r[0] for r in rows)
        return self._keys[table]

    def _columns(self, table: str) -> frozenset[str]:
        if table not in self._cols:
            rows = self.raw.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attnum > 0 AND NOT attisdropped",
                (table,),
            ).fetchall()
            self._cols[table] = frozenset(r[0] for r in rows)
        return self._cols[table]

    def _identity(self, table: str) -> str | None:
        if table not in self._identities:
            row = self.raw.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attidentity <> '' AND NOT attisdropped",
                (table,),
            ).fetchone()
            self._identities[table] = row[0] if row else None
        return self._identities[table]


def prepare_schema(raw: Any, schema: str) -> None:
    """Make sure pgvector, the agent's schema and the shared one exist; read the agent's first.

    Two daemons starting at once both try this; `IF NOT EXISTS` under one advisory lock keeps
    the second from failing on the first's half-made objects.
    """
    from psycopg import errors

    with raw.transaction():
        raw.execute("SELECT pg_advisory_xact_lock(hashtext('reverie.schema'))")
        try:
            raw.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except (errors.FeatureNotSupported, errors.UndefinedFile) as exc:
            raise StorageUnavailable(
                f"the PostgreSQL server has no pgvector extension to create: {exc}"
            ) from exc
        raw.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        raw.execute(f'CREATE SCHEMA IF NOT EXISTS "{SHARED_SCHEMA}"')
    # The extension's types and operators live where it was created (usually public).
    ext = raw.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'vector'"
    ).fetchone()
    path = [f'"{schema}"'] + ([f'"{ext[0]}"'] if ext and ext[0] != schema else [])
    raw.execute(f"SET search_path TO {', '.join(path)}")
