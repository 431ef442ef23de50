"""Storage: the SQLite index (WAL, FTS5, sqlite-vec) and its migrations."""

from daemon.store.db import Database, connect_sync, pick_backend

__all__ = ["Database", "connect_sync", "pick_backend"]
