"""The memory index's rows: `memories`, their vectors in `embeddings`, and the index's marks in kv.

Every write is one transaction that stamps its rows with the next `memory.generation` (kv), so
a reader (the search's matrix, another process) notices the change with one point lookup; a
clear starts a new `memory.epoch`. What a memory means, how it is ranked and embedded, is
`daemon.memory`; this module reads and writes the rows, the same SQL on SQLite and PostgreSQL
but for the store's size.

Two kinds of call: `MemoriesRepo`'s async methods, and plain functions taking the database
thread's connection (`Database.run`), for the work that runs there — the matrix's incremental
refresh, which must see one snapshot, and a transaction that bundles several writes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from daemon.store.transactions import begin_write

if TYPE_CHECKING:
    from daemon.store.db import Database

T = TypeVar("T")

_WRITTEN = (
    "uid, kind, text, title, tags, importance, origin, created_at, valid_from, supersedes, "
    "session_id, message_ids, source, content_hash, explicit, meta, version"
)
_UPSERT = f"""
INSERT INTO memories({_WRITTEN}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(uid) DO UPDATE SET
  kind=excluded.kind, text=excluded.text, title=excluded.title, tags=excluded.tags,
  importance=excluded.importance, origin=excluded.origin, created_at=excluded.created_at,
  valid_from=excluded.valid_from, supersedes=excluded.supersedes, session_id=excluded.session_id,
  message_ids=excluded.message_ids, source=excluded.source, content_hash=excluded.content_hash,
  explicit=excluded.explicit, meta=excluded.meta, version=excluded.version
WHERE memories.content_hash IS DISTINCT FROM excluded.content_hash
  OR memories.kind IS DISTINCT FROM excluded.kind OR memories.tags IS DISTINCT FROM excluded.tags
  OR memories.importance IS DISTINCT FROM excluded.importance
  OR memories.origin IS DISTINCT FROM excluded.origin
  OR memories.created_at IS DISTINCT FROM excluded.created_at
  OR memories.valid_from IS DISTINCT FROM excluded.valid_from
  OR memories.supersedes IS DISTINCT FROM excluded.supersedes
  OR memories.session_id IS DISTINCT FROM excluded.session_id
  OR memories.message_ids IS DISTINCT FROM excluded.message_ids
  OR memories.source IS DISTINCT FROM excluded.source
  OR memories.explicit IS DISTINCT FROM excluded.explicit
  OR memories.meta IS DISTINCT FROM excluded.meta
"""
_BUMP = (
    "INSERT INTO kv(key, value, updated_at) VALUES (?, '1', ?) ON CONFLICT(key) "
    "DO UPDATE SET value = CAST(kv.value AS INTEGER) + 1, updated_at = excluded.updated_at "
    "RETURNING value"
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, kw_only=True)
class MemoryWrite:
    """One memory as written (insert, or replace by `uid` when anything in it changed)."""

    uid: str
    kind: str
    text: str
    title: str
    tags: str  # space-separated
    importance: float
    origin: str
    created_at: str  # ISO, UTC
    valid_from: str | None
    supersedes: str | None
    session_id: str | None
    message_ids: str  # a JSON list
    source: str
    content_hash: str
    explicit: bool
    meta: str  # a JSON object


@dataclass(frozen=True)
class Supersession:
    """`old` is retired at `at`, superseded by `new`."""

    old: str
    new: str
    at: str


@dataclass(frozen=True, kw_only=True)
class MemoryRow:
    """One row of `memories` as read back."""

    rowid: int
    uid: str
    kind: str
    text: str
    title: str
    tags: str
    importance: float
    origin: str
    created_at: str
    valid_from: str | None
    retired_at: str | None
    supersedes: str | None
    superseded_by: str | None
    session_id: str | None
    message_ids: str
    source: str
    content_hash: str
    explicit: bool
    meta: str
    # How the memory has been used (migration 0014; absent from an older home read-only).
    last_used: str | None = None
    uses: int = 0
    confirmed_at: str | None = None


_FIELDS = tuple(MemoryRow.__dataclass_fields__)
# Where each field is in a result's columns, per column list (a handful: `*`, `*` and more).
_PLACES: dict[tuple[str, ...], list[tuple[str, int]]] = {}


def _memory_rows(rows: Sequence[Any]) -> list[MemoryRow]:
    """Rows of `SELECT * FROM memories` (and any further columns) as `MemoryRow`s.

    The columns are placed by name once per result (an older home read-only has no use
    columns: they take their defaults)."""
    if not rows:
        return []
    names = tuple(rows[0].keys())
    at = _PLACES.get(names)
    if at is None:
        at = _PLACES[names] = [(f, names.index(f)) for f in _FIELDS if f in names]
    out: list[MemoryRow] = []
    for r in rows:
        v = {f: r[i] for f, i in at}
        v["rowid"] = int(v["rowid"])
        v["importance"] = float(v["importance"])
        v["explicit"] = bool(v["explicit"])
        v["uses"] = int(v.get("uses") or 0)
        out.append(MemoryRow(**v))
    return out


@dataclass(frozen=True, kw_only=True)
class IndexState:
    """The index's identity, epoch and generation (a persisted matrix must match them)."""

    generation: int
    epoch: str
    index_id: str


@dataclass(frozen=True, kw_only=True)
class MatrixRows:
    """Rows written since a generation, column by column, in rowid order (the matrix's read)."""

    rowids: tuple[int, ...] = ()
    kinds: tuple[str, ...] = ()
    retired: tuple[bool, ...] = ()
    times: tuple[str, ...] = ()  # valid_from, else created_at
    explicit: tuple[bool, ...] = ()
    importance: tuple[float, ...] = ()
    hashes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.rowids)


