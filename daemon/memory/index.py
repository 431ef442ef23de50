"""The hybrid memory index: FTS5 BM25 + vectors + recency, fused by reciprocal rank.

Facts, profile facts, session summaries and transcript chunks live in one `memories` table
(migration 0002) with an external-content FTS5 index. Vectors are cached in `embeddings` by
(content hash, model) — the truth, a plain BLOB table — and searched with numpy over an
in-memory float32 matrix that is loaded once and refreshed incrementally: every writer stamps
its rows with the next `memory.generation` (kv), so a reader notices a CLI import made by
another process with one point lookup per search. Embedding runs in a background task in
batches; until vectors exist, search works lexically.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import anyio
import numpy as np

from daemon.clock import Clock
from daemon.log import get_logger
from daemon.memory.api import Kind, MemoryItem, Origin
from daemon.memory.embedders import Embedder
from daemon.memory.lexical import LexicalSearcher, RowFilter
from daemon.memory.matrix import StaleMatrix, VectorMatrix, index_state, matrix_path
from daemon.memory.query import QueryPlan, bridge_entities, match_terms, terms, words
from daemon.memory.text import stem
from daemon.settings import MemorySettings
from daemon.store.db import Database

log = get_logger("memory.index")

SearchMode = Literal["hybrid", "lexical", "vector"]

RRF_K = 60.0
LEXICAL_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0
RECENCY_WEIGHT = 0.15
# Multiplicative, so a boost reorders near-ties (about two places at the top) but cannot
# lift an irrelevant memory over a relevant one.
EXPLICIT_BOOST = 0.03
IMPORTANCE_WEIGHT = 0.04
CANDIDATES = 60
# The second hop: names in the first hop's best few hits become BM25 queries of their own.
HOP_SEEDS = 3
HOP_QUERIES = 3
HOP_WEIGHT = 1.0
# What a question asks about a person, searched among the memories that name them. It is
# weighted above the full question, whose vector the name pulls towards every line naming the
# person (measured on both recall sets: 1.0 → 3.0 helped, nothing fell; see the README).
ABOUT_POOL = 200
ABOUT_WEIGHT = 3.0
# Facet coverage: the share of the question's words an item has boosts its fused score.
FACET_WEIGHT = 0.3
FACET_POOL = 30
EMBED_ROUND = 512
# Query vectors kept (384 floats each: ~6 MB): a CLI batch primes a few thousand sub-queries.
QUERY_CACHE = 4096
# The persisted matrix is rewritten once this many rows or vectors changed since it was saved.
PERSIST_ROWS = 2000


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


def iso(dt: datetime) -> str:
    """Format a time the one way the index stores it (UTC, microseconds) so strings sort."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def parse_iso(value: str | None) -> datetime | None:
    if not value:
        return None
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def embed_text(title: str, text: str) -> str:
    """The text a memory is embedded as (its title gives a chunk or summary its frame)."""
    return f"{title}\n{text}" if title else text


def content_hash(title: str, text: str) -> str:
    return hashlib.blake2b(embed_text(title, text).encode(), digest_size=16).hexdigest()


_COLUMNS = (
    "uid, kind, text, title, tags, importance, origin, created_at, valid_from, supersedes, "
    "session_id, message_ids, source, content_hash, explicit, meta, version"
)
_UPSERT = f"""
INSERT INTO memories({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(uid) DO UPDATE SET
  kind=excluded.kind, text=excluded.text, title=excluded.title, tags=excluded.tags,
  importance=excluded.importance, origin=excluded.origin, created_at=excluded.created_at,
  valid_from=excluded.valid_from, supersedes=excluded.supersedes, session_id=excluded.session_id,
  message_ids=excluded.message_ids, source=excluded.source, content_hash=excluded.content_hash,
  explicit=excluded.explicit, meta=excluded.meta, version=excluded.version
WHERE memories.content_hash IS NOT excluded.content_hash OR memories.kind IS NOT excluded.kind
  OR memories.tags IS NOT excluded.tags OR memories.importance IS NOT excluded.importance
  OR memories.origin IS NOT excluded.origin OR memories.created_at IS NOT excluded.created_at
  OR memories.valid_from IS NOT excluded.valid_from OR memories.supersedes IS NOT excluded.supersedes
  OR memories.session_id IS NOT excluded.session_id OR memories.message_ids IS NOT excluded.message_ids
  OR memories.source IS NOT excluded.source OR memories.explicit IS NOT excluded.explicit
  OR memories.meta IS NOT excluded.meta
"""


def next_generation(conn: Any) -> int:
    """Bump and return `memory.generation` (call inside the writer's transaction)."""
    row = conn.execute(
        "INSERT INTO kv(key, value, updated_at) VALUES ('memory.generation', '1', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1, updated_at = excluded.updated_at "
        "RETURNING value",
        (iso(datetime.now(UTC)),),
    ).fetchone()
    return int(row[0])


