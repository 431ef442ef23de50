"""The hybrid memory index: FTS5 BM25 + vectors + recency, fused by reciprocal rank.

(Interface first — bodies follow in the next commits.)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np

from daemon.clock import Clock
from daemon.memory.api import Kind, MemoryItem, Origin
from daemon.memory.embedders import Embedder
from daemon.settings import MemorySettings
from daemon.store.db import Database

SearchMode = Literal["hybrid", "lexical", "vector"]


@dataclass(frozen=True, kw_only=True)
class NewMemory:
    """One memory to insert or replace (by `uid`)."""

    uid: str  # stable across reindex: "fact:<id>", "summary:<session_id>", "chunk:<session_id>:<first_seq>"
    kind: Kind
    text: str
    origin: Origin
    created_at: datetime
    title: str = ""
    tags: tuple[str, ...] = ()
    importance: float = 0.5
    session_id: str | None = None
    message_ids: tuple[str, ...] = ()
    source: str = ""
    valid_from: datetime | None = None
    explicit: bool = False
    supersedes: str | None = None
    meta: dict[str, object] = field(default_factory=dict)


class MemoryIndex:
    """Own the memories tables, FTS5 and vectors; an async context manager (background embedding)."""

    def __init__(self, db: Database, embedder: Embedder, settings: MemorySettings, clock: Clock) -> None:
        self.db = db
        self.embedder = embedder
        self.settings = settings
        self.clock = clock

    async def __aenter__(self) -> MemoryIndex:
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        raise NotImplementedError

    async def upsert(self, items: Sequence[NewMemory]) -> None:
        raise NotImplementedError

    async def retire(self, uid: str, *, at: datetime, superseded_by: str | None = None) -> None:
        raise NotImplementedError

    async def get(self, uid: str) -> MemoryItem | None:
        raise NotImplementedError

    async def search(
        self,
        query: str,
        *,
        k: int = 10,
        kinds: Collection[str] | None = None,
        mode: SearchMode = "hybrid",
        include_retired: bool = False,
        after: datetime | None = None,
        before: datetime | None = None,
        query_vector: np.ndarray | None = None,
    ) -> list[MemoryItem]:
        raise NotImplementedError

    async def search_many(self, queries: Sequence[str], *, k: int = 10, **kw: Any) -> list[MemoryItem]:
        raise NotImplementedError

    async def recent(self, kinds: Collection[str], limit: int, *, include_retired: bool = False) -> list[MemoryItem]:
        raise NotImplementedError

    async def similar(self, text: str, kinds: Collection[str], threshold: float) -> list[MemoryItem]:
        raise NotImplementedError

    async def history(self, uid: str) -> list[MemoryItem]:
        raise NotImplementedError

    async def index_session(self, session_id: str) -> int:
        raise NotImplementedError

    async def flush(self) -> None:
        raise NotImplementedError

    async def clear(self) -> None:
        raise NotImplementedError

    async def stats(self) -> dict[str, object]:
        raise NotImplementedError