@dataclass(frozen=True)
class MemoryText:
    """A memory's title and text, and where it stands in written order."""

    rowid: int
    text: str


@dataclass(frozen=True, kw_only=True)
class PendingMemory:
    """A memory whose content has no vector for a model yet."""

    rowid: int
    content_hash: str
    title: str
    text: str
    meta: str


@dataclass(frozen=True, kw_only=True)
class KindCount:
    kind: str
    count: int
    retired: int


@dataclass(frozen=True, kw_only=True)
class UseCount:
    """`uses` more uses of memory `uid`, the last at `last_used` (ISO, UTC)."""

    uid: str
    uses: int
    last_used: str


# ----- on the database thread ------------------------------------------------------------------
def next_generation(conn: Any) -> int:
    """Bump and return `memory.generation` (inside a transaction: `in_transaction`)."""
    return int(conn.execute(_BUMP, ("memory.generation", _now())).fetchone()[0])


def in_transaction(conn: Any, fn: Callable[..., T], *args: Any) -> T:
    """Run `fn(conn, *args)` as one write transaction: all of it, or (on any error) none."""
    begin_write(conn)
    try:
        out = fn(conn, *args)
        conn.execute("COMMIT")
        return out
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def index_state(conn: Any) -> IndexState:
    """The index's identity, epoch and generation as stored now."""
    kv = {
        str(r[0]): str(r[1])
        for r in conn.execute(
            "SELECT key, value FROM kv WHERE key IN "
            "('memory.generation', 'memory.epoch', 'memory.index_id')"
        ).fetchall()
    }
    return IndexState(
        generation=int(kv.get("memory.generation", "0")),
        epoch=kv.get("memory.epoch", "0"),
        index_id=kv.get("memory.index_id", ""),
    )


def rows_since(conn: Any, version: int) -> MatrixRows:
    """Every memory stamped after generation `version` (all of them from 0), in rowid order."""
    rows = conn.execute(
        "SELECT rowid, kind, retired_at IS NOT NULL, coalesce(valid_from, created_at), explicit, "
        "importance, content_hash FROM memories WHERE version > ? ORDER BY rowid",
        (version,),
    ).fetchall()
    if not rows:
        return MatrixRows()
    cols = list(zip(*rows, strict=True))
    return MatrixRows(
        rowids=cols[0],
        kinds=cols[1],
        retired=tuple(map(bool, cols[2])),
        times=cols[3],
        explicit=tuple(map(bool, cols[4])),
        importance=cols[5],
        hashes=cols[6],
    )


def vectors_since(conn: Any, model: str, dim: int, version: int) -> list[tuple[str, bytes]]:
    """(content hash, float32 bytes) of `model`'s vectors of `dim` stored after `version`."""
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT content_hash, vector FROM embeddings WHERE model = ? AND dim = ? AND version > ?",
            (model, dim, version),
        ).fetchall()
    ]


