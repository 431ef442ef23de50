"""What lexical feedback costs a `memory search`: the same searches with it and without, A/B.

    nice -n 10 .venv/bin/python -m bench.feedback_cost --sizes 10000,100000 [--queries 200]

For each size the synthetic transcript of `bench.memory_search` is imported through the real
importer (384-d hashing vectors, MiniLM's size), then every query is searched as `memory
search` runs it (`search_plan` of its decomposition, hybrid, one vector pass), once with the
lexical feedback ranking (`daemon.memory.search.LEXICAL_FEEDBACK_WEIGHT`, the shipped weight)
and once with it off (weight 0), the two interleaved and their order alternated, in one
process, so load on the machine falls on both alike. Prints p50 / p95 of each and their
ratio; writes JSON to `bench/results/feedback_cost.json`.
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

from bench.memory_search import pct, write_transcript
from daemon.clock import FakeClock
from daemon.memory import search
from daemon.memory.embedders import HashEmbedder
from daemon.memory.importer import import_file
from daemon.memory.index import MemoryIndex
from daemon.memory.query import decompose
from daemon.paths import Home
from daemon.settings import MemorySettings
from daemon.store.db import Database

RESULTS = Path(__file__).resolve().parent / "results"
SHIPPED = search.LEXICAL_FEEDBACK_WEIGHT


async def measure(size: int, workdir: Path, queries: int) -> dict[str, Any]:
    messages = int(size * 3 / 4)  # each message is a chunk, and a third of a window
    home = Home(workdir / f"home-{size}")
    home.ensure()
    src = workdir / f"conv-{size}.jsonl"
    write_transcript(src, messages, seed=size)
    clock = FakeClock()
    async with await Database.open(home.db_file) as db:
        index = MemoryIndex(db, HashEmbedder(384), MemorySettings(), clock, background=False)
        async with index:
            await import_file(src, home=home, index=index)
            await index.flush()
            await index.refresh()
            rng = random.Random(1)
            rows = await db.fetchall(
                "SELECT content FROM messages ORDER BY random() LIMIT ?", (queries,)
            )
            asked = [
                "What did they say about "
                + " ".join(rng.sample(r[0].split(), min(3, len(r[0].split()))))
                + "?"
                for r in rows
            ]
            plans = [decompose(q, now=clock.now()) for q in asked]
            await index.query_vectors([p.text for p in plans])  # embedded once, for both
            times: dict[str, list[float]] = {"with": [], "without": []}
            for i, plan in enumerate(plans):
                order = ("with", "without") if i % 2 == 0 else ("without", "with")
                for side in order:
                    search.LEXICAL_FEEDBACK_WEIGHT = SHIPPED if side == "with" else 0.0
                    t = time.perf_counter()
                    await index.search_plan(plan, k=10, vector_queries=1)
                    times[side].append((time.perf_counter() - t) * 1000)
            search.LEXICAL_FEEDBACK_WEIGHT = SHIPPED
    out: dict[str, Any] = {"memories_target": size, "queries": len(plans)}
    for side, ms in times.items():
        out[f"{side}_p50_ms"], out[f"{side}_p95_ms"] = pct(ms, 50), pct(ms, 95)
    out["p50_ratio"] = out["with_p50_ms"] / out["without_p50_ms"]
    out["p95_ratio"] = out["with_p95_ms"] / out["without_p95_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="rvfb-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            row = anyio.run(measure, size, Path(tmp), args.queries)
            results.append(row)
            print(
                json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}),
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "feedback_cost.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
