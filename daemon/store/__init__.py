"""Storage: the SQLite index (WAL, FTS5) and its migrations."""

from daemon.store.db import Database, connect_sync

__all__ = ["Database", "connect_sync"]
