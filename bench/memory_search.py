"""Search latency, index size and import throughput of the memory index at several sizes.

    .venv/bin/python -m bench.memory_search --sizes 1000,10000,100000

For each size a synthetic transcript is imported through the real importer (every message a
chunk, plus windows), vectors are computed with a 384-d hashing embedder (the dimension of
MiniLM, so the matrix is the real size), then queries are timed: lexical, vector and hybrid
with a precomputed query vector, and — when the packaged MiniLM weights are installed — hybrid
including embedding the query with the numpy MiniLM (the default embedder). Prints a table; writes JSON to `bench/results/`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from daemon.clock import FakeClock
from daemon.memory.embedders import HashEmbedder, MiniLMEmbedder, minilm_available
from daemon.memory.importer import import_file
from daemon.memory.index import MemoryIndex
from daemon.paths import Home
from daemon.settings import MemorySettings
from daemon.store.db import Database

RESULTS = Path(__file__).resolve().parent / "results"
SYLLABLES = "ka lo mi ne ru sa to vi be da fe go hu ji ko la ma no pe qui ra se ti vo za".split()


def vocabulary(rng: random.Random, n: int = 6000) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def write_transcript(path: Path, messages: int, seed: int) -> None:
    rng = random.Random(seed)
    vocab = vocabulary(rng)
    # Zipf-like word frequencies, as in real text.
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(vocab))]
    start = datetime(2022, 1, 1, tzinfo=UTC)
    with path.open("w") as fh:
        for i in range(messages):
            sid = f"s{i // 200:05d}"
            text = " ".join(rng.choices(vocab, weights, k=rng.randint(8, 30)))
            fh.write(
                json.dumps(
                    {
                        "session": sid,
                        "id": f"{sid}:{i % 200}",
                        "ts": (start + timedelta(minutes=7 * i)).isoformat(),
                        "role": "user" if i % 2 == 0 else "assistant",
                        "speaker": "Sam" if i % 2 == 0 else "Robin",
                        "content": text,
                    }
                )
                + "\n"
            )


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


async def measure(
    size: int, workdir: Path, queries: int, minilm: MiniLMEmbedder | None
) -> dict[str, Any]:
    # Each message yields itself plus (with chunk_messages=6, stride 3) a third of a window.
    messages = int(size * 3 / 4)
    home = Home(workdir / f"home-{size}")
    home.ensure()
    src = workdir / f"conv-{size}.jsonl"
    write_transcript(src, messages, seed=size)
    embedder = HashEmbedder(384)
    out: dict[str, Any] = {"target_memories": size, "messages": messages}
    async with await Database.open(home.db_file) as db:
        index = MemoryIndex(db, embedder, MemorySettings(), FakeClock(), background=False)
        async with index:
            t = time.perf_counter()
            result = await import_file(src, home=home, index=index)
            out["import_s"] = time.perf_counter() - t
            out["import_msgs_per_s"] = messages / out["import_s"]
            t = time.perf_counter()
            await index.flush()
            out["embed_s_hash"] = time.perf_counter() - t
            t = time.perf_counter()
            await index.refresh()
            out["matrix_load_s"] = time.perf_counter() - t
            stats = await index.stats()
            out["memories"] = stats["memories"]
            out["chunks_new"] = result.chunks
            await db.checkpoint()
            out["db_mb"] = home.db_file.stat().st_size / 1e6
            out["matrix_mb"] = index.matrix.nbytes / 1e6

            rng = random.Random(1)
            rows = await db.fetchall(
                "SELECT content FROM messages ORDER BY random() LIMIT ?", (queries,)
            )
            qs = [" ".join(rng.sample(r[0].split(), min(4, len(r[0].split())))) for r in rows]
            qvecs = embedder.embed_sync(qs)
            for mode in ("lexical", "vector", "hybrid"):
                times = []
                for q, v in zip(qs, qvecs, strict=True):
                    t = time.perf_counter()
                    await index.search(q, k=10, mode=mode, query_vector=v)  # type: ignore[arg-type]
                    times.append((time.perf_counter() - t) * 1000)
                out[f"{mode}_p50_ms"], out[f"{mode}_p95_ms"] = pct(times, 50), pct(times, 95)
            if minilm is not None:
                times = []
                for q in qs:
                    t = time.perf_counter()
                    v = (await minilm.embed([q]))[0]
                    await index.search(q, k=10, mode="hybrid", query_vector=v)
                    times.append((time.perf_counter() - t) * 1000)
                out["hybrid_minilm_p50_ms"], out["hybrid_minilm_p95_ms"] = (
                    pct(times, 50),
                    pct(times, 95),
                )
    return out


async def minilm_throughput(n: int = 512) -> float:
    emb = MiniLMEmbedder()
    texts = [f"message number {i} about the weather, work and a trip to Lisbon" for i in range(n)]
    await emb.embed(texts[:8])  # load the model
    t = time.perf_counter()
    await emb.embed(texts)
    return n / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--no-minilm", action="store_true")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    minilm = MiniLMEmbedder() if minilm_available() and not a.no_minilm else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if minilm is not None:
            anyio.run(minilm.embed, ["warm up"])
        for size in sizes:
            rows.append(anyio.run(measure, size, Path(tmp), a.queries, minilm))
            r = rows[-1]
            print(
                f"size {size}: {r['memories']} memories, import {r['import_msgs_per_s']:.0f} msg/s",
                flush=True,
            )
    extra = {"minilm_texts_per_s": anyio.run(minilm_throughput)} if minilm is not None else {}
    cols = [
        "memories",
        "db_mb",
        "matrix_mb",
        "import_msgs_per_s",
        "embed_s_hash",
        "lexical_p50_ms",
        "lexical_p95_ms",
        "vector_p50_ms",
        "vector_p95_ms",
        "hybrid_p50_ms",
        "hybrid_p95_ms",
        "hybrid_minilm_p50_ms",
        "hybrid_minilm_p95_ms",
    ]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print(
            "| "
            + " | ".join(
                f"{r.get(c, float('nan')):.1f}"
                if isinstance(r.get(c, 0.0), float)
                else str(r.get(c))
                for c in cols
            )
            + " |"
        )
    if extra:
        print(
            f"\nMiniLM batch embedding throughput: {extra['minilm_texts_per_s']:.0f} texts/s (CPU)"
        )
    if len(rows) > 1:
        g = rows[-1]["hybrid_p95_ms"] / max(rows[0]["hybrid_p95_ms"], 1e-9)
        print(
            f"hybrid p95 grows {g:.1f}x for {rows[-1]['memories'] / rows[0]['memories']:.0f}x memories"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "memory_search.json"
    out.write_text(
        json.dumps(
            {"rows": rows, **extra, "median_note": statistics.__name__ and "ms per query"}, indent=2
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