def _write(conn: Any, fn: Any, *args: Any) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    try:
        out = fn(conn, *args)
        conn.execute("COMMIT")
        return out
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _upsert_sync(
    conn: Any, rows: list[tuple[Any, ...]], supersessions: list[tuple[str, str, str]]
) -> int:
    gen = next_generation(conn)
    conn.executemany(_UPSERT, [(*r, gen) for r in rows])
    for old, new, at in supersessions:
        conn.execute(
            "UPDATE memories SET superseded_by = ?, retired_at = coalesce(retired_at, ?), version = ? "
            "WHERE uid = ? AND superseded_by IS NOT ?",
            (new, at, gen, old, new),
        )
    return gen


# "Maya (8 May 2023): " -> "Maya: ": the same words from the same speaker on another day.
_UNDATED = re.compile(r"(?m)^([^\n:()]{1,60}?)\s*\([^)\n]{1,40}\):")


@functools.lru_cache(maxsize=8192)
def undated(text: str) -> str:
    """A memory's text with its speaker labels' dates left out ("Maya (8 May 2023): " -> "Maya: ")."""
    return _UNDATED.sub(r"\1:", text).strip()


@functools.lru_cache(maxsize=8192)
def stems_of(text: str) -> frozenset[str]:
    """The stems of a memory's content words (cached: the same memories are re-ranked often)."""
    return frozenset(stem(w) for w in terms(text))