def vectors_of(
    conn: Any, model: str, dim: int, hashes: Sequence[str], *, per: int = 500
) -> list[tuple[str, bytes]]:
    """(content hash, float32 bytes) of `model`'s vectors of `dim` for `hashes` (those stored)."""
    out: list[tuple[str, bytes]] = []
    for i in range(0, len(hashes), per):
        part = list(hashes[i : i + per])
        out.extend(
            (r[0], r[1])
            for r in conn.execute(
                f"SELECT content_hash, vector FROM embeddings WHERE model = ? AND dim = ? "
                f"AND content_hash IN ({','.join('?' * len(part))})",
                (model, dim, *part),
            ).fetchall()
        )
    return out


def memory_count(conn: Any) -> int:
    return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])


def in_snapshot(conn: Any, fn: Callable[[Any], T]) -> tuple[T, int]:
    """`fn(conn)` and the number of memories, read in one transaction (one snapshot)."""
    conn.execute("BEGIN")
    try:
        out = fn(conn)
        count = memory_count(conn)
    finally:
        conn.execute("COMMIT")
    return out, count


def _upsert(conn: Any, rows: Sequence[MemoryWrite], supersessions: Sequence[Supersession]) -> int:
    gen = next_generation(conn)
    conn.executemany(
        _UPSERT,
        [
            (
                r.uid,
                r.kind,
                r.text,
                r.title,
                r.tags,
                float(r.importance),
                r.origin,
                r.created_at,
                r.valid_from,
                r.supersedes,
                r.session_id,
                r.message_ids,
                r.source,
                r.content_hash,
                int(r.explicit),
                r.meta,
                gen,
            )
            for r in rows
        ],
    )
    for s in supersessions:
        conn.execute(
            "UPDATE memories SET superseded_by = ?, retired_at = coalesce(retired_at, ?), version = ? "
            "WHERE uid = ? AND superseded_by IS DISTINCT FROM ?",
            (s.new, s.at, gen, s.old, s.new),
        )
    return gen


def _retire(conn: Any, uid: str, at: str, superseded_by: str | None) -> int:
    return int(
        conn.execute(
            "UPDATE memories SET retired_at = coalesce(retired_at, ?), "
            "superseded_by = coalesce(?, superseded_by), version = ? WHERE uid = ?",
            (at, superseded_by, next_generation(conn), uid),
        ).rowcount
    )


def _restore(conn: Any, uid: str) -> int:
    return int(
        conn.execute(
            "UPDATE memories SET retired_at = NULL, version = ? WHERE uid = ? AND superseded_by IS NULL",
            (next_generation(conn), uid),
        ).rowcount
    )


def _current_again(conn: Any, uid: str) -> int:
    return int(
        conn.execute(
            "UPDATE memories SET retired_at = NULL, superseded_by = NULL, version = ? WHERE uid = ?",
            (next_generation(conn), uid),
        ).rowcount
    )


def _clear(conn: Any, within: Callable[[], None]) -> None:
    within()
    conn.execute("DELETE FROM memories")
    conn.execute("DELETE FROM memory_chunked")
    conn.execute(_BUMP, ("memory.epoch", _now())).fetchone()
    next_generation(conn)


def _count_uses(conn: Any, counts: Sequence[UseCount]) -> None:
    conn.executemany(
        "UPDATE memories SET uses = uses + ?, last_used = CASE WHEN last_used IS NULL "
        "OR last_used < ? THEN ? ELSE last_used END WHERE uid = ?",
        [(c.uses, c.last_used, c.last_used, c.uid) for c in counts],
    )


def _store_vectors(
    conn: Any, model: str, vectors: Mapping[str, bytes], dims: Mapping[str, int]
) -> int:
    gen = next_generation(conn)
    conn.executemany(
        "INSERT INTO embeddings(content_hash, model, dim, vector, version) VALUES (?,?,?,?,?) "
        "ON CONFLICT(content_hash, model) DO UPDATE SET dim = excluded.dim, "
        "vector = excluded.vector, version = excluded.version",
        [(h, model, dims[h], v, gen) for h, v in vectors.items()],
    )
    return gen


