"""Recall@k of planted evidence on the synthetic history, per search mode and embedder.

    .venv/bin/python -m bench.recall_quality [--sessions 120] [--seed 7] [--k 1,5,10]
    .venv/bin/python -m bench.recall_quality --set dialogue [--seed 3] [--sessions 28]

Imports the generated conversations into a throwaway home (the real importer and index),
asks every question through query decomposition + `search_plan`, and counts a question as
recalled at k when any of its evidence message ids is among the top-k results' message ids.
Prints a markdown table and writes JSON to `bench/results/`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from bench.memory_dataset import Dataset, generate, generate_dialogue
from daemon.clock import FakeClock
from daemon.memory.embedders import (
    Embedder,
    HashEmbedder,
    LocalEmbedder,
    NoEmbedder,
    local_available,
)
from daemon.memory.importer import import_file
from daemon.memory.index import MemoryIndex, SearchMode
from daemon.memory.query import decompose
from daemon.paths import Home
from daemon.settings import MemorySettings
from daemon.store.db import Database

RESULTS = Path(__file__).resolve().parent / "results"


async def evaluate(
    data: Dataset, embedder: Embedder, modes: list[SearchMode], ks: list[int], *, workdir: Path
) -> dict[str, dict[str, Any]]:
    """Return {mode: {"recall@k": float, ..., "by_kind": {kind: recall@max(k)}}}."""
    home = Home(workdir / f"home-{embedder.name}")
    home.ensure()
    conv, _ = data.write(workdir / "data")
    now = max(datetime.fromisoformat(line["ts"]) for line in data.lines) + timedelta(days=1)
    out: dict[str, dict[str, Any]] = {}
    async with await Database.open(home.db_file) as db:
        index = MemoryIndex(db, embedder, MemorySettings(), FakeClock(now), background=False)
        async with index:
            await import_file(conv, home=home, index=index)
            await index.flush()
            plans = [decompose(str(q["question"]), now=now) for q in data.questions]
            if embedder.dim:
                await index.query_vectors([s for p in plans for s in p.all_queries()])
            for mode in modes:
                hits: dict[int, int] = defaultdict(int)
                kind_hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
                started = time.perf_counter()
                for q, plan in zip(data.questions, plans, strict=True):
                    results = await index.search_plan(plan, k=max(ks), mode=mode)
                    evidence = set(q["evidence"])  # type: ignore[arg-type]
                    for k in ks:
                        ids = {m for r in results[:k] for m in r.message_ids}
                        hits[k] += bool(ids & evidence)
                    top = {m for r in results for m in r.message_ids}
                    kind_hits[str(q["kind"])][0] += bool(top & evidence)
                    kind_hits[str(q["kind"])][1] += 1
                n = len(data.questions)
                out[mode] = {f"recall@{k}": hits[k] / n for k in ks}
                out[mode]["by_kind"] = {kind: h / t for kind, (h, t) in sorted(kind_hits.items())}
                out[mode]["ms_per_query"] = 1000 * (time.perf_counter() - started) / n
    return out


def _embedders(names: list[str]) -> list[Embedder]:
    out: list[Embedder] = []
    for name in names:
        if name == "none":
            out.append(NoEmbedder())
        elif name == "hash":
            out.append(HashEmbedder())
        elif name == "minilm" and local_available():
            out.append(LocalEmbedder())
    return out


def dataset(kind: str, seed: int, sessions: int) -> Dataset:
    """The planted-facts history (`planted`) or the LoCoMo-like two-friend dialogue (`dialogue`)."""
    if kind == "dialogue":
        return generate_dialogue(seed, sessions=sessions)
    return generate(seed, sessions=sessions)


async def run(sessions: int, seed: int, ks: list[int], embedders: list[str], kind: str = "planted") -> list[dict[str, Any]]:
    data = dataset(kind, seed, sessions)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for emb in _embedders(embedders):
            modes: list[SearchMode] = ["lexical"] if emb.dim == 0 else ["vector", "hybrid"]
            res = await evaluate(data, emb, modes, ks, workdir=Path(tmp))
            for mode, r in res.items():
                rows.append({"mode": mode, "embedder": emb.name, **r})
    return rows


def markdown(rows: list[dict[str, Any]], ks: list[int], n_questions: int, n_messages: int) -> str:
    head = "| mode | embedder | " + " | ".join(f"recall@{k}" for k in ks) + " | ms/query |"
    lines = [f"Synthetic history: {n_messages} messages, {n_questions} questions.", "", head,
             "|" + "---|" * (len(ks) + 3)]
    for r in rows:
        cells = " | ".join(f"{r[f'recall@{k}']:.2f}" for k in ks)
        lines.append(f"| {r['mode']} | {r['embedder']} | {cells} | {r['ms_per_query']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", dest="kind", choices=("planted", "dialogue"), default="planted")
    p.add_argument("--sessions", type=int, help="sessions (default 120 planted, 28 dialogue)")
    p.add_argument("--seed", type=int, help="seed (default 7 planted, 3 dialogue)")
    p.add_argument("--k", default="1,5,10")
    p.add_argument("--embedders", default="none,hash,minilm")
    a = p.parse_args()
    ks = [int(x) for x in a.k.split(",")]
    sessions = a.sessions or (28 if a.kind == "dialogue" else 120)
    seed = a.seed if a.seed is not None else (3 if a.kind == "dialogue" else 7)
    rows = anyio.run(run, sessions, seed, ks, a.embedders.split(","), a.kind)
    data = dataset(a.kind, seed, sessions)
    print(markdown(rows, ks, len(data.questions), len(data.lines)))
    for r in rows:
        print(f"  {r['mode']}/{r['embedder']} by kind: {r['by_kind']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "recall_quality" if a.kind == "planted" else "recall_dialogue"
    out = RESULTS / f"{name}_s{sessions}_seed{seed}.json"
    out.write_text(json.dumps({"set": a.kind, "sessions": sessions, "seed": seed, "rows": rows}, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