def descending(scored: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The same order, each score capped by the one above it, so scores never rise down a list.

    The plan's search places some results by rule (the time window first, the first hop's best
    hits before the second hop's); a result's own fused score may be higher than that of the
    one placed above it. The score shown is then the one its place allows.
    """
    out: list[tuple[int, float]] = []
    cap = float("inf")
    for rowid, score in scored:
        cap = min(cap, score)
        out.append((rowid, cap))
    return out


def _row_to_item(row: Any, score: float = 0.0) -> MemoryItem:
    meta = json.loads(row["meta"] or "{}")
    meta.update(
        importance=row["importance"],
        explicit=bool(row["explicit"]),
        retired_at=row["retired_at"],
        supersedes=row["supersedes"],
        superseded_by=row["superseded_by"],
        valid_from=row["valid_from"],
    )
    return MemoryItem(
        id=row["uid"],
        kind=row["kind"],
        text=row["text"],
        origin=row["origin"],
        ts=parse_iso(row["created_at"]),
        session=row["session_id"],
        score=score,
        title=row["title"],
        tags=tuple(row["tags"].split()) if row["tags"] else (),
        message_ids=tuple(json.loads(row["message_ids"] or "[]")),
        source=row["source"],
        meta=meta,
    )


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
        self.matrix = VectorMatrix(model=embedder.name, dim=embedder.dim)
        self._stack: AsyncExitStack | None = None
        self._wake = anyio.Event()
        self._embed_lock = anyio.Lock()
        self._refresh_lock = anyio.Lock()
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.embed_errors = 0
        self.lexical = LexicalSearcher()
        self.hops = settings.search_hops
        self._vector_weight = VECTOR_WEIGHT * float(getattr(embedder, "fusion_weight", 1.0))

    # ----- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> MemoryIndex:
        if self.background and not self.db.readonly and self.embedder.dim > 0:
            async with AsyncExitStack() as stack:
                tg = await stack.enter_async_context(anyio.create_task_group())
                # Cancelled first on exit, so the worker stops before its task group closes.
                stack.callback(tg.cancel_scope.cancel)
                tg.start_soon(self._embed_worker, name="memory-embedder")
                self._wake.set()
                self._tg = tg
                stack.callback(setattr, self, "_tg", None)
                self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
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

    # ----- writes ----------------------------------------------------------------------------
    async def upsert(self, items: Sequence[NewMemory]) -> None:
        """Insert or replace memories by uid (idempotent); vectors follow in the background.

        An item with `supersedes` retires the memory it corrects (and links both ways).
        The write is one transaction: cancelled before it starts, nothing is written.
        """
        if not items:
            return
        rows, supersessions = [], []
        for it in items:
            if not it.text.strip():
                raise ValueError(f"memory {it.uid!r} has empty text")
            rows.append(
                (
                    it.uid,
                    it.kind,
                    it.text,
                    it.title,
                    " ".join(it.tags),
                    float(it.importance),
                    it.origin,
                    iso(it.created_at),
                    iso(it.valid_from) if it.valid_from else None,
                    it.supersedes,
                    it.session_id,
                    json.dumps(list(it.message_ids)),
                    it.source,
                    content_hash(it.title, it.text),
                    int(it.explicit),
                    json.dumps(it.meta, sort_keys=True, default=str),
                )
            )
            if it.supersedes:
                supersessions.append((it.supersedes, it.uid, iso(it.valid_from or it.created_at)))
        await self.db.run(_write, _upsert_sync, rows, supersessions)
        self._wake.set()

    async def retire(self, uid: str, *, at: datetime, superseded_by: str | None = None) -> None:
        """Mark a memory retired (kept, never deleted); unknown uids raise KeyError."""

        def work(conn: Any) -> int:
            gen = next_generation(conn)
            return conn.execute(
                "UPDATE memories SET retired_at = coalesce(retired_at, ?), "
                "superseded_by = coalesce(?, superseded_by), version = ? WHERE uid = ?",
                (iso(at), superseded_by, gen, uid),
            ).rowcount

        if not await self.db.run(_write, work):
            raise KeyError(f"no memory with id {uid!r}")

    async def restore(self, uid: str) -> None:
        """Make a retired (not superseded) memory active again; unknown uids raise KeyError."""

        def work(conn: Any) -> int:
            gen = next_generation(conn)
            return conn.execute(
                "UPDATE memories SET retired_at = NULL, version = ? WHERE uid = ? AND superseded_by IS NULL",
                (gen, uid),
            ).rowcount

        if not await self.db.run(_write, work):
            raise KeyError(f"no active-able memory with id {uid!r}")

    async def clear(self) -> None:
        """Drop all memories and chunk marks (reindex); cached embeddings are kept for reuse."""

        def work(conn: Any) -> None:
            self.lexical.forget()
            conn.execute("DELETE FROM memories")
            conn.execute("DELETE FROM memory_chunked")
            conn.execute(
                "INSERT INTO kv(key, value, updated_at) VALUES ('memory.epoch', '1', ?) ON CONFLICT(key) "
                "DO UPDATE SET value = CAST(value AS INTEGER) + 1, updated_at = excluded.updated_at",
                (iso(datetime.now(UTC)),),
            )
            next_generation(conn)

        await self.db.run(_write, work)

    # ----- reads -----------------------------------------------------------------------------
    async def get(self, uid: str) -> MemoryItem | None:
        row = await self.db.fetchone("SELECT * FROM memories WHERE uid = ?", (uid,))
        return _row_to_item(row) if row else None

    async def recent(
        self, kinds: Collection[str], limit: int, *, include_retired: bool = False
    ) -> list[MemoryItem]:
        """Return the newest memories of `kinds` (by valid time), newest first."""
        if limit <= 0 or not kinds:
            return []
        retired = "" if include_retired else "AND retired_at IS NULL"
        # One indexed, LIMITed walk per kind (see migration 0003), merged here: an IN list
        # would make SQLite sort every row of those kinds.
        sql = (
            f"SELECT rowid AS rid, *, coalesce(valid_from, created_at) AS vt FROM memories WHERE kind = ? {retired} "
            "ORDER BY coalesce(valid_from, created_at) DESC, rowid DESC LIMIT ?"
        )

        def walk(conn: Any) -> list[Any]:
            rows: list[Any] = []
            for kind in dict.fromkeys(kinds):
                rows.extend(conn.execute(sql, (kind, limit)).fetchall())
            rows.sort(key=lambda r: (r["vt"], r["rid"]), reverse=True)
            return rows[:limit]

        return [_row_to_item(r) for r in await self.db.run(walk)]

    async def history(self, uid: str) -> list[MemoryItem]:
        """Return the supersession chain through `uid`, oldest first (empty when unknown)."""
        start = await self.get(uid)
        if start is None:
            return []
        chain = [start]
        seen = {uid}
        cur = start
        while (prev := cur.meta.get("supersedes")) and prev not in seen:
            item = await self.get(str(prev))
            if item is None:
                break
            chain.insert(0, item)
            seen.add(item.id)
            cur = item
        cur = start
        while (nxt := cur.meta.get("superseded_by")) and nxt not in seen:
            item = await self.get(str(nxt))
            if item is None:
                break
            chain.append(item)
            seen.add(item.id)
            cur = item
        return chain

    async def stats(self) -> dict[str, object]:
        await self.refresh()
        kinds = await self.db.fetchall(
            "SELECT kind, count(*) AS n, sum(retired_at IS NOT NULL) AS retired FROM memories GROUP BY kind"
        )
        vectors = await self.db.fetchone(
            "SELECT count(*) FROM memories m JOIN embeddings e ON e.content_hash = m.content_hash AND e.model = ?",
            (self.embedder.name,),
        )
        total = sum(r["n"] for r in kinds)
        page = await self.db.fetchone("PRAGMA page_count")
        size = await self.db.fetchone("PRAGMA page_size")
        cached = await self.db.fetchone("SELECT count(*) FROM embeddings")
        return {
            "memories": total,
            "by_kind": {r["kind"]: r["n"] for r in kinds},
            "retired": sum(r["retired"] or 0 for r in kinds),
            "embedder": self.embedder.name,
            "dim": self.embedder.dim,
            "with_vector": int(vectors[0]) if self.embedder.dim else 0,
            "pending_vectors": (total - int(vectors[0])) if self.embedder.dim else 0,
            "cached_embeddings": int(cached[0]),
            "db_bytes": int(page[0]) * int(size[0]),
            "matrix_bytes": self.matrix.nbytes,
            "matrix": self.matrix_status,
            "vec_extension": self.db.vec_available,
        }

    # ----- search ----------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Bring the in-memory matrix up to date with the database (cheap when nothing changed).

        The first call starts from the matrix persisted beside the database when it matches
        the index (see `VectorMatrix.load`) and reads only what changed since; otherwise it
        builds the matrix from the database. Once enough has changed, the file is rewritten.
        """
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
            conn.execute("BEGIN")
            try:
                changed = self.matrix.refresh(conn)
                count = int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
            finally:
                conn.execute("COMMIT")
            return changed, count

        state = await self.db.run(index_state)
        self._index_id = state["index_id"]
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
            vecs = await self.embedder.embed(missing)
            for q, v in zip(missing, vecs, strict=True):
                self._query_cache[q] = v
                if len(self._query_cache) > QUERY_CACHE:
                    self._query_cache.popitem(last=False)
        return np.vstack([self._query_cache[q] for q in queries])

    def _where(
        self,
        kinds: Collection[str] | None,
        include_retired: bool,
        after: datetime | None,
        before: datetime | None,
    ) -> RowFilter:
        return RowFilter(
            kinds=tuple(kinds) if kinds else None,
            include_retired=include_retired,
            after=after,
            before=before,
        )

    def _vector_masks(self, windows: Sequence[RowFilter]) -> list[np.ndarray]:
        """Per window, the rows a vector search may return (with a vector, passing its filters)."""
        return [
            self.matrix.mask(
                kinds=w.kinds,
                include_retired=w.include_retired,
                after=w.after,
                before=w.before,
                need_vector=True,
            )
            for w in windows
        ]

    async def _rank_queries(
        self,
        queries: Sequence[str],
        *,
        limit: int,
        mode: SearchMode,
        windows: Sequence[RowFilter],
        query_vector: np.ndarray | None = None,
        drop_common: bool = True,
        vector_queries: int | None = None,
    ) -> list[list[dict[int, float]]]:
        """Return, per window, per informative query, fused scores by rowid (no hydration).

        Secondary queries whose every term is common are dropped (the first query never is).
        Lexical searches run on the database thread in one hop; meanwhile a worker thread
        computes all query similarities in one matrix product shared by every window, so the
        event loop never runs the 100k-row product itself. Cancellation abandons both (a
        running SQL statement or product finishes in its thread, its result unused).
        """
        lexical_on = mode in ("hybrid", "lexical")
        # No vector to compare with, no query to embed: the model is never loaded for nothing.
        vector_on = (
            mode in ("hybrid", "vector") and self.embedder.dim > 0 and self.matrix.vector_count > 0
        )
        rows = len(self.matrix)

        def choose(conn: Any) -> list[str]:
            if not drop_common or len(queries) == 1:
                return list(queries)
            phrases = {p: None for q in queries for p in match_terms(q)}
            df = self.lexical.doc_freqs(conn, phrases, rows, self.matrix.generation)
            return [queries[0], *(q for q in queries[1:] if self.lexical.informative(q, df, rows))]

        kept = await self.db.run(choose) if drop_common and len(queries) > 1 else list(queries)

        def lexical_work(conn: Any) -> list[list[list[int]]]:
            if not lexical_on:
                return [[[] for _ in kept] for _ in windows]
            return [
                self.lexical.search(
                    conn,
                    kept,
                    limit=limit,
                    rows=rows,
                    where=w,
                    rows_in=self.matrix,
                    generation=self.matrix.generation,
                )
                for w in windows
            ]

        def vector_work(qv: np.ndarray) -> list[list[list[int]]]:
            return self.matrix.ranked(qv, self._vector_masks(windows), limit)

        found: dict[str, Any] = {}

        async def lexical_side() -> None:
            found["lexical"] = await self.db.run(lexical_work)

        async def vector_side() -> None:
            if query_vector is not None and len(queries) == 1:
                qv = np.asarray(query_vector, dtype=np.float32).reshape(1, -1)
            else:
                # Only the first `vector_queries` queries get a vector pass (the rest: BM25 alone).
                qv = await self.query_vectors(kept[: vector_queries or len(kept)])  # type: ignore[assignment]
            found["vector"] = await anyio.to_thread.run_sync(vector_work, qv)

        # The BM25 searches (database thread) and the matrix product (a worker thread) overlap.
        async with anyio.create_task_group() as tg:
            tg.start_soon(lexical_side)
            if vector_on:
                tg.start_soon(vector_side)
        lexical = found["lexical"]
        if vector_on:
            vector = [per + [[] for _ in range(len(kept) - len(per))] for per in found["vector"]]
        else:
            vector = [[[] for _ in kept] for _ in windows]
        return [
            [self._fuse(lexical[wi][qi], vector[wi][qi]) for qi in range(len(kept))]
            for wi in range(len(windows))
        ]

    def _fuse(self, lexical: list[int], vector: list[int]) -> dict[int, float]:
        fused: dict[int, float] = {}
        for rank, rowid in enumerate(lexical):
            fused[rowid] = fused.get(rowid, 0.0) + LEXICAL_WEIGHT / (RRF_K + rank + 1)
        for rank, rowid in enumerate(vector):
            fused[rowid] = fused.get(rowid, 0.0) + self._vector_weight / (RRF_K + rank + 1)
        if fused:
            rowids = list(fused)
            created, explicit, importance = self.matrix.attributes(rowids)
            order = np.argsort(-created, kind="stable")
            for rank, i in enumerate(order):
                rid = rowids[int(i)]
                fused[rid] += RECENCY_WEIGHT / (RRF_K + rank + 1)
                fused[rid] *= (
                    1.0
                    + EXPLICIT_BOOST * float(explicit[i])
                    + IMPORTANCE_WEIGHT * (float(importance[i]) - 0.5)
                )
        return fused

    async def _texts(
        self, rowids: Collection[int], known: dict[int, tuple[str, str]] | None = None
    ) -> dict[int, tuple[str, str]]:
        """(title, text) by rowid; `known` holds what this search already read and is filled in."""
        known = {} if known is None else known
        missing = [r for r in rowids if r not in known]
        if missing:
            rows = await self.db.fetchall(
                f"SELECT rowid, title, text FROM memories WHERE rowid IN ({','.join('?' * len(missing))})",
                missing,
            )
            known.update((r[0], (r[1] or "", r[2] or "")) for r in rows)
        return known

    async def _by_facets(
        self,
        plan: QueryPlan,
        scored: list[tuple[int, float]],
        chains: dict[str, str] | None = None,
        known: dict[int, tuple[str, str]] | None = None,
    ) -> list[tuple[int, float]]:
        """Re-rank so that items covering more of the question's words rise among near-equals.

        A question joins facets ("what did X do after moving to Y?"); an item that speaks of
        several of them beats one that repeats a single word. `chains` maps a second-hop
        bridge name to the first-hop text it came from: an item naming the bridge covers
        what that text covers ("Tomas" stands for "my brother … medical school").
        """
        asked = terms(plan.text)
        facets = {stem(w) for w in asked}
        if FACET_WEIGHT <= 0 or len(facets) < 2 or not scored:
            return scored
        found = await self._texts([r for r, _ in scored], known)
        texts = {r: f"{title} {text}" for r, (title, text) in found.items()}
        weight = await self._facet_weights(asked)
        total = sum(weight.values())

        def share(text: str) -> float:
            return sum(weight[f] for f in facets & stems_of(text)) / total

        links = [(name.lower(), share(seed)) for name, seed in (chains or {}).items()]

        def covered(rowid: int) -> float:
            text = texts.get(rowid, "")
            low = text.lower()
            return max([share(text), *(cov for name, cov in links if name in low)])

        return sorted(
            ((r, s * (1.0 + FACET_WEIGHT * covered(r))) for r, s in scored),
            key=lambda rs: (-rs[1], -rs[0]),
        )

    async def _distinct(
        self,
        scored: list[tuple[int, float]],
        k: int,
        known: dict[int, tuple[str, str]] | None = None,
    ) -> list[tuple[int, float]]:
        """The first `k` results, each text once: a line someone says often ("we had friends
        over for dinner") is shown at its best place, not at every date it was said."""
        if len(scored) <= 1:
            return scored[:k]
        found = await self._texts([r for r, _ in scored], known)
        said = {r: undated(text) for r, (_, text) in found.items()}
        seen: set[str] = set()
        out: list[tuple[int, float]] = []
        for rowid, score in scored:
            text = said.get(rowid)
            if text is not None and text in seen:
                continue
            if text is not None:
                seen.add(text)
            out.append((rowid, score))
            if len(out) == k:
                break
        return out

    async def _facet_weights(self, asked: Sequence[str]) -> dict[str, float]:
        """Each question word's stem weighted by its IDF in memory.

        A name on half the memories (a speaker's) covers little; a word few memories use
        ("brother", "hobby") says the item speaks of what was asked.
        """
        rows = len(self.matrix)
        phrases = {w: '"' + w.replace('"', "") + '"' for w in asked}

        def count(conn: Any) -> dict[str, int]:
            return self.lexical.doc_freqs(conn, phrases.values(), rows, self.matrix.generation)

        df = await self.db.run(count)
        weight: dict[str, float] = {}
        for w, phrase in phrases.items():
            idf = math.log(1.0 + (rows + 1.0) / (1.0 + df.get(phrase, 0)))
            weight[stem(w)] = max(weight.get(stem(w), 0.0), idf)
        return weight

    async def _about(
        self,
        plan: QueryPlan,
        windows: Sequence[RowFilter],
        known: dict[int, tuple[str, str]] | None = None,
    ) -> list[list[dict[int, float]]]:
        """Per window, rankings for what the question asks about someone, among the memories
        naming them.

        "What might Priya do for a living?": the question said of "they", by vector, over the
        `ABOUT_POOL` nearest memories, keeping those whose text names the person. Her own
        words about her work ("I teach maths to fourteen-year-olds") share nothing with the
        question, and the name in its vector pulls towards every line that mentions her.
        """
        if not plan.about or self.embedder.dim == 0 or not self.matrix.vector_count:
            return [[] for _ in windows]
        vectors = await self.query_vectors([q for _, q in plan.about])
        if vectors is None:
            return [[] for _ in windows]
        # Masks and ranking in the worker thread: at 100k rows neither belongs on the event loop.
        near = await anyio.to_thread.run_sync(
            lambda: self.matrix.ranked(vectors, self._vector_masks(windows), ABOUT_POOL)
        )
        # Checked on the candidates' text (bounded), not by an FTS match of a name that may
        # be on half the index.
        names = [
            re.compile(
                r"(?<!\w)" + r"\W+".join(map(re.escape, words(e))) + r"(?!\w)", re.IGNORECASE
            )
            for e, _ in plan.about
        ]
        candidates = sorted({r for per_query in near for rowids in per_query for r in rowids})
        texts = {r: text for r, (_, text) in (await self._texts(candidates, known)).items()}
        kept = [
            [
                [r for r in rowids if name.search(texts.get(r, ""))]
                for name, rowids in zip(names, per_query, strict=True)
            ]
            for per_query in near
        ]
        return [
            [
                {r: self._vector_weight / (RRF_K + rank + 1) for rank, r in enumerate(rows)}
                for rows in per_query
            ]
            for per_query in kept
        ]

    async def _second_hop(
        self, plan: QueryPlan, first: list[tuple[int, float]], where: RowFilter
    ) -> tuple[list[dict[int, float]], dict[str, str]]:
        """Rankings for the names the first hop's best hits mention and the question does not.

        "How is Maya's brother getting on at medical school?" finds "my brother Tomas got
        into medical school"; the answer ("Tomas complains about the anatomy exams") shares
        only "Tomas" with it. Bridges are searched by BM25 alone (no query vectors to embed).
        Returns the rankings and each bridge with the text it was found in.
        """
        seeds = await self._hydrate(first)
        asked = {w.lower() for w in terms(plan.text)}
        bridges: dict[str, str] = {}
        for item in seeds:
            for name in bridge_entities(item.text):
                if not asked & {w.lower() for w in terms(name)}:
                    bridges.setdefault(name, item.title + " " + item.text)
        if not bridges:
            return [], {}
        queries = list(bridges)[:HOP_QUERIES]
        [ranked] = await self._rank_queries(
            queries, limit=CANDIDATES, mode="lexical", windows=[where], drop_common=False
        )
        return ranked, {q: bridges[q] for q in queries}

    @staticmethod
    def _combine(
        ranked: list[dict[int, float]], k: int, weights: Sequence[float] | None = None
    ) -> list[tuple[int, float]]:
        """Fuse per-query rankings by reciprocal rank, the first query weighted most."""
        if len(ranked) == 1:
            return sorted(ranked[0].items(), key=lambda kv: (-kv[1], -kv[0]))[:k]
        total: dict[int, float] = {}
        for i, scores in enumerate(ranked):
            weight = weights[i] if weights is not None else (1.0 if i == 0 else 0.5)
            for rank, (rid, _s) in enumerate(
                sorted(scores.items(), key=lambda kv: (-kv[1], -kv[0]))
            ):
                total[rid] = total.get(rid, 0.0) + weight / (RRF_K + rank + 1)
        return sorted(total.items(), key=lambda kv: (-kv[1], -kv[0]))[:k]

    async def _hydrate(
        self, scored: list[tuple[int, float]], meta: dict[int, dict[str, object]] | None = None
    ) -> list[MemoryItem]:
        """Load the rows in order with their scores; `meta` adds to chosen items' meta."""
        if not scored:
            return []
        rows = await self.db.fetchall(
            f"SELECT rowid AS rid, * FROM memories WHERE rowid IN ({','.join('?' * len(scored))})",
            [r for r, _ in scored],
        )
        by_id = {r["rid"]: r for r in rows}
        items = [(r, _row_to_item(by_id[r], s)) for r, s in scored if r in by_id]
        for r, item in items:
            item.meta.update((meta or {}).get(r, {}))
        return [item for _, item in items]

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
        """Return the `k` best memories for `query`, best first, with fused scores.

        Lexical (BM25) and vector (cosine) rankings are fused by reciprocal rank, then
        recency, explicitness and importance nudge the order. Without an embedder, or before
        vectors exist, vector mode returns what it can and hybrid degrades to lexical.
        """
        if mode not in ("hybrid", "lexical", "vector"):
            raise ValueError(f"unknown search mode {mode!r}; use hybrid, lexical or vector")
        if k <= 0 or (not query.strip() and query_vector is None):
            return []
        await self.refresh()
        [[fused]] = await self._rank_queries(
            [query],
            limit=max(CANDIDATES, 3 * k),
            mode=mode,
            windows=[self._where(kinds, include_retired, after, before)],
            query_vector=query_vector,
        )
        return await self._hydrate(self._combine([fused], k))

    async def search_plan(
        self,
        plan: QueryPlan,
        *,
        k: int = 10,
        mode: SearchMode = "hybrid",
        kinds: Collection[str] | None = None,
        include_retired: bool = False,
        vector_queries: int | None = None,
    ) -> list[MemoryItem]:
        """Search a decomposed query: its time window is a preference, not a wall.

        Results inside the window (or before/after the remembered anchor, e.g. "my trip",
        whose own memory comes second) come first; the rest of the ranking fills up to `k`,
        so a mis-resolved time word never empties the answer. Each query is fused with the
        plan's about questions (a named person's memories, see `_about`) and, with two hops,
        the names the first hop's best hits mention (`_second_hop`); below those best hits,
        facet coverage re-ranks; each line appears once; scores never rise down the list.
        `vector_queries=n`: only the plan's first n queries get a vector pass (and an encode);
        the rest are searched by BM25 alone (automatic recall, which runs every turn).
        """
        queries = [q for q in dict.fromkeys(q.strip() for q in plan.all_queries()) if q]
        if not queries or k <= 0:
            return []
        after, before = plan.after, plan.before
        event: int | None = None
        if plan.anchor is not None:
            hits = await self.search(plan.anchor.text, k=1, kinds=kinds, mode=mode)
            if hits and hits[0].ts is not None:
                pivot = hits[0].ts
                row = await self.db.fetchone(
                    "SELECT rowid FROM memories WHERE uid = ?", (hits[0].id,)
                )
                event = int(row[0]) if row else None
                # Strictly after: the anchoring event itself is not what happened after it.
                after, before = (
                    (pivot + timedelta(seconds=1), None)
                    if plan.anchor.relation == "after"
                    else (None, pivot)
                )
        await self.refresh()
        windows = [self._where(kinds, include_retired, None, None)]
        if after is not None or before is not None:
            windows.append(self._where(kinds, include_retired, after, before))
        ranked = await self._rank_queries(
            queries,
            limit=max(CANDIDATES, 3 * k),
            mode=mode,
            windows=windows,
            vector_queries=vector_queries,
        )
        window_weights = [[1.0] + [0.5] * (len(r) - 1) for r in ranked]
        known: dict[int, tuple[str, str]] = {}  # memories' text, read once for this search
        if mode != "lexical":
            for wi, focus in enumerate(await self._about(plan, windows, known)):
                ranked[wi] = [*ranked[wi], *focus]
                window_weights[wi] += [ABOUT_WEIGHT] * len(focus)
        weights = window_weights[0]
        first = self._combine(ranked[0], HOP_SEEDS, weights)
        chains: dict[str, str] = {}
        # Items a bridge name found say so (meta "via"): recall keeps them although they may
        # share no word with the question.
        via: dict[int, dict[str, object]] = {}
        if self.hops > 1 and mode != "vector":
            hop, chains = await self._second_hop(plan, first, windows[0])
            ranked[0] = [*ranked[0], *hop]
            weights += [HOP_WEIGHT] * len(hop)
            for name, scores in zip(chains, hop, strict=True):
                for rowid in scores:
                    via.setdefault(rowid, {"via": name})
        # The first hop's best hits keep their places; what the second hop found ranks after.
        kept = {r for r, _ in first}
        # Room for the repeated lines `_distinct` drops.
        pool = self._combine(ranked[0], 2 * max(k, FACET_POOL) + len(first), weights)
        rest = await self._by_facets(
            plan, [(r, s) for r, s in pool if r not in kept], chains, known
        )
        base = await self._distinct(first + rest, k, known)
        if len(windows) == 1:
            return await self._hydrate(descending(base), via)
        inside = [
            (r, s) for r, s in self._combine(ranked[1], 2 * k, window_weights[1]) if r != event
        ]
        if event is not None:
            # "What did X do after Y?" joins Y to what followed: the event itself comes second.
            inside = [*inside[:1], (event, inside[0][1] if inside else 0.0), *inside[1:]]
        seen = {r for r, _ in inside}
        merged = await self._distinct(inside + [(r, s) for r, s in base if r not in seen], k, known)
        return await self._hydrate(descending(merged), via)

    async def similar(
        self, text: str, kinds: Collection[str], threshold: float
    ) -> list[MemoryItem]:
        """Return active memories of `kinds` near-identical to `text` (similarity >= threshold).

        Similarity is cosine of vectors when the embedder makes them, else word-set overlap
        (Jaccard); candidates come from lexical search so the cost stays small.
        """
        if not match_terms(text):
            return []
        await self.refresh()
        where = self._where(kinds, False, None, None)
        rows = len(self.matrix)
        [rowids] = await self.db.run(
            lambda conn: self.lexical.search(
                conn, [text], limit=20, rows=rows, where=where, rows_in=self.matrix
            )
        )
        if self.embedder.dim > 0:
            vec_hits = self.matrix.nearest((await self.query_vectors([text]))[0], 10, kinds=kinds)  # type: ignore[index]
            rowids = list(dict.fromkeys([*rowids, *(r for r, _ in vec_hits)]))
        items = await self._hydrate([(r, 0.0) for r in rowids])
        if not items:
            return []
        mine = set(terms(text))
        out: list[MemoryItem] = []
        sims: list[float]
        if self.embedder.dim > 0:
            vecs = await self.embedder.embed([text, *(embed_text(i.title, i.text) for i in items)])
            sims = [float(v) for v in vecs[1:] @ vecs[0]]
        else:
            sims = [
                len(mine & set(terms(i.text))) / max(1, len(mine | set(terms(i.text))))
                for i in items
            ]
        for item, sim in zip(items, sims, strict=True):
            if sim >= threshold:
                out.append(MemoryItem(**{**item.__dict__, "score": sim}))
        return sorted(out, key=lambda m: -m.score)

    # ----- embedding -------------------------------------------------------------------------
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

    async def _embed_pending(self, progress: Callable[[dict[str, Any]], None] | None = None) -> int:
        done, after = 0, 0
        total = 0
        if progress is not None:
            row = await self.db.fetchone(
                "SELECT count(DISTINCT m.content_hash) FROM memories m "
                "LEFT JOIN embeddings e ON e.content_hash = m.content_hash AND e.model = ? WHERE e.content_hash IS NULL",
                (self.embedder.name,),
            )
            total = int(row[0])
            progress({"phase": "embed", "done": 0, "total": total})
        while True:
            batch = await self.db.fetchall(
                "SELECT m.rowid, m.content_hash, m.title, m.text, m.meta FROM memories m "
                "LEFT JOIN embeddings e ON e.content_hash = m.content_hash AND e.model = ? "
                "WHERE m.rowid > ? AND e.content_hash IS NULL ORDER BY m.rowid LIMIT ?",
                (self.embedder.name, after, EMBED_ROUND),
            )
            if not batch:
                return done
            after = batch[-1][0]
            # Windows come last: their vectors are the mean of their messages' vectors.
            parts = {r[1]: json.loads(r[4] or "{}").get("parts") for r in batch}
            unique = {r[1]: embed_text(r[2], r[3]) for r in batch if not parts[r[1]]}
            windows = {
                r[1]: embed_text(r[2], r[3]) for r in batch if parts[r[1]] and r[1] not in unique
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

    async def _store_vectors(self, vectors: dict[str, np.ndarray]) -> int:
        """Store vectors by content hash (one write, one new generation); return how many."""
        if not vectors:
            return 0
        rows = [
            (h, self.embedder.name, int(v.shape[0]), np.asarray(v, dtype=np.float32).tobytes())
            for h, v in vectors.items()
        ]

        def store(conn: Any) -> None:
            gen = next_generation(conn)
            conn.executemany(
                "INSERT OR REPLACE INTO embeddings(content_hash, model, dim, vector, version) VALUES (?,?,?,?,?)",
                [(*r, gen) for r in rows],
            )

        await self.db.run(_write, store)
        return len(rows)

    async def _pool_windows(
        self, windows: dict[str, list[str]]
    ) -> tuple[dict[str, np.ndarray], list[str]]:
        """Window vectors as the normalised mean of their messages' stored vectors.

        Returns the pooled vectors and the windows left to encode (a message without a
        stored vector, e.g. from an index built before windows named their parts).
        """
        if not windows:
            return {}, []
        uids = sorted({u for part in windows.values() for u in part})
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(uids), 500):
            chunk = uids[i : i + 500]
            rows = await self.db.fetchall(
                "SELECT m.uid, e.vector FROM memories m JOIN embeddings e ON e.content_hash = m.content_hash AND e.model = ? "
                f"WHERE m.uid IN ({','.join('?' * len(chunk))})",
                (self.embedder.name, *chunk),
            )
            found.update((r[0], np.frombuffer(r[1], dtype=np.float32)) for r in rows)
        pooled: dict[str, np.ndarray] = {}
        left: list[str] = []
        for h, part in windows.items():
            if part and all(u in found for u in part):
                mean = np.mean([found[u] for u in part], axis=0)
                pooled[h] = mean / max(float(np.linalg.norm(mean)), 1e-12)
            else:
                left.append(h)
        return pooled, left

    async def _warm_up(self) -> None:
        """Load the persisted matrix and, when it holds vectors, the embedding model (daemon start).

        Searches through the daemon are then warm from the first; the model is loaded in a
        worker thread, so lexical searches meanwhile are not held up. Failures are only logged:
        the first query that needs a vector tries again.
        """
        try:
            await self.refresh()
            if self.matrix.vector_count:
                await self.query_vectors(["warm up"])
        except Exception as exc:  # a broken model must not end the daemon
            log.warning(
                "embedder warm-up failed; the first vector query will retry", error=repr(exc)
            )

    async def _embed_worker(self) -> None:
        await self._warm_up()
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

    # ----- transcripts -----------------------------------------------------------------------
    async def index_session(self, session_id: str) -> int:
        """Cut the not-yet-chunked messages of a session into chunk memories; return how many are new.

        Every message becomes its own chunk (exact evidence) and overlapping windows of
        `chunk_messages` give context; a window still filling up is rewritten under the same
        uid as messages arrive. Idempotent.
        """
        from daemon.memory.chunks import chunk_session

        return await chunk_session(self, session_id)
