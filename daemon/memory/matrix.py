"""The search matrix: one float32 row per memory, refreshed from SQLite incrementally, persisted.

Brute-force cosine over a contiguous float32 matrix beats sqlite-vec's exact KNN by an order
of magnitude at 100k rows, so the database keeps the vectors (the truth) and this class keeps
a copy shaped for numpy, plus the per-row attributes search filters on (kind, retired, time).
`refresh` runs on the database thread and reads only rows stamped after the last generation.

The matrix is also saved beside the database (`save`/`load`): one file per embedding model,
a JSON header then the arrays, memory-mapped copy-on-write when loaded, so a command-line
search starts from the last saved generation and reads only what changed since. The header
records the database's index identity, epoch and generation; a file that does not match the
index (another database, a reindex since, a generation the database never reached, a row
count that disagrees, a torn file) is set aside and the matrix rebuilt from the database.

Size: the matrix, its incremental refresh and its file format change together (a header
field read wrongly is a stale search), so they stay in one module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.store.postgres import DEFAULT_BUILD_MEMORY, PgConnection

if TYPE_CHECKING:
    from daemon.memory.lexical import RowFilter

log = get_logger("memory.matrix")

KIND_CODES = {"fact": 0, "profile": 1, "summary": 2, "chunk": 3, "month": 4, "journal": 5}

# Up to this many query vectors are scored one matrix-vector product each (see `similarities`).
GEMV_QUERIES = 3

# The sign-bit sketch (`ranked`): from this many vectors on, a matrix (`sketch` on) picks
# candidates by Hamming distance of the vectors' sign bits (48 bytes a row for 384-d, against
# 1,536 for the floats) and scores only those exactly. At least SKETCH_MIN_CANDIDATES, or
# SKETCH_OVERSAMPLE times what is asked for, are scored.
SKETCH_MIN_ROWS = 32_768
SKETCH_MIN_CANDIDATES = 2_048
SKETCH_OVERSAMPLE = 40
# ... but no more than this many (a pool of 200 asks for 8,000: 12 MB of floats to gather).
SKETCH_MAX_CANDIDATES = 4_096
_POPCOUNT = hasattr(np, "bitwise_count")  # numpy >= 2.0

MAGIC = b"RVMATRIX"
FORMAT = 1
ALIGN = 64
# content_hash is 16 bytes of blake2b in hex.
HASH_DTYPE = "S32"
_ARRAYS = (
    "_rowids",
    "_kind",
    "_retired",
    "_ts",
    "_explicit",
    "_importance",
    "_has_vec",
    "_hash",
    "_vecs",
)


def sign_bits(vecs: np.ndarray) -> np.ndarray:
    """Each row's signs packed into 64-bit words (the sketch `VectorMatrix.ranked` filters with)."""
    packed = np.packbits(np.asarray(vecs) > 0, axis=1)
    pad = (-packed.shape[1]) % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


