"""The memory index: the `memories` table with its FTS5 index and vectors, as one service.

Facts, profile facts, session summaries and transcript chunks live in one `memories` table
(migration 0002) with an external-content FTS5 index. Vectors are cached in `embeddings` by
(content hash, model) — the truth, a plain BLOB table — and searched with numpy over an
in-memory float32 matrix that is loaded once (from the copy persisted beside the database when
it still matches) and refreshed incrementally: every writer stamps its rows with the next
`memory.generation` (kv), so a reader notices a CLI import made by another process with one
point lookup per search. Until vectors exist, search works lexically.

The index composes three parts and owns the matrix they share: `MemoryWriter` (writer.py)
writes and reads rows, `EmbeddingWorker` (embedding.py) fills in missing vectors in the
background, `MemorySearch` (search.py) ranks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from daemon.clock import Clock
from daemon.log import get_logger
from daemon.memory.chunks import chunk_session
from daemon.memory.embedders import Embedder, embed_queries
from daemon.memory.embedding import EmbeddingWorker
from daemon.memory.lexical import LexicalSearcher, PgLexicalSearcher
from daemon.memory.links import backfill as backfill_links
from daemon.memory.matrix import StaleMatrix, VectorMatrix, matrix_path
from daemon.memory.pg_matrix import PgVectorMatrix
from daemon.memory.related import RelatedWords
from daemon.memory.search import MemorySearch, SearchMode
from daemon.memory.shared import SharedFacts
from daemon.memory.uses import UseLog
from daemon.memory.writer import MemoryWriter
from daemon.settings import MemorySettings
from daemon.store.db import Database
from daemon.store.memories import MemoriesRepo, in_snapshot

__all__ = ["MemoryIndex", "SearchMode"]

log = get_logger("memory.index")

# Query vectors kept (384 floats each: ~6 MB): a CLI batch primes a few thousand sub-queries.
QUERY_CACHE = 4096
# The persisted matrix is rewritten once this many rows or vectors changed since it was saved.
PERSIST_ROWS = 2000


class MemoryIndex:
    """Own the memories tables, FTS5 and vectors; an async context manager (background embedding).

    Entering starts the embedding task (unless the database is read-only) and wakes it so
    memories without a vector for the current model — after an import, or a model change —
    are embedded in the background. Exiting cancels it; unfinished work is picked up on the
    next start, since "missing vector" is read from the database, not remembered.
    """

    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        settings: MemorySettings,
        clock: Clock,
        *,
        background: bool = True,
        persist: bool = True,
        persist_rows: int = PERSIST_ROWS,
    ) -> None:
        self.db = db
        self.rows = MemoriesRepo(db)
        self.related = RelatedWords(db, embedder)
        self.background = background
        self.persist = persist
        self.persist_rows = persist_rows
        # What the last load of the persisted matrix found ("persisted …" or "rebuilt: why").
        self.matrix_status = "not loaded"
        self._matrix_checked = False
        self._index_id = ""
        self._save_lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self.embedder = embedder
        self.settings = settings
        self.clock = clock
        # The backend's own vector and full-text search; everything else is shared.
        self.matrix: VectorMatrix
        if db.is_postgres:
            self.matrix = PgVectorMatrix(
                model=embedder.name,
                dim=embedder.dim,
                url=db.url,
                schema=db.schema,
                build_memory=db.build_memory,
            )
        else:
            self.matrix = VectorMatrix(model=embedder.name, dim=embedder.dim)
        self._stack: AsyncExitStack | None = None
        self._refresh_lock = anyio.Lock()
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.lexical = PgLexicalSearcher() if db.is_postgres else LexicalSearcher()
        # On PostgreSQL: what the person shared with every agent, copied in before a search.
        self.shared = SharedFacts(self)
        self.embedding = EmbeddingWorker(
            db, embedder, self.refresh, bulk=self._bulk if db.is_postgres else None
        )
        self.writer = MemoryWriter(db, self.lexical, self.embedding.wake)
        # What recall shows is counted here (facts' uses: staleness, promotion by use).
        self.uses = UseLog(db, clock)
        self.searcher = MemorySearch(
            db,
            embedder,
            self.matrix,
            self.lexical,
            hops=settings.search_hops,
            refresh=self.refresh,
            query_vectors=self.query_vectors,
        )
        # The three parts' verbs, spoken to the index as a whole.
        self.upsert = self.writer.upsert
        self.retire = self.writer.retire
        self.restore = self.writer.restore
        self.clear = self.writer.clear
        self.get = self.writer.get
        self.recent = self.writer.recent
        self.history = self.writer.history
        self.flush = self.embedding.flush
        self.search = self.searcher.search
        self.search_plan = self.searcher.search_plan
        self.similar = self.searcher.similar

    # ----- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> MemoryIndex:
        if self.background and not self.db.readonly:
            # A home chunked before mention links existed gets them once (`links.backfill`).
            found = await backfill_links(self.db, self.clock.now().isoformat())
            if found is not None:
                log.info("mention links filled from the messages", links=found)
        if self.background and not self.db.readonly and self.embedder.dim > 0:
            async with AsyncExitStack() as stack:
                tg = await stack.enter_async_context(anyio.create_task_group())
                # Cancelled first on exit, so the worker stops before its task group closes.
                stack.callback(tg.cancel_scope.cancel)
                tg.start_soon(self.embedding.run, self._warm_up, name="memory-embedder")
                self.embedding.wake()
                self._tg = tg
                stack.callback(setattr, self, "_tg", None)
                self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        if isinstance(self.matrix, PgVectorMatrix):
            await anyio.to_thread.run_sync(self.matrix.close)
        # The daemon (the one index running an embedding worker) leaves its matrix as it knew
        # it; any other only when it had to rebuild or read much, never for a few rows.
        m = self.matrix
        if (
            self._matrix_checked
            and m.rows_since_save
            and (
                stack is not None
                or m.saved_generation < 0
                or m.rows_since_save >= self.persist_rows
            )
        ):
            with anyio.CancelScope(shield=True):
                await self.save_matrix()

    @property
    def embed_errors(self) -> int:
        return self.embedding.embed_errors

    # ----- reads -----------------------------------------------------------------------------
    async def stats(self) -> dict[str, object]:
        await self.refresh()
        kinds = await self.rows.kind_counts()
        with_vector = await self.rows.with_vector(self.embedder.name) if self.embedder.dim else 0
        total = sum(k.count for k in kinds)
        return {
            "memories": total,
            "by_kind": {k.kind: k.count for k in kinds},
            "retired": sum(k.retired for k in kinds),
            "embedder": self.embedder.name,
            "dim": self.embedder.dim,
            "with_vector": with_vector,
            "pending_vectors": (total - with_vector) if self.embedder.dim else 0,
            "cached_embeddings": await self.rows.stored_vectors(),
            "db_bytes": await self.rows.store_bytes(),
            "matrix_bytes": self.matrix.nbytes,
            "matrix": self.matrix_status,
        }

    # ----- the vector matrix -----------------------------------------------------------------
    async def refresh(self) -> None:
        """Bring the in-memory matrix up to date with the database (cheap when nothing changed).

        The first call starts from the matrix persisted beside the database when it matches
        the index (see `VectorMatrix.load`) and reads only what changed since; otherwise it
        builds the matrix from the database. Once enough has changed, the file is rewritten.
        """
        await self.shared.sync()
        async with self._refresh_lock:
            if not self._matrix_checked:
                self._matrix_checked = True
                await self._load_matrix()
            else:
                await self.db.run(self.matrix.refresh)
            if self.background and self.matrix.sketching and not self.matrix.sketch_ready:
                # The daemon builds the sign-bit sketch before its first search, under the
                # refresh lock (no refresh changes vectors meanwhile); a one-shot command
                # builds it on its first vector query only (a lexical one never needs it).
                await anyio.to_thread.run_sync(self.matrix.prepare_sketch)
        if self.persist and self.matrix.rows_since_save >= self.persist_rows:
            if self._tg is not None:
                # The daemon: the search that noticed goes on; the file is written behind it.
                self._tg.start_soon(self.save_matrix, name="memory-matrix-save")
            else:
                await self.save_matrix()

    @property
    def matrix_file(self) -> Path:
        return matrix_path(self.db.path, self.embedder.name, self.embedder.dim)

    async def _load_matrix(self) -> None:
        """Take the persisted matrix if it still describes the index, then bring it up to date."""

        def check(conn: Any) -> tuple[bool, int]:
            # One read transaction: the refresh and the count see the same snapshot.
            found: tuple[bool, int] = in_snapshot(conn, self.matrix.refresh)
            return found

        state = await self.rows.state()
        self._index_id = state.index_id
        path = self.matrix_file
        reason = ""
        if self.persist:
            try:
                await anyio.to_thread.run_sync(self.matrix.load, path, state)
            except StaleMatrix as exc:
                reason = str(exc)
        else:
            reason = "persistence off"
        _, count = await self.db.run(check)
        if not reason and count != len(self.matrix):
            reason = f"it holds {len(self.matrix)} rows, the index {count}"
            self.matrix.clear()
            await self.db.run(check)
        if reason:
            self.matrix_status = f"rebuilt: {reason}"
            if path.exists() or self.persist:
                log.info(
                    "vector matrix rebuilt from the database",
                    reason=reason,
                    rows=len(self.matrix),
                    file=path.name,
                )
        else:
            self.matrix_status = f"persisted (generation {self.matrix.saved_generation})"

    async def save_matrix(self) -> None:
        """Persist the matrix beside the database; a failure is logged, never raised.

        The copy is taken with refreshes held off; the file is written in a worker thread.
        """
        if not self.persist or not self._index_id:
            return
        async with self._save_lock:
            async with self._refresh_lock:
                if (
                    not self.matrix.rows_since_save
                    and self.matrix.saved_generation == self.matrix.generation
                ):
                    return
                snap = self.matrix.snapshot(index_id=self._index_id)
            try:
                await anyio.to_thread.run_sync(snap.write, self.matrix_file)
            except OSError as exc:
                log.warning(
                    "could not persist the vector matrix",
                    file=str(self.matrix_file),
                    error=repr(exc),
                )

    async def query_vectors(self, queries: Sequence[str]) -> np.ndarray | None:
        """Embed queries (cached per text); None when the embedder makes no vectors."""
        if self.embedder.dim == 0:
            return None
        missing = [q for q in dict.fromkeys(queries) if q not in self._query_cache]
        if missing:
            vecs = await embed_queries(self.embedder, missing)
            for q, v in zip(missing, vecs, strict=True):
                self._query_cache[q] = v
                if len(self._query_cache) > QUERY_CACHE:
                    self._query_cache.popitem(last=False)
        return np.vstack([self._query_cache[q] for q in queries])

    @asynccontextmanager
    async def _bulk(self, pending: int) -> AsyncIterator[None]:
        """Around a large embedding backlog on PostgreSQL: the HNSW index set aside and built
        again after, when that is cheaper than keeping it up row by row (`PgVectorMatrix`).

        Searches meanwhile are exact in numpy. An embedder that fails part way leaves the index
        built over what went in (the rest follows on the worker's retry); the daemon stopping
        leaves it to the next start, which builds it before embedding anything else."""
        m = self.matrix
        if not isinstance(m, PgVectorMatrix) or not m.worth_setting_aside(pending):
            yield
            return
        log.info("vector index set aside for a large backlog", pending=pending)
        await anyio.to_thread.run_sync(m.set_aside)
        try:
            yield
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            await anyio.to_thread.run_sync(m.rebuild)
            raise
        await anyio.to_thread.run_sync(m.rebuild)

    async def _warm_up(self) -> None:
        """Load the persisted matrix and, when it holds vectors, the embedding model (daemon start).

        Searches through the daemon are then warm from the first; the model is loaded in a
        worker thread, so lexical searches meanwhile are not held up. Failures are only logged:
        the first query that needs a vector tries again.
        """
        try:
            if isinstance(self.matrix, PgVectorMatrix) and self.embedder.dim > 0:
                await anyio.to_thread.run_sync(self.matrix.prepare_index)
            await self.refresh()
            if self.matrix.vector_count:
                await self.query_vectors(["warm up"])
            # The vocabulary of words standing in for a question's (`daemon.memory.related`):
            # an old home's first build here, not in the first turns' time.
            added = await self.related.refresh()
            if added:
                log.info("memory vocabulary extended", words=added, total=len(self.related.words))
        except Exception as exc:  # a broken model must not end the daemon
            log.warning(
                "embedder warm-up failed; the first vector query will retry", error=repr(exc)
            )

    # ----- transcripts -----------------------------------------------------------------------
    async def index_session(self, session_id: str) -> int:
        """Cut the not-yet-chunked messages of a session into chunk memories; return how many are new.

        Every message becomes its own chunk (exact evidence) and overlapping windows of
        `chunk_messages` give context; a window still filling up is rewritten under the same
        uid as messages arrive. Idempotent.
        """
        return await chunk_session(self, session_id)
