"""The embedding worker: vectors for memories that have none for the current model.

"Missing vector" is read from the database (a memory whose content hash has no row in
`embeddings` for the model), never remembered, so an import, a model change or a cancelled run
is picked up by the next pass. A window's vector is the mean of its messages' vectors.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import numpy as np

from daemon.log import get_logger
from daemon.memory.embedders import Embedder
from daemon.memory.rows import embed_text
from daemon.store.db import Database
from daemon.store.memories import MemoriesRepo, PendingMemory

log = get_logger("memory.index")

EMBED_ROUND = 512


class EmbeddingWorker:
    """Embed pending memories on `flush` or, in the daemon, in the background on each `wake`.

    `refresh` brings the search's matrix up to date once a flush is done.
    """

    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        refresh: Callable[[], Awaitable[None]],
        bulk: Callable[[int], AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        self.db = db
        self.rows = MemoriesRepo(db)
        self.embedder = embedder
        self.refresh = refresh
        # Around a backlog of at least a round (`bulk(pending)`): the backend may set its
        # vector index aside while the backlog goes in and build it again after.
        self.bulk = bulk
        self._wake = anyio.Event()
        self._embed_lock = anyio.Lock()
        self.embed_errors = 0

    def wake(self) -> None:
        """Something was written: look for memories without a vector."""
        self._wake.set()

    async def flush(self, progress: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Embed every memory still missing a vector for the current model, then return.

        Raises the embedder's error if it fails (the background task would retry later).
        Cancellation leaves the rest pending for the background task. `progress` receives
        `{"phase": "embed", "done": texts, "total": texts}` after each batch.
        """
        if self.embedder.dim == 0 or self.db.readonly:
            return
        async with self._embed_lock:
            await self._embed_pending(progress)
        await self.refresh()

    async def _count_pending(self) -> int:
        return await self.rows.pending_count(self.embedder.name)

    async def _next_round(self, after: int) -> list[PendingMemory]:
        return await self.rows.pending(self.embedder.name, after=after, limit=EMBED_ROUND)

    async def _embed_pending(self, progress: Callable[[dict[str, Any]], None] | None = None) -> int:
        total = 0
        if progress is not None:
            total = await self._count_pending()
            progress({"phase": "embed", "done": 0, "total": total})
        batch = await self._next_round(0)
        if self.bulk is not None and len(batch) == EMBED_ROUND:
            # A full round: counted (only now: the count reads every memory) and handed to
            # the backend, which may embed it with its vector index set aside.
            async with self.bulk(total or await self._count_pending()):
                return await self._embed_rounds(batch, progress, total)
        return await self._embed_rounds(batch, progress, total)

    async def _embed_rounds(
        self,
        batch: list[PendingMemory],
        progress: Callable[[dict[str, Any]], None] | None,
        total: int,
    ) -> int:
        done = 0
        while True:
            if not batch:
                return done
            after = batch[-1].rowid
            # Windows come last: their vectors are the mean of their messages' vectors.
            parts = {r.content_hash: json.loads(r.meta or "{}").get("parts") for r in batch}
            unique = {
                r.content_hash: embed_text(r.title, r.text)
                for r in batch
                if not parts[r.content_hash]
            }
            windows = {
                r.content_hash: embed_text(r.title, r.text)
                for r in batch
                if parts[r.content_hash] and r.content_hash not in unique
            }
            vectors = await self.embedder.embed(list(unique.values()))
            stored = await self._store_vectors(dict(zip(unique, vectors, strict=True)))
            pooled, left = await self._pool_windows({h: parts[h] for h in windows})
            if left:
                encoded = await self.embedder.embed([windows[h] for h in left])
                pooled.update(zip(left, encoded, strict=True))
            stored += await self._store_vectors(pooled)
            done += stored
            if progress is not None:
                progress({"phase": "embed", "done": min(done, total), "total": total})
            batch = await self._next_round(after)

    async def _store_vectors(self, vectors: dict[str, np.ndarray]) -> int:
        """Store vectors by content hash (one write, one new generation); return how many."""
        return await self.rows.store_vectors(
            self.embedder.name,
            {h: np.asarray(v, dtype=np.float32).tobytes() for h, v in vectors.items()},
        )

    async def _pool_windows(
        self, windows: dict[str, list[str]]
    ) -> tuple[dict[str, np.ndarray], list[str]]:
        """Window vectors as the normalised mean of their messages' stored vectors.

        Returns the pooled vectors and the windows left to encode (a message without a
        stored vector, e.g. from an index built before windows named their parts).
        """
        if not windows:
            return {}, []
        # Two lookups, each on a unique key (uid, then content hash and model), so the plan
        # never rests on statistics.
        uids = sorted({u for part in windows.values() for u in part})
        hashes = await self.rows.hashes(uids)
        vectors = {
            h: np.frombuffer(v, dtype=np.float32)
            for h, v in (
                await self.rows.vectors(self.embedder.name, sorted(set(hashes.values())))
            ).items()
        }
        found = {u: vectors[h] for u, h in hashes.items() if h in vectors}
        pooled: dict[str, np.ndarray] = {}
        left: list[str] = []
        for h, part in windows.items():
            if part and all(u in found for u in part):
                mean = np.mean([found[u] for u in part], axis=0)
                pooled[h] = mean / max(float(np.linalg.norm(mean)), 1e-12)
            else:
                left.append(h)
        return pooled, left

    async def run(self, warm_up: Callable[[], Awaitable[None]]) -> None:
        """The daemon's background loop: warm up, then embed whatever each wake finds pending."""
        await warm_up()
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            try:
                async with self._embed_lock:
                    n = await self._embed_pending()
                if n:
                    log.info("memories embedded", count=n, embedder=self.embedder.name)
            except Exception as exc:  # a flaky endpoint must not end the daemon; retry later
                self.embed_errors += 1
                log.warning(
                    "embedding failed; will retry", error=repr(exc), embedder=self.embedder.name
                )
                with anyio.move_on_after(min(300.0, 5.0 * 2 ** min(self.embed_errors, 6))):
                    await self._wake.wait()
                self._wake.set()
