"""The store's key-value rows (`kv`): small named values the daemon keeps between starts —
the trunk's session, a handover waiting for the next session, marks of work done once.

Values are text; `get_json` and `put_json` read and write the JSON most keys hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database


class KvRepo:
    """The `kv` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, key: str) -> str | None:
        row = await self.db.fetchone("SELECT value FROM kv WHERE key = ?", (key,))
        return str(row[0]) if row is not None else None

    async def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        """The values of those `keys` that are kept."""
        rows = await self.db.fetch_in("SELECT key, value FROM kv WHERE key IN ({})", list(keys))
        return {str(k): str(v) for k, v in rows}

    async def get_json(self, key: str) -> Any:
        """The key's value read as JSON (None: not kept)."""
        raw = await self.get(key)
        return json.loads(raw) if raw is not None else None

    async def put(self, key: str, value: str, *, at: datetime) -> None:
        await self.db.execute(
            "INSERT INTO kv(key, value, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT(key) DO UPDATE SET value = excluded.value,"
            " updated_at = excluded.updated_at",
            (key, value, at.isoformat()),
        )

    async def put_json(self, key: str, value: Any, *, at: datetime) -> None:
        await self.put(key, json.dumps(value, ensure_ascii=False), at=at)

    async def write_json(self, key: str, value: Any, *, at: datetime) -> bool:
        """`put_json` for a note that may land later: while a PostgreSQL server is away it is
        queued in the home and applied, in order, when it is back (daemon.store.outage);
        False when it was queued."""
        return await self.db.write(
            "INSERT INTO kv(key, value, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT(key) DO UPDATE SET value = excluded.value,"
            " updated_at = excluded.updated_at",
            (key, json.dumps(value, ensure_ascii=False), at.isoformat()),
        )

    async def delete(self, key: str) -> None:
        await self.db.execute("DELETE FROM kv WHERE key = ?", (key,))
