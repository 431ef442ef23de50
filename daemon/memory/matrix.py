"""The search matrix: one float32 row per memory, refreshed from the database incrementally, persisted.

Brute-force cosine over a contiguous float32 matrix beats sqlite-vec's exact KNN by an order
of magnitude at 100k rows, so the database keeps the vectors (the truth) and this class keeps
a copy shaped for numpy, plus the per-row attributes search filters on (kind, retired, time).
`refresh` runs on the database thread and reads only rows stamped after the last generation
(`daemon.store.memories`).

The matrix is also saved beside the database (`save`/`load`, the file's format in
`daemon.memory.matrix_file`), memory-mapped copy-on-write when loaded, so a command-line
search starts from the last saved generation and reads only what changed since. On PostgreSQL
the HNSW index picks the candidates instead (`daemon.memory.pg_matrix`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from daemon.log import get_logger
from daemon.memory.matrix_file import (
    ARRAYS,
    FORMAT,
    HASH_DTYPE,
    MAGIC,
    MatrixSnapshot,
    StaleMatrix,
    matrix_path,
    read_matrix,
)
from daemon.store.memories import IndexState, index_state, rows_since, vectors_of, vectors_since

if TYPE_CHECKING:
    from daemon.memory.lexical import RowFilter

__all__ = ["MAGIC", "StaleMatrix", "VectorMatrix", "matrix_path", "sign_bits"]

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


def sign_bits(vecs: np.ndarray) -> np.ndarray:
    """Each row's signs packed into 64-bit words (the sketch `VectorMatrix.ranked` filters with)."""
    packed = np.packbits(np.asarray(vecs) > 0, axis=1)
    pad = (-packed.shape[1]) % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def _epoch_seconds(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


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
        for name in ARRAYS:
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
        gen, epoch = state.generation, state.epoch
        if gen == self.generation and epoch == self.epoch:
            return False
        if epoch != self.epoch:
            self._reset(cap=len(self._rowids))
        seen = max(self.generation, 0)
        rows = rows_since(conn, seen)
        changed: np.ndarray = np.zeros(0, dtype=HASH_DTYPE)
        if len(rows):
            rid = np.array(rows.rowids, dtype=np.int64)
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
            hashes = np.array(rows.hashes, dtype=HASH_DTYPE)
            moved = self._hash[pos] != hashes
            self._hash[pos] = hashes
            self._has_vec[pos[moved]] = False
            changed = hashes[moved]
            self._kind[pos] = [KIND_CODES.get(k, 8) for k in rows.kinds]
            self._retired[pos] = np.array(rows.retired, dtype=bool)
            self._ts[pos] = [_epoch_seconds(t) for t in rows.times]
            self._explicit[pos] = np.array(rows.explicit, dtype=bool)
            self._importance[pos] = np.array(rows.importance, dtype=np.float32)
            self.rows_since_save += len(rows)
        if self.dim > 0:
            fresh_vecs = vectors_since(conn, self.model, self.dim, seen)
            placed = self._place(fresh_vecs)
            self.rows_since_save += len(fresh_vecs)
            pending = [h.decode() for h in np.setdiff1d(changed, placed)]
            if pending:
                self._place(vectors_of(conn, self.model, self.dim, pending))
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
            arrays={name: np.array(getattr(self, name)[:n]) for name in ARRAYS},
        )
        self.saved_generation = self.generation
        self.rows_since_save = 0
        return snap

    def save(self, path: Path, *, index_id: str) -> None:
        """Write the matrix to `path` atomically (blocking)."""
        self.snapshot(index_id=index_id).write(path)

    def load(self, path: Path, state: IndexState) -> None:
        """Take the matrix from `path` (memory-mapped, copy-on-write) if it matches the index `state`.

        Raises `StaleMatrix` saying why it does not (`read_matrix`); the matrix is then left
        empty, to be rebuilt by `refresh`. A file from a later generation of this index is
        stale too.
        """
        gen, n, loaded = read_matrix(path, model=self.model, dim=self.dim, state=state)
        for name, arr in loaded.items():
            setattr(self, name, arr)
        self._bits = None
        self._n = n
        self.generation = gen
        self.epoch = state.epoch
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