class MatrixSnapshot:
    """A copy of a matrix's arrays and header, to be written to a file."""

    def __init__(self, *, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.header = header
        self.arrays = arrays

    def write(self, path: Path) -> None:
        """Write atomically: a temporary file beside `path`, fsynced, renamed over it (blocking)."""
        layout: dict[str, Any] = {}
        offset = 0
        for name, arr in self.arrays.items():
            layout[name] = {"offset": offset, "dtype": arr.dtype.str, "shape": list(arr.shape)}
            offset += -(-arr.nbytes // ALIGN) * ALIGN
        header = json.dumps({**self.header, "arrays": layout}).encode()
        start = -(-(len(MAGIC) + 8 + len(header)) // ALIGN) * ALIGN
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(MAGIC + len(header).to_bytes(8, "little") + header)
                for name, arr in self.arrays.items():
                    fh.seek(start + layout[name]["offset"])
                    fh.write(np.ascontiguousarray(arr).tobytes())
                fh.truncate(start + offset)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


class StaleMatrix(ReverieError):
    """A persisted matrix does not describe this index; the message says why."""


def _epoch_seconds(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def matrix_path(db_file: Path, model: str, dim: int) -> Path:
    """Where the matrix for `model` is persisted: beside the database, one file per model."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._") or "model"
    return db_file.with_name(f"{db_file.name}.matrix-{slug}-{dim}")


def index_state(conn: Any) -> dict[str, str]:
    """The index's identity, epoch and generation, as a persisted matrix must match them."""
    kv = dict(
        conn.execute(
            "SELECT key, value FROM kv WHERE key IN ('memory.generation', 'memory.epoch', 'memory.index_id')"
        ).fetchall()
    )
    return {
        "generation": kv.get("memory.generation", "0"),
        "epoch": kv.get("memory.epoch", "0"),
        "index_id": kv.get("memory.index_id", ""),
    }


class VectorMatrix:
    """Rows of (vector, kind, retired, time, explicit, importance) addressed by memory rowid.

    Rows are kept in rowid order (SQLite hands out increasing rowids and only `clear`, which
    starts a new epoch, deletes), so a rowid is found by binary search.
    """

    def __init__(self, *, model: str, dim: int) -> None:
        self.model = model
        self.dim = dim
        self.saved_generation = -1
        self.rows_since_save = 0
        # Every process sketches the same way, so the daemon and a one-shot command return the
        # same hits; the daemon builds the sketch at start, a command on its first vector query.
        self.sketch = True
        self.sketch_min_rows = SKETCH_MIN_ROWS
        self._reset()

    def _reset(self, cap: int = 1024) -> None:
        self.generation = -1
        self.epoch: str | None = None
        self._n = 0
        self._rowids = np.zeros(cap, dtype=np.int64)
        self._kind = np.full(cap, 9, dtype=np.int8)
        self._retired = np.zeros(cap, dtype=bool)
        self._ts = np.zeros(cap, dtype=np.float64)
        self._explicit = np.zeros(cap, dtype=bool)
        self._importance = np.zeros(cap, dtype=np.float32)
        self._has_vec = np.zeros(cap, dtype=bool)
        self._hash = np.zeros(cap, dtype=HASH_DTYPE)
        self._vecs = np.zeros((cap, self.dim), dtype=np.float32)
        # Sign bits of `_vecs`, one row of 64-bit words per 64 dimensions (each a contiguous
        # run over all rows); built by `prepare_sketch`, kept in step by `_place` and `_grow`.
        self._bits: np.ndarray | None = None
        # Rows per kind code, keyed by (generation, rows): `kind_share`.
        self._kind_counts: tuple[tuple[int, int], np.ndarray] | None = None

    def __len__(self) -> int:
        return self._n

    @property
    def vector_count(self) -> int:
        """How many loaded rows have a vector (0: nothing to compare a query vector with)."""
        return int(np.count_nonzero(self._has_vec[: self._n]))

    @property
    def nbytes(self) -> int:
        n = self._n
        return int(n * (self.dim * 4 + 8 + 8 + 4 + 4 + 32))

    def _grow(self, need: int) -> None:
        cap = len(self._rowids)
        if need <= cap:
            return
        new = max(need, cap * 2, 1024)
        for name in _ARRAYS:
            old = getattr(self, name)
            arr = np.zeros((new, *old.shape[1:]), dtype=old.dtype)
            if name == "_kind":
                arr[:] = 9
            arr[: self._n] = old[: self._n]
            setattr(self, name, arr)
        if self._bits is not None:
            bits = np.zeros((self._bits.shape[0], new), dtype=np.uint64)
            bits[:, : self._n] = self._bits[:, : self._n]
            self._bits = bits

    def _find(self, rowids: np.ndarray) -> np.ndarray:
        """Return the position of each rowid, -1 where it is not loaded."""
        n = self._n
        if n == 0:
            return np.full(len(rowids), -1, dtype=np.int64)
        keys = self._rowids[:n]
        idx = np.searchsorted(keys, rowids)
        hit = idx < n
        hit[hit] = keys[idx[hit]] == rowids[hit]
        return np.where(hit, idx, -1)

    def refresh(self, conn: Any) -> bool:
        """Load rows and vectors written since the last refresh; return True when anything changed.

        Runs synchronously on the database thread. The generation is read first, so a write
        that lands mid-refresh is simply read again next time.
        """
        state = index_state(conn)
        gen, epoch = int(state["generation"]), state["epoch"]
        if gen == self.generation and epoch == self.epoch:
            return False
        if epoch != self.epoch:
            self._reset(cap=len(self._rowids))
        seen = max(self.generation, 0)
        rows = conn.execute(
            "SELECT rowid, kind, retired_at IS NOT NULL, coalesce(valid_from, created_at), explicit, importance, "
            "content_hash FROM memories WHERE version > ? ORDER BY rowid",
            (seen,),
        ).fetchall()
        changed: np.ndarray = np.zeros(0, dtype=HASH_DTYPE)
        if rows:
            cols = list(zip(*rows, strict=True))
            rid = np.array(cols[0], dtype=np.int64)
            pos = self._find(rid)
            new = pos < 0
            if new.any():
                fresh = rid[new]
                if self._n and fresh[0] <= self._rowids[self._n - 1]:
                    # A rowid below the last one loaded (never seen in practice): start over.
                    self._reset(cap=len(self._rowids))
                    self.generation = -1
                    return self.refresh(conn)
                start = self._n
                self._grow(start + len(fresh))
                pos[new] = np.arange(start, start + len(fresh))
                self._rowids[start : start + len(fresh)] = fresh
                self._n += len(fresh)
            hashes = np.array(cols[6], dtype=HASH_DTYPE)
            moved = self._hash[pos] != hashes
            self._hash[pos] = hashes
            self._has_vec[pos[moved]] = False
            changed = hashes[moved]
            self._kind[pos] = [KIND_CODES.get(k, 8) for k in cols[1]]
            self._retired[pos] = np.array(cols[2], dtype=bool)
            self._ts[pos] = [_epoch_seconds(t) for t in cols[3]]
            self._explicit[pos] = np.array(cols[4], dtype=bool)
            self._importance[pos] = np.array(cols[5], dtype=np.float32)
            self.rows_since_save += len(rows)
        if self.dim > 0:
            fresh_vecs = conn.execute(
                "SELECT content_hash, vector FROM embeddings WHERE model = ? AND dim = ? AND version > ?",
                (self.model, self.dim, seen),
            ).fetchall()
            placed = self._place(fresh_vecs)
            self.rows_since_save += len(fresh_vecs)
            pending = [h.decode() for h in np.setdiff1d(changed, placed)]
            for i in range(0, len(pending), 500):
                part = pending[i : i + 500]
                self._place(
                    conn.execute(
                        f"SELECT content_hash, vector FROM embeddings WHERE model = ? AND dim = ? "
                        f"AND content_hash IN ({','.join('?' * len(part))})",
                        (self.model, self.dim, *part),
                    ).fetchall()
                )
        self.generation = gen
        self.epoch = epoch
        return True

    def _place(self, found: list[tuple[str, bytes]]) -> np.ndarray:
        """Put vectors on every row holding their content hash; return the hashes placed."""
        good = [(h, b) for h, b in found if len(b) == 4 * self.dim]
        if not good or self._n == 0:
            return np.zeros(0, dtype=HASH_DTYPE)
        keys = np.array([h for h, _ in good], dtype=HASH_DTYPE)
        vecs = np.frombuffer(b"".join(b for _, b in good), dtype=np.float32).reshape(
            len(good), self.dim
        )
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        mine = self._hash[: self._n]
        idx = np.searchsorted(keys, mine)
        hit = idx < len(keys)
        hit[hit] = keys[idx[hit]] == mine[hit]
        rows = np.nonzero(hit)[0]
        self._vecs[rows] = vecs[order[idx[rows]]]
        self._has_vec[rows] = True
        if self._bits is not None:
            self._bits[:, rows] = sign_bits(self._vecs[rows]).T
        return keys

    # ----- persistence -----------------------------------------------------------------------
    def snapshot(self, *, index_id: str) -> MatrixSnapshot:
        """Copy what `save` writes (call with refreshes held off; writing can then run anywhere)."""
        n = self._n
        snap = MatrixSnapshot(
            header={
                "format": FORMAT,
                "model": self.model,
                "dim": self.dim,
                "rows": n,
                "generation": self.generation,
                "epoch": self.epoch,
                "index_id": index_id,
            },
            arrays={name: np.array(getattr(self, name)[:n]) for name in _ARRAYS},
        )
        self.saved_generation = self.generation
        self.rows_since_save = 0
        return snap

    def save(self, path: Path, *, index_id: str) -> None:
        """Write the matrix to `path` atomically (blocking)."""
        self.snapshot(index_id=index_id).write(path)

    def load(self, path: Path, state: dict[str, str]) -> None:
        """Take the matrix from `path` (memory-mapped, copy-on-write) if it matches the index `state`.

        Raises `StaleMatrix` saying why it does not; the matrix is then left empty, to be
        rebuilt by `refresh`. A file from a later generation of this index is stale too.
        """
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(MAGIC) + 8)
                if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
                    raise StaleMatrix("not a matrix file")
                size = int.from_bytes(head[len(MAGIC) :], "little")
                if size > 1 << 20:
                    raise StaleMatrix("header too large")
                header = json.loads(fh.read(size))
                total = os.fstat(fh.fileno()).st_size
        except FileNotFoundError:
            raise StaleMatrix("no persisted matrix") from None
        except (OSError, ValueError) as exc:
            raise StaleMatrix(f"unreadable ({exc})") from None
        if header.get("format") != FORMAT:
            raise StaleMatrix(f"format {header.get('format')} (this build reads {FORMAT})")
        if header.get("model") != self.model or header.get("dim") != self.dim:
            raise StaleMatrix(
                f"made by {header.get('model')}/{header.get('dim')}, not {self.model}/{self.dim}"
            )
        if not state.get("index_id") or header.get("index_id") != state["index_id"]:
            raise StaleMatrix("made for another database")
        if header.get("epoch") != state["epoch"]:
            raise StaleMatrix(
                f"epoch {header.get('epoch')}, the index is at epoch {state['epoch']} (reindexed since)"
            )
        gen = int(header.get("generation", -1))
        if gen < 0 or gen > int(state["generation"]):
            raise StaleMatrix(f"generation {gen} is ahead of the index's {state['generation']}")
        start = -(-(len(MAGIC) + 8 + size) // ALIGN) * ALIGN
        n = int(header["rows"])
        loaded: dict[str, np.ndarray] = {}
        try:
            for name in _ARRAYS:
                spec = header["arrays"][name]
                shape = tuple(int(x) for x in spec["shape"])
                dtype = np.dtype(spec["dtype"])
                if shape[0] != n or (name == "_vecs" and shape != (n, self.dim)):
                    raise StaleMatrix(f"array {name} has shape {shape} for {n} rows")
                nbytes = int(np.prod(shape)) * dtype.itemsize
                if start + int(spec["offset"]) + nbytes > total:
                    raise StaleMatrix("truncated")
                if nbytes == 0:
                    loaded[name] = np.zeros(shape, dtype=dtype)
                else:
                    loaded[name] = np.memmap(
                        path, dtype=dtype, mode="c", offset=start + int(spec["offset"]), shape=shape
                    )
        except (KeyError, TypeError, ValueError) as exc:
            raise StaleMatrix(f"bad layout ({exc})") from None
        if n > 1 and not bool(np.all(loaded["_rowids"][1:] > loaded["_rowids"][:-1])):
            raise StaleMatrix("rows out of order")
        for name, arr in loaded.items():
            setattr(self, name, arr)
        self._bits = None
        self._n = n
        self.generation = gen
        self.epoch = state["epoch"]
        self.saved_generation = gen
        self.rows_since_save = 0

    def clear(self) -> None:
        """Forget everything loaded (the next refresh rebuilds from the database)."""
        self._reset()

    def mask(
        self,
        *,
        kinds: Collection[str] | None,
        include_retired: bool,
        after: datetime | None,
        before: datetime | None,
        need_vector: bool,
    ) -> np.ndarray:
        n = self._n
        mask = self._has_vec[:n].copy() if need_vector else np.ones(n, dtype=bool)
        return self._keep(mask, slice(0, n), kinds, include_retired, after, before)

    def _keep(
        self,
        keep: np.ndarray,
        at: slice | np.ndarray,
        kinds: Collection[str] | None,
        include_retired: bool,
        after: datetime | None,
        before: datetime | None,
    ) -> np.ndarray:
        """Narrow `keep` (one flag per row position in `at`) to the rows passing the filters."""
        if kinds:
            keep &= np.isin(self._kind[at], [KIND_CODES.get(k, 8) for k in kinds])
        if not include_retired:
            keep &= ~self._retired[at]
        if after is not None:
            keep &= self._ts[at] >= after.timestamp()
        if before is not None:
            keep &= self._ts[at] < before.timestamp()
        return keep

    def similarities(self, queries: np.ndarray) -> np.ndarray:
        """Return the (rows, queries) cosine matrix: one pass over the vectors for all queries."""
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q.reshape(1, -1)
        if q.shape[1] != self.dim:
            raise ValueError(f"query vector has dim {q.shape[1]}, the index holds dim {self.dim}")
        vecs = self._vecs[: self._n]
        if q.shape[0] <= GEMV_QUERIES:
            # BLAS matrix-vector products stream the matrix at full memory bandwidth; a
            # matrix-matrix product with 2-3 columns is 3-4x slower per pass here.
            return np.stack([vecs @ row for row in q], axis=1)
        return vecs @ q.T

    @property
    def sketching(self) -> bool:
        """Say whether `ranked` pre-selects by sign bits (sketch on, enough vectors, numpy 2)."""
        return self.sketch and _POPCOUNT and self.dim > 0 and self._n >= self.sketch_min_rows

    @property
    def sketch_ready(self) -> bool:
        return self._bits is not None

    def prepare_sketch(self) -> None:
        """Build the sign-bit sketch now (the daemon does at start, off the event loop)."""
        if self.sketching and self._bits is None:
            bits = np.zeros((-(-self.dim // 64), len(self._rowids)), dtype=np.uint64)
            for i in range(0, self._n, 65_536):
                end = min(i + 65_536, self._n)
                bits[:, i:end] = sign_bits(self._vecs[i:end]).T
            self._bits = bits

    def ranked(
        self, queries: np.ndarray, masks: list[np.ndarray], limit: int
    ) -> list[list[list[int]]]:
        """Per mask, per query: up to `limit` rowids, most similar first.

        Exact (one pass over every float) unless `sketching`: then each query's Hamming
        distance to every row's sign bits (a 32nd of the bytes) picks the candidates, and
        only those are scored exactly; a mask that leaves few rows is scored exactly. On
        all-MiniLM-L6-v2 vectors the result matched the exact top 10 in
        `bench.matrix_sketch`'s measurement (see the README).
        """
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q.reshape(1, -1)
        if not self.sketching:
            sims = self.similarities(q)
            return [
                [[r for r, _ in self.top(sims[:, qi], mask, limit)] for qi in range(q.shape[0])]
                for mask in masks
            ]
        self.prepare_sketch()
        assert self._bits is not None
        n = self._n
        bits, vecs = self._bits[:, :n], self._vecs[:n]
        want = max(SKETCH_MIN_CANDIDATES, min(SKETCH_MAX_CANDIDATES, SKETCH_OVERSAMPLE * limit))
        far = np.uint16(64 * bits.shape[0] + 1)
        out: list[list[list[int]]] = [[] for _ in masks]
        word = np.empty(n, dtype=np.uint64)
        ones = np.empty(n, dtype=np.uint8)
        for row in q:
            # Hamming distance, one contiguous word column at a time (no (n, words) temporaries).
            dist = np.zeros(n, dtype=np.uint16)
            for w, qw in enumerate(sign_bits(row.reshape(1, -1))[0]):
                np.bitwise_xor(bits[w], qw, out=word)
                np.bitwise_count(word, out=ones)
                np.add(dist, ones, out=dist)
            for mi, mask in enumerate(masks):
                allowed = int(mask.sum())
                if allowed <= 2 * want:
                    idx = np.flatnonzero(mask)
                else:
                    idx = np.argpartition(np.where(mask, dist, far), want - 1)[:want]
                take = min(limit, len(idx))
                if take == 0:
                    out[mi].append([])
                    continue
                sims = vecs[idx] @ row
                best = (
                    np.arange(take) if take == len(idx) else np.argpartition(-sims, take - 1)[:take]
                )
                best = best[np.argsort(-sims[best], kind="stable")]
                out[mi].append([int(r) for r in self._rowids[idx[best]]])
        return out

    def top(self, sims: np.ndarray, mask: np.ndarray, limit: int) -> list[tuple[int, float]]:
        """Return up to `limit` (rowid, similarity) pairs, best first, among rows where `mask` holds."""
        n = self._n
        if n == 0 or limit <= 0:
            return []
        allowed = int(mask.sum())
        take = min(limit, allowed)
        if take == 0:
            return []
        sims = np.where(mask, sims, -np.inf)
        idx = np.argpartition(-sims, take - 1)[:take] if take < n else np.arange(n)
        idx = idx[np.argsort(-sims[idx], kind="stable")]
        return [(int(self._rowids[i]), float(sims[i])) for i in idx if np.isfinite(sims[i])][:take]

    def nearest(
        self,
        query: np.ndarray,
        limit: int,
        *,
        kinds: Collection[str] | None = None,
        include_retired: bool = False,
        after: datetime | None = None,
        before: datetime | None = None,
    ) -> list[tuple[int, float]]:
        """Return up to `limit` (rowid, cosine) pairs, best first, among rows passing the filters."""
        if self._n == 0 or self.dim == 0 or limit <= 0:
            return []
        sims = self.similarities(np.asarray(query, dtype=np.float32).reshape(1, -1))[:, 0]
        mask = self.mask(
            kinds=kinds,
            include_retired=include_retired,
            after=after,
            before=before,
            need_vector=True,
        )
        return self.top(sims, mask, limit)

    def allowed(self, rowids: list[int], where: RowFilter) -> list[bool]:
        """Say, per rowid, whether it is loaded and passes `where` (kinds, retired, time)."""
        if not rowids:
            return []
        pos = self._find(np.asarray(rowids, dtype=np.int64))
        ok = pos >= 0
        at = pos[ok]
        ok[ok] = self._keep(
            np.ones(len(at), dtype=bool),
            at,
            where.kinds,
            where.include_retired,
            where.after,
            where.before,
        )
        return ok.tolist()

    def kind_share(self, kinds: Collection[str]) -> float:
        """The share of loaded rows whose kind is one of `kinds` (counts cached per generation)."""
        n = self._n
        if n == 0:
            return 1.0
        key = (self.generation, n)
        if self._kind_counts is None or self._kind_counts[0] != key:
            self._kind_counts = (key, np.bincount(self._kind[:n].astype(np.int64), minlength=10))
        counts = self._kind_counts[1]
        codes = {KIND_CODES.get(k, 8) for k in kinds}
        return float(sum(int(counts[c]) for c in codes)) / n

    def vectors(self, rowids: Sequence[int]) -> dict[int, np.ndarray]:
        """The loaded vectors of `rowids` (rows without one, or not loaded yet, are left out)."""
        if not rowids or self._n == 0:
            return {}
        pos = self._find(np.asarray(rowids, dtype=np.int64))
        return {
            int(r): self._vecs[p]
            for r, p in zip(rowids, pos.tolist(), strict=True)
            if p >= 0 and self._has_vec[p]
        }

    def attributes(self, rowids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return (time, explicit, importance) arrays for rowids (zeros for rows not loaded yet)."""
        created = np.zeros(len(rowids), dtype=np.float64)
        explicit = np.zeros(len(rowids), dtype=bool)
        importance = np.full(len(rowids), 0.5, dtype=np.float32)
        if rowids:
            pos = self._find(np.asarray(rowids, dtype=np.int64))
            ok = pos >= 0
            created[ok] = self._ts[pos[ok]]
            explicit[ok] = self._explicit[pos[ok]]
            importance[ok] = self._importance[pos[ok]]
        return created, explicit, importance


# HNSW on PostgreSQL: candidates asked of the index per query (at least), its search breadth,
# and how its graph is built. On MiniLM-shaped vectors (bench.pg_bench) a graph of m 16 kept
# 0.94 of the exact top 10 at 100k but 0.82 at 300k and 0.59 at 1M; m 32 with ef_construction
# 200 keeps 0.94 at 300k for 6 ms a query (p50) at about twice the build time, and at 1M 0.80
# searched 400 wide (8 ms), 0.87 searched 1,000 wide (22 ms). So the search widens as the store
# grows: 400 up to 200k vectors, then with the size to pgvector's most, 1,000, at 1M.
HNSW_MIN_CANDIDATES = 100
HNSW_OVERSAMPLE = 4
HNSW_EF_SEARCH = 400
HNSW_EF_SEARCH_MAX = 1000
HNSW_WIDEN_FROM = 200_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
# An embedding backlog at least this large, and at least half the vectors already indexed, is
# embedded with the index set aside and built again after: pgvector builds a graph over rows
# already there several times faster than it links them in one by one (100k hashing vectors:
# 590 s kept up row by row).
HNSW_SET_ASIDE_MIN = 20_000
# How often a second build of the same index looks whether the first is done.
HNSW_LOCK_POLL_S = 0.5


def hnsw_ef_search(vectors: int) -> int:
    """How wide the index is searched (`hnsw.ef_search`) over `vectors` rows, in steps of 50."""
    if vectors <= HNSW_WIDEN_FROM:
        return HNSW_EF_SEARCH
    # 400 × (n / 200k)^0.57: 1,000 at 1M.
    ef = HNSW_EF_SEARCH * (vectors / HNSW_WIDEN_FROM) ** 0.57
    return int(min(HNSW_EF_SEARCH_MAX, round(ef / 50) * 50))


def hnsw_index_name(dim: int) -> str:
    """The name of the index of one dimension, built as this version builds it."""
    return f"embeddings_hnsw_{int(dim)}_m{HNSW_M}_ef{HNSW_EF_CONSTRUCTION}"


def hnsw_index_sql(dim: int, *, table: str = "embeddings", name: str | None = None) -> str:
    """`CREATE INDEX CONCURRENTLY` of the HNSW index over `table`'s vectors of one dimension."""
    d = int(dim)
    return (
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name or hnsw_index_name(d)} ON {table} "
        f"USING hnsw ((vector::vector({d})) vector_ip_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE dim = {d}"
    )


def build_hnsw_index(raw: Any, dim: int, build_memory: str) -> list[str]:
    """Make the index of `dim` on the connection's schema, valid; drop older builds of it.

    Built `CONCURRENTLY`, so the embedding writes go on meanwhile; with `maintenance_work_mem`
    at `build_memory` for this statement, so the graph is built in memory while it fits. A
    build cut short leaves an invalid index: it is dropped and built again. An index of the
    same dimension built with other parameters (an earlier version's) is dropped once this one
    stands. Returns what was done, for the log.
    """
    d = int(dim)
    with hnsw_index_lock(raw, d):
        return _build_hnsw_index(raw, d, build_memory)


@contextlib.contextmanager
def hnsw_index_lock(raw: Any, dim: int) -> Iterator[None]:
    """Hold the schema's index of `dim` alone: one build or drop at a time (the daemon's start,
    a reindex, another daemon on the same namespace); the second waits, then finds the index
    standing. Without it, an index another session is building looks like one cut short
    (neither is valid yet), and dropping it fails."""
    key = f"reverie.hnsw.{int(dim)}"
    # Tried, not waited for in the server: a session waiting inside a statement would be a
    # transaction the holder's `CREATE INDEX CONCURRENTLY` waits on in turn (a deadlock).
    while not raw.execute(
        "SELECT pg_try_advisory_lock(hashtext(current_schema() || %s))", (key,)
    ).fetchone()[0]:
        time.sleep(HNSW_LOCK_POLL_S)
    try:
        yield
    finally:
        raw.execute("SELECT pg_advisory_unlock(hashtext(current_schema() || %s))", (key,))


def _build_hnsw_index(raw: Any, d: int, build_memory: str) -> list[str]:
    name = hnsw_index_name(d)
    found = {
        str(r[0]): bool(r[1])
        for r in raw.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE n.nspname = current_schema() AND t.relname = 'embeddings'"
        ).fetchall()
    }
    done: list[str] = []
    if found.get(name) is False:
        raw.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        done.append(f"dropped {name} (a build cut short)")
    if not found.get(name):
        raw.execute(f"SET maintenance_work_mem = '{build_memory}'")
        try:
            raw.execute(hnsw_index_sql(d, name=name))
        finally:
            raw.execute("RESET maintenance_work_mem")
        done.append(f"built {name}")
    older = f"embeddings_hnsw_{d}"
    for other in sorted(found):
        if other != name and (other == older or other.startswith(older + "_")):
            raw.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {other}")
            done.append(f"dropped {other} (an earlier build)")
    return done


class PgVectorMatrix(VectorMatrix):
    """The matrix on PostgreSQL: pgvector's HNSW index picks each query's nearest memories.

    The rows' attributes (kind, retired, time …) and vectors are still loaded as on SQLite:
    filters, fusion and `similar` read them. `ranked` asks the server's HNSW index for the
    nearest embeddings of the model's dimension (one partial index per dimension, made by
    `prepare_index`), keeps those whose memory passes the window's mask, and scores exactly in
    numpy only when the approximate candidates leave a window short (a narrow filter) — or
    while the index is not there yet (being built), as the SQLite matrix does. It runs in a
    worker thread on a connection of its own, beside the database thread.
    """

    def __init__(
        self,
        *,
        model: str,
        dim: int,
        url: str,
        schema: str,
        build_memory: str = DEFAULT_BUILD_MEMORY,
    ) -> None:
        super().__init__(model=model, dim=dim)
        self.url = url
        self.schema = schema
        self.build_memory = build_memory
        self.hnsw_queries = 0
        # Whether the index of this dimension stands (None: not looked yet).
        self.index_ready: bool | None = None
        self._conn: Any = None
        self._lock = threading.Lock()
        # The `hnsw.ef_search` set on which server session (a reconnect opens a new one).
        self._ef_set: tuple[Any, int] | None = None
        self.set_aside_min = HNSW_SET_ASIDE_MIN

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = PgConnection.connect(self.url, self.schema)
        return self._conn

    @contextlib.contextmanager
    def _own_connection(self) -> Iterator[Any]:
        """A connection of its own for a build or a drop (the search's stays free), closed after."""
        conn = PgConnection.connect(self.url, self.schema)
        try:
            yield conn.raw
        finally:
            conn.close()

    def prepare_index(self) -> None:
        """Make sure the HNSW index of this dimension stands (the daemon does at start, off the loop).

        Made on an empty store it costs nothing and is kept up as rows arrive; over a large one
        (moved in, the embedder changed, or an earlier version's build) it is built here, on a
        connection of its own: searches meanwhile are exact in numpy, writes go on.
        """
        with self._own_connection() as raw:
            self._build(raw)

    def _build(self, raw: Any) -> None:
        done = build_hnsw_index(raw, self.dim, self.build_memory)
        if done:
            log.info("vector index", done="; ".join(done), schema=self.schema)
        self.index_ready = True

    def worth_setting_aside(self, pending: int) -> bool:
        """Whether `pending` new vectors go in faster with the index built again after."""
        return pending >= self.set_aside_min and 2 * pending >= self.vector_count

    def set_aside(self) -> None:
        """Drop the index of this dimension (`prepare_index` builds it again); searches go exact."""
        self.index_ready = False
        with self._own_connection() as raw, hnsw_index_lock(raw, self.dim):
            raw.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {hnsw_index_name(self.dim)}")

    def rebuild(self) -> None:
        """After a backlog went in with the index set aside: the tables' statistics brought up
        to date (a plan made on stale ones joins the index's neighbours by scanning every
        memory), then the index built again."""
        with self._own_connection() as raw:
            raw.execute("ANALYZE embeddings, memories")
            self._build(raw)

    def _index_stands(self) -> bool:
        """Whether the index is there to ask (looked up once, then known)."""
        if self.index_ready is None:
            with self._lock:
                conn = self._connection()
                row = conn._resilient(
                    lambda: conn.raw.execute(
                        "SELECT i.indisvalid FROM pg_index i "
                        "JOIN pg_class c ON c.oid = i.indexrelid "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = current_schema() AND c.relname = %s",
                        (hnsw_index_name(self.dim),),
                    ).fetchone()
                )
            if row is not None and row[0]:
                self.index_ready = True
            else:
                return False  # looked again next time: the daemon may be building it
        return bool(self.index_ready)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def nearest_rowids(self, query: np.ndarray, want: int) -> list[int]:
        """The rowids of memories whose embedding is among the HNSW index's `want` nearest."""
        d = int(self.dim)
        sql = (
            "SELECT m.rowid FROM (SELECT content_hash, "
            f"vector::vector({d}) <#> %s::vector({d}) AS dist FROM embeddings "
            f"WHERE dim = {d} AND model = %s ORDER BY dist LIMIT {int(want)}) e "
            "JOIN memories m ON m.content_hash = e.content_hash ORDER BY e.dist, m.rowid"
        )
        vec = np.asarray(query, dtype="<f4").tobytes()
        ef = hnsw_ef_search(self.vector_count)
        with self._lock:
            conn = self._connection()
            self.hnsw_queries += 1

            def ask() -> list[Any]:
                raw = conn.raw
                if self._ef_set is None or self._ef_set[0] is not raw or self._ef_set[1] != ef:
                    raw.execute(f"SET hnsw.ef_search = {ef}")
                    self._ef_set = (raw, ef)
                return list(raw.execute(sql, (vec, self.model)).fetchall())

            rows = conn._resilient(ask)
            return [int(r[0]) for r in rows]

    def ranked(
        self, queries: np.ndarray, masks: list[np.ndarray], limit: int
    ) -> list[list[list[int]]]:
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q.reshape(1, -1)
        if not self._index_stands():
            return super().ranked(q, masks, limit)
        want = max(HNSW_MIN_CANDIDATES, HNSW_OVERSAMPLE * limit)
        out: list[list[list[int]]] = [[] for _ in masks]
        for row in q:
            found = np.asarray(self.nearest_rowids(row, want), dtype=np.int64)
            pos = self._find(found)
            for mi, mask in enumerate(masks):
                ok = pos >= 0
                ok[ok] = mask[pos[ok]]
                kept = [int(r) for r in found[ok][:limit]]
                if len(kept) < limit and int(mask.sum()) > len(kept):
                    # The index's neighbours fell outside a narrow window: exact for this one.
                    kept = super().ranked(row.reshape(1, -1), [mask], limit)[0][0]
                out[mi].append(kept)
        return out
