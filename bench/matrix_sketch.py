"""The daemon's sign-bit sketch against exact search: agreement and time per query, by size.

    nice -n 10 .venv/bin/python -m bench.matrix_sketch [--sizes 20000,50000,100000] [--queries 100]

Vectors: all-MiniLM-L6-v2 (numpy, the packaged weights) over the two synthetic histories'
messages (`bench.memory_dataset`, both generators, several seeds). A 100k-row history of
real text would take ~10 minutes to encode here, so rows beyond the distinct messages are
normalised mixtures of two or three real message vectors plus a little noise: they keep
the real vectors' uneven spread (MiniLM vectors are far from uniform on the sphere, which is
what sign bits are sensitive to). Queries are the datasets' questions, encoded by the model,
never mixtures. For each size: the median time of `VectorMatrix.ranked` for one query
(limit 60, the index's candidate count) exact and sketched, and how much of the exact top 10
and top 60 the sketched ranking keeps (ties counted by similarity).

The same process also times sqlite-vec's answer to the same question (`--sqlite-vec`, on by
default when the extension loads; the daemon does not load it, so install the `bench` extra,
`pip install -e '.[bench]'`): the rows' sign bits in a `vec0` table with a `bit[384]`
column, its Hamming KNN picking the same number of candidates as the sketch, then the same
exact numpy rescoring; and, for sqlite-vec as the store the matrix is rebuilt from, the time
to read every vector back from a `vec0` table (`float[384]`) against the plain BLOB table the
index keeps (`embeddings`), both in one on-disk database. Writes JSON to
`bench/results/matrix_sketch.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.memory_dataset import generate, generate_dialogue
from daemon.memory import minilm
from daemon.memory.matrix import (
    SKETCH_MAX_CANDIDATES,
    SKETCH_MIN_CANDIDATES,
    SKETCH_OVERSAMPLE,
    VectorMatrix,
)

RESULTS = Path(__file__).parent / "results"
LIMIT = 60
INSTALL_BENCH = "pip install -e '.[bench]'"


def vec_connect(path: str) -> Any:
    """A SQLite connection with sqlite-vec loaded (the stdlib's when it can load extensions)."""
    import sqlite3

    import sqlite_vec

    module: Any = sqlite3
    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        import sqlean

        module = sqlean
    conn = module.connect(path)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    return conn


def vec_missing() -> str | None:
    """Why sqlite-vec cannot be timed here (None: it can)."""
    try:
        vec_connect(":memory:").close()
    except Exception as exc:
        return f"sqlite-vec cannot load ({exc!r}): {INSTALL_BENCH}"
    return None


def corpus() -> tuple[list[str], list[str]]:
    """Distinct messages and questions of the synthetic histories."""
    texts: dict[str, None] = {}
    questions: dict[str, None] = {}
    for seed in (3, 5, 11):
        for ds in (generate_dialogue(seed), generate(seed, sessions=60)):
            texts.update((line["content"], None) for line in ds.lines)
            questions.update((q["question"], None) for q in ds.questions)
    return list(texts), list(questions)


def rows(base: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` unit vectors: the real ones, then mixtures of 2-3 of them with a little noise."""
    if n <= len(base):
        return base[:n].copy()
    extra = n - len(base)
    picks = rng.integers(0, len(base), size=(extra, 3))
    weights = rng.dirichlet((1.0, 1.0, 0.5), size=extra).astype(np.float32)
    mixed = np.einsum("nk,nkd->nd", weights, base[picks])
    mixed += rng.normal(0, 0.02, size=mixed.shape).astype(np.float32)
    mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
    return np.vstack([base, mixed]).astype(np.float32)


def matrix_of(vecs: np.ndarray, *, sketch: bool) -> VectorMatrix:
    m = VectorMatrix(model="all-MiniLM-L6-v2", dim=vecs.shape[1])
    m._grow(len(vecs))
    n = len(vecs)
    m._rowids[:n] = np.arange(1, n + 1)
    m._kind[:n] = 3
    m._has_vec[:n] = True
    m._vecs[:n] = vecs
    m._n = n
    m.sketch = sketch
    m.sketch_min_rows = 0  # the daemon sketches from SKETCH_MIN_ROWS; measured at every size here
    m.prepare_sketch()
    return m


class VecBitKnn:
    """sqlite-vec as the candidate pass: its bit-vector KNN, then exact numpy rescoring."""

    def __init__(self, vecs: np.ndarray) -> None:
        self.conn = vec_connect(":memory:")
        self.conn.execute(f"CREATE VIRTUAL TABLE bits USING vec0(sign bit[{vecs.shape[1]}])")
        packed = np.packbits(vecs > 0, axis=1)
        self.conn.executemany(
            "INSERT INTO bits(rowid, sign) VALUES (?, vec_bit(?))",
            ((i + 1, packed[i].tobytes()) for i in range(len(vecs))),
        )
        self.vecs = vecs

    def ranked(self, q: np.ndarray, limit: int) -> list[int]:
        want = max(SKETCH_MIN_CANDIDATES, min(SKETCH_MAX_CANDIDATES, SKETCH_OVERSAMPLE * limit))
        rows = self.conn.execute(
            "SELECT rowid FROM bits WHERE sign MATCH vec_bit(?) AND k = ?",
            (np.packbits(q > 0).tobytes(), min(want, len(self.vecs))),
        ).fetchall()
        idx = np.fromiter((r[0] - 1 for r in rows), dtype=np.int64, count=len(rows))
        sims = self.vecs[idx] @ q
        take = min(limit, len(idx))
        best = np.argpartition(-sims, take - 1)[:take] if take < len(idx) else np.arange(take)
        best = best[np.argsort(-sims[best], kind="stable")]
        return [int(i) + 1 for i in idx[best]]


def store_read_ms(vecs: np.ndarray) -> dict[str, float]:
    """Milliseconds to read every vector back as a matrix: a BLOB table against `vec0`."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = vec_connect(str(Path(tmp) / "store.db"))
        conn.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, vector BLOB)")
        conn.execute(f"CREATE VIRTUAL TABLE floats USING vec0(vector float[{vecs.shape[1]}])")
        for table in ("blobs(id, vector)", "floats(rowid, vector)"):
            conn.executemany(
                f"INSERT INTO {table} VALUES (?, ?)",
                ((i + 1, vecs[i].tobytes()) for i in range(len(vecs))),
            )
        conn.commit()
        out: dict[str, float] = {}
        for name, sql in (
            ("store_blob_ms", "SELECT id, vector FROM blobs"),
            ("store_vec0_ms", "SELECT rowid, vector FROM floats"),
        ):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                got = conn.execute(sql).fetchall()
                np.frombuffer(b"".join(r[1] for r in got), dtype=np.float32)
                times.append((time.perf_counter() - t) * 1000)
            out[name] = round(statistics.median(times), 1)
        conn.close()
    return out


def kept(exact: list[int], got: list[int], sims: dict[int, float], k: int) -> float:
    """Share of the exact top k found in the sketched top k (a row tied with the k-th counts)."""
    floor = sims[exact[k - 1]] - 1e-6
    return min(k, sum(1 for r in got[:k] if sims[r] >= floor)) / k


def measure(vecs: np.ndarray, queries: np.ndarray, *, sqlite_vec: bool) -> dict[str, Any]:
    exact_m, sketch_m = matrix_of(vecs, sketch=False), matrix_of(vecs, sketch=True)
    vec = VecBitKnn(vecs) if sqlite_vec else None
    mask = np.ones(len(vecs), dtype=bool)
    t_exact, t_sketch, k10, k60 = [], [], [], []
    t_vec, v10, v60 = [], [], []
    for q in queries:
        t = time.perf_counter()
        [[exact]] = exact_m.ranked(q, [mask], LIMIT)
        t_exact.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        [[got]] = sketch_m.ranked(q, [mask], LIMIT)
        t_sketch.append((time.perf_counter() - t) * 1000)
        sims = dict(zip(range(1, len(vecs) + 1), (vecs @ q).tolist(), strict=True))
        k10.append(kept(exact, got, sims, 10))
        k60.append(kept(exact, got, sims, LIMIT))
        if vec is not None:
            t = time.perf_counter()
            found = vec.ranked(q, LIMIT)
            t_vec.append((time.perf_counter() - t) * 1000)
            v10.append(kept(exact, found, sims, 10))
            v60.append(kept(exact, found, sims, LIMIT))
    sqlite_vec_result = (
        {
            "sqlite_vec_ms": round(statistics.median(t_vec), 2),
            "sqlite_vec_top10_kept": round(float(np.mean(v10)), 4),
            "sqlite_vec_top60_kept": round(float(np.mean(v60)), 4),
            **store_read_ms(vecs),
        }
        if t_vec
        else {}
    )
    return {
        "rows": len(vecs),
        "exact_ms": round(statistics.median(t_exact), 2),
        "sketch_ms": round(statistics.median(t_sketch), 2),
        "ratio": round(statistics.median(t_sketch) / statistics.median(t_exact), 3),
        "top10_kept": round(float(np.mean(k10)), 4),
        "top10_worst": round(float(np.min(k10)), 2),
        "top60_kept": round(float(np.mean(k60)), 4),
        **sqlite_vec_result,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,50000,100000")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument(
        "--sqlite-vec",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"also time sqlite-vec's bit KNN as the candidate pass (needs {INSTALL_BENCH})",
    )
    args = p.parse_args()
    missing = vec_missing() if args.sqlite_vec is not False else None
    if missing and args.sqlite_vec:
        p.error(missing)
    if missing:
        print(f"skipping sqlite-vec: {missing}")
    args.sqlite_vec = args.sqlite_vec is not False and missing is None
    model = minilm.load()
    texts, questions = corpus()
    t = time.perf_counter()
    base = model.encode(texts, batch_size=64)
    qv = model.encode(questions[: args.queries])
    print(
        f"encoded {len(texts)} messages and {len(qv)} questions in {time.perf_counter() - t:.0f} s"
    )
    rng = np.random.default_rng(5)
    out = []
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in [len(base), *sizes]:
        res = measure(rows(base, n, rng), qv, sqlite_vec=args.sqlite_vec)
        res["real_rows"] = min(n, len(base))
        out.append(res)
        print(json.dumps(res), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "matrix_sketch.json").write_text(json.dumps(out, indent=2) + "\n")
    print(
        "\n| rows | exact ms | sketch ms | ratio | exact top 10 kept | worst query | top 60 kept |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in out:
        print(
            f"| {r['rows']:,} | {r['exact_ms']} | {r['sketch_ms']} | {r['ratio']} | "
            f"{r['top10_kept']:.3f} | {r['top10_worst']} | {r['top60_kept']:.3f} |"
        )
    if args.sqlite_vec:
        print(
            "\n| rows | numpy sketch ms | sqlite-vec bit KNN ms | top 10 kept | top 60 kept "
            "| read back: BLOB ms | read back: vec0 ms |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in out:
            print(
                f"| {r['rows']:,} | {r['sketch_ms']} | {r['sqlite_vec_ms']} | "
                f"{r['sqlite_vec_top10_kept']:.3f} | {r['sqlite_vec_top60_kept']:.3f} | "
                f"{r['store_blob_ms']} | {r['store_vec0_ms']} |"
            )


if __name__ == "__main__":
    main()
