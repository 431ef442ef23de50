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
and top 60 the sketched ranking keeps (ties counted by similarity). Writes JSON to
`bench/results/matrix_sketch.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.memory_dataset import generate, generate_dialogue
from daemon.memory import minilm
from daemon.memory.matrix import VectorMatrix

RESULTS = Path(__file__).parent / "results"
LIMIT = 60


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


def kept(exact: list[int], got: list[int], sims: dict[int, float], k: int) -> float:
    """Share of the exact top k found in the sketched top k (a row tied with the k-th counts)."""
    floor = sims[exact[k - 1]] - 1e-6
    return min(k, sum(1 for r in got[:k] if sims[r] >= floor)) / k


def measure(vecs: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
    exact_m, sketch_m = matrix_of(vecs, sketch=False), matrix_of(vecs, sketch=True)
    mask = np.ones(len(vecs), dtype=bool)
    t_exact, t_sketch, k10, k60 = [], [], [], []
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
    return {
        "rows": len(vecs),
        "exact_ms": round(statistics.median(t_exact), 2),
        "sketch_ms": round(statistics.median(t_sketch), 2),
        "ratio": round(statistics.median(t_sketch) / statistics.median(t_exact), 3),
        "top10_kept": round(float(np.mean(k10)), 4),
        "top10_worst": round(float(np.min(k10)), 2),
        "top60_kept": round(float(np.mean(k60)), 4),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,50000,100000")
    p.add_argument("--queries", type=int, default=100)
    args = p.parse_args()
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
        res = measure(rows(base, n, rng), qv)
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


if __name__ == "__main__":
    main()