class MemoriesRepo:
    """The `memories` and `embeddings` tables and the index's kv marks."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # ----- writes (each one transaction, one new generation) ------------------------------------
    async def upsert(
        self, rows: Sequence[MemoryWrite], supersessions: Sequence[Supersession] = ()
    ) -> int:
        """Insert or replace `rows` by uid (a row unchanged in every field is left as it is, its
        generation too); retire each superseded memory. Return the generation written."""
        gen: int = await self.db.run(in_transaction, _upsert, list(rows), list(supersessions))
        return gen

    async def retire(self, uid: str, *, at: str, superseded_by: str | None = None) -> bool:
        """Retire a memory (kept, never deleted; a first retirement's time stands); False when
        there is no such memory."""
        return bool(await self.db.run(in_transaction, _retire, uid, at, superseded_by))

    async def restore(self, uid: str) -> bool:
        """Make a retired memory active again; False when unknown or superseded."""
        return bool(await self.db.run(in_transaction, _restore, uid))

    async def make_current(self, uid: str) -> bool:
        """Make a memory active and superseded by nothing (a correction reverted)."""
        return bool(await self.db.run(in_transaction, _current_again, uid))

    async def clear(self, within: Callable[[], None] = lambda: None) -> None:
        """Drop every memory and chunk mark and start a new epoch (vectors are kept for reuse).
        `within` runs on the database thread in the same transaction (caches to forget)."""
        await self.db.run(in_transaction, _clear, within)

    async def count_uses(self, counts: Sequence[UseCount]) -> None:
        """Add uses to memories (one transaction); `last_used` only ever moves forward. No
        generation is drawn: a use changes nothing a search's matrix holds."""
        if counts:
            await self.db.run(in_transaction, _count_uses, list(counts))

    async def store_vectors(self, model: str, vectors: Mapping[str, bytes]) -> int:
        """Store float32 vectors by content hash for `model` (replacing any); return how many."""
        if not vectors:
            return 0
        dims = {h: len(v) // 4 for h, v in vectors.items()}
        await self.db.run(in_transaction, _store_vectors, model, dict(vectors), dims)
        return len(vectors)

    # ----- reads ---------------------------------------------------------------------------------
    async def get(self, uid: str) -> MemoryRow | None:
        row = await self.db.fetchone("SELECT * FROM memories WHERE uid = ?", (uid,))
        return _memory_rows([row])[0] if row else None

    async def recent(
        self, kinds: Collection[str], limit: int, *, include_retired: bool = False
    ) -> list[MemoryRow]:
        """The newest memories of `kinds` by valid time (then rowid), newest first."""
        if limit <= 0 or not kinds:
            return []
        retired = "" if include_retired else "AND retired_at IS NULL"
        # One indexed, LIMITed walk per kind (see migration 0003), merged here: an IN list
        # would make SQLite sort every row of those kinds.
        sql = (
            f"SELECT *, coalesce(valid_from, created_at) AS vt FROM memories WHERE kind = ? "
            f"{retired} ORDER BY coalesce(valid_from, created_at) DESC, rowid DESC LIMIT ?"
        )

        def walk(conn: Any) -> list[Any]:
            rows: list[Any] = []
            for kind in dict.fromkeys(kinds):
                rows.extend(conn.execute(sql, (kind, limit)).fetchall())
            rows.sort(key=lambda r: (r["vt"], r["rowid"]), reverse=True)
            return rows[:limit]

        return _memory_rows(await self.db.run(walk))

    async def kind_counts(self) -> list[KindCount]:
        """Per kind: how many memories, and how many of them retired."""
        rows = await self.db.fetchall(
            "SELECT kind, count(*), sum(retired_at IS NOT NULL) FROM memories GROUP BY kind ORDER BY kind"
        )
        return [KindCount(kind=str(r[0]), count=int(r[1]), retired=int(r[2] or 0)) for r in rows]

    async def with_vector(self, model: str) -> int:
        """How many memories have a vector for `model`."""
        row = await self.db.fetchone(
            "SELECT count(*) FROM memories m JOIN embeddings e "
            "ON e.content_hash = m.content_hash AND e.model = ?",
            (model,),
        )
        return int(row[0])

    async def stored_vectors(self) -> int:
        """How many vectors are kept, for every model."""
        row = await self.db.fetchone("SELECT count(*) FROM embeddings")
        return int(row[0])

    async def store_bytes(self) -> int:
        """The store's size: the SQLite file's pages, or the schema's tables with their indexes."""
        if self.db.is_postgres:
            row = await self.db.fetchone(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
            )
            return int(row[0])
        pages = await self.db.fetchone("PRAGMA page_count")
        size = await self.db.fetchone("PRAGMA page_size")
        return int(pages[0]) * int(size[0])

    async def pending_count(self, model: str) -> int:
        """How many distinct contents have no vector for `model`."""
        row = await self.db.fetchone(
            "SELECT count(DISTINCT m.content_hash) FROM memories m LEFT JOIN embeddings e "
            "ON e.content_hash = m.content_hash AND e.model = ? WHERE e.content_hash IS NULL",
            (model,),
        )
        return int(row[0])

    async def texts_after(self, rowid: int, limit: int) -> list[MemoryText]:
        """Up to `limit` memories written after `rowid` (retired ones too), oldest first, each
        as its title and text (the store's vocabulary, `daemon.memory.related`)."""
        rows = await self.db.fetchall(
            "SELECT rowid, title, text FROM memories WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (rowid, limit),
        )
        return [MemoryText(rowid=int(r[0]), text=f"{r[1]}\n{r[2]}".strip()) for r in rows]

    async def pending(self, model: str, *, after: int, limit: int) -> list[PendingMemory]:
        """Up to `limit` memories past rowid `after` whose content has no vector for `model`,
        in rowid order."""
        rows = await self.db.fetchall(
            "SELECT m.rowid, m.content_hash, m.title, m.text, m.meta FROM memories m "
            "LEFT JOIN embeddings e ON e.content_hash = m.content_hash AND e.model = ? "
            "WHERE m.rowid > ? AND e.content_hash IS NULL ORDER BY m.rowid LIMIT ?",
            (model, after, limit),
        )
        return [
            PendingMemory(
                rowid=int(r[0]),
                content_hash=str(r[1]),
                title=str(r[2]),
                text=str(r[3]),
                meta=str(r[4] or "{}"),
            )
            for r in rows
        ]

    async def hashes(self, uids: Sequence[str]) -> dict[str, str]:
        """uid → content hash of the memories `uids` that exist."""
        rows = await self.db.fetch_in(
            "SELECT uid, content_hash FROM memories WHERE uid IN ({})", list(uids)
        )
        return {str(r[0]): str(r[1]) for r in rows}

    async def vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        """content hash → `model`'s stored float32 vector, for those of `hashes` it has."""
        # Looked up by the unique key alone, never joined with `memories`: joined, SQLite without
        # ANALYZE walked every vector of the model for each round (quadratic over a backlog).
        rows = await self.db.fetch_in(
            "SELECT content_hash, vector FROM embeddings WHERE model = ? AND content_hash IN ({})",
            list(hashes),
            (model,),
        )
        return {str(r[0]): bytes(r[1]) for r in rows}

    # ----- month folds (`memory_folds`, written by `daemon.store.folds`) ---------------------------
    async def months_of(self, uids: Collection[str]) -> dict[str, str]:
        """The month memory each of `uids` was folded into (those not folded are left out)."""
        rows = await self.db.fetch_in(
            "SELECT source_uid, month_uid FROM memory_folds WHERE source_uid IN ({})", list(uids)
        )
        return {str(r[0]): str(r[1]) for r in rows}

    async def month_sources(self, month_uid: str) -> list[MemoryRow]:
        """The active memories folded into `month_uid`, newest first (by creation, then uid)."""
        rows = await self.db.fetchall(
            "SELECT m.* FROM memory_folds f JOIN memories m ON m.uid = f.source_uid "
            "WHERE f.month_uid = ? AND m.retired_at IS NULL ORDER BY m.created_at DESC, m.uid",
            (month_uid,),
        )
        return _memory_rows(rows)

    async def unfolded_summaries(self, limit: int) -> list[MemoryRow]:
        """Active session summaries folded into no month yet, newest first by valid time."""
        rows = await self.db.fetchall(
            "SELECT m.* FROM memories m WHERE m.kind = 'summary' AND m.retired_at IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM memory_folds f WHERE f.source_uid = m.uid) "
            "ORDER BY coalesce(m.valid_from, m.created_at) DESC, m.rowid DESC LIMIT ?",
            (limit,),
        )
        return _memory_rows(rows)

    async def state(self) -> IndexState:
        found: IndexState = await self.db.run(index_state)
        return found
