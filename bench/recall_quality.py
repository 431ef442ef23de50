"""Recall@k of planted evidence on the synthetic history, per search mode and embedder.

    .venv/bin/python -m bench.recall_quality [--sessions 120] [--seed 7] [--k 1,5,10]
    .venv/bin/python -m bench.recall_quality --set dialogue [--seed 3] [--sessions 28]

Imports the generated conversations into a throwaway home (the real importer and index),
asks every question through query decomposition + `search_plan`, and counts a question as
recalled at k when any of its evidence message ids is among the top-k results' message ids,
and complete when all of them are among the top max-k (what a join question needs).
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
from daemon.memory.api import MemoryItem
from daemon.memory.auto_recall import IndexMemoryView
from daemon.memory.embedders import (
    Embedder,
    HashEmbedder,
    LocalEmbedder,
    MiniLMEmbedder,
    NoEmbedder,
    local_available,
    minilm_available,
)
from daemon.memory.importer import import_file
from daemon.memory.index import MemoryIndex, SearchMode
from daemon.memory.query import decompose
from daemon.paths import Home
from daemon.settings import MemorySettings
from daemon.store.db import Database
from daemon.tokens import count_tokens

RESULTS = Path(__file__).resolve().parent / "results"
TOKEN_BUDGET = 1500  # "recall within the first 1,500 tokens of results"
BUDGET_K = 30  # results fetched to fill the token budget


async def evaluate(
    data: Dataset,
    embedder: Embedder,
    modes: list[SearchMode],
    ks: list[int],
    *,
    workdir: Path,
    hops: int = 2,
) -> dict[str, dict[str, Any]]:
    """Return {mode: {"recall@k": float, ..., "by_kind": {kind: recall@max(k)}}}."""
    home = Home(workdir / f"home-{embedder.name}")
    home.ensure()
    conv, _ = data.write(workdir / "data")
    now = max(datetime.fromisoformat(line["ts"]) for line in data.lines) + timedelta(days=1)
    out: dict[str, dict[str, Any]] = {}
    async with await Database.open(home.db_file) as db:
        index = MemoryIndex(
            db, embedder, MemorySettings(search_hops=hops), FakeClock(now), background=False
        )
        async with index:
            started = time.perf_counter()
            await import_file(conv, home=home, index=index)
            await index.flush()
            import_s = time.perf_counter() - started
            plans = [decompose(str(q["question"]), now=now) for q in data.questions]
            if embedder.dim:
                await index.query_vectors([s for p in plans for s in p.vector_queries()])
            for mode in modes:
                # per measure ("recall@k", "tokens≤N"), per kind: [hits, questions]
                tally: dict[str, dict[str, list[int]]] = defaultdict(
                    lambda: defaultdict(lambda: [0, 0])
                )
                started = time.perf_counter()
                for q, plan in zip(data.questions, plans, strict=True):
                    # As `memory search` runs it (daemon/commands/ops.py): in hybrid mode only
                    # the question itself gets a vector pass.
                    results = await index.search_plan(
                        plan,
                        k=max(max(ks), BUDGET_K),
                        mode=mode,
                        vector_queries=1 if mode == "hybrid" else None,
                    )
                    evidence = set(q["evidence"])  # type: ignore[arg-type]
                    measures = {
                        f"recall@{k}": bool(
                            {m for r in results[:k] for m in r.message_ids} & evidence
                        )
                        for k in ks
                    }
                    measures[f"tokens≤{TOKEN_BUDGET}"] = bool(within_budget(results) & evidence)
                    # A join needs every fact: complete when all the evidence is in the top k.
                    top = {m for r in results[: max(ks)] for m in r.message_ids}
                    measures[f"complete@{max(ks)}"] = evidence <= top
                    for name, hit in measures.items():
                        for kind in ("all", str(q["kind"])):
                            tally[name][kind][0] += hit
                            tally[name][kind][1] += 1
                n = len(data.questions)
                out[mode] = {name: t["all"][0] / t["all"][1] for name, t in tally.items()}
                out[mode]["by_kind"] = {
                    kind: {name: tally[name][kind][0] / tally[name][kind][1] for name in tally}
                    for kind in sorted(tally[f"recall@{ks[-1]}"])
                    if kind != "all"
                }
                out[mode]["kind_counts"] = {
                    kind: c[1]
                    for kind, c in sorted(tally[f"recall@{ks[-1]}"].items())
                    if kind != "all"
                }
                out[mode]["ms_per_query"] = 1000 * (time.perf_counter() - started) / n
                out[mode]["import_turns_per_s"] = len(data.lines) / import_s
            # What one turn shows the model: automatic recall's items (at most 6, within
            # `memory.auto_recall_tokens`) for the question sent as a message.
            view = IndexMemoryView(index, index.settings)
            auto: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            started = time.perf_counter()
            for q in data.questions:
                shown = await view.auto_recall(str(q["question"]), limit=6)
                hit = bool({m for r in shown for m in r.message_ids} & set(q["evidence"]))  # type: ignore[arg-type]
                for kind in ("all", str(q["kind"])):
                    auto[kind][0] += hit
                    auto[kind][1] += 1
            for mode in out:
                out[mode]["auto_recall"] = {k: h / n for k, (h, n) in auto.items()}
                out[mode]["auto_recall_ms"] = (
                    1000 * (time.perf_counter() - started) / len(data.questions)
                )
    return out


def within_budget(results: list[MemoryItem], budget: int = TOKEN_BUDGET) -> set[str]:
    """Message ids of the results that fit, in order, within `budget` tokens of text."""
    ids: set[str] = set()
    used = 0
    for r in results:
        used += count_tokens(r.text)
        if used > budget:
            break
        ids.update(r.message_ids)
    return ids


def _embedders(names: list[str]) -> list[Embedder]:
    out: list[Embedder] = []
    for name in names:
        if name == "none":
            out.append(NoEmbedder())
        elif name == "hash":
            out.append(HashEmbedder())
        elif name == "minilm" and minilm_available():
            out.append(MiniLMEmbedder())  # numpy; the same vectors as the torch one below
        elif name == "minilm-torch" and local_available():
            out.append(LocalEmbedder())
    return out


def dataset(kind: str, seed: int, sessions: int) -> Dataset:
    """The planted-facts history (`planted`) or the LoCoMo-like two-friend dialogue (`dialogue`)."""
    if kind == "dialogue":
        return generate_dialogue(seed, sessions=sessions)
    return generate(seed, sessions=sessions)


async def run(
    sessions: int,
    seed: int,
    ks: list[int],
    embedders: list[str],
    kind: str = "planted",
    hops: int = 2,
) -> list[dict[str, Any]]:
    data = dataset(kind, seed, sessions)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for emb in _embedders(embedders):
            modes: list[SearchMode] = ["lexical"] if emb.dim == 0 else ["vector", "hybrid"]
            res = await evaluate(data, emb, modes, ks, workdir=Path(tmp), hops=hops)
            for mode, r in res.items():
                rows.append({"mode": mode, "embedder": emb.name, **r})
    return rows


def markdown(rows: list[dict[str, Any]], ks: list[int], n_questions: int, n_messages: int) -> str:
    budget = f"tokens≤{TOKEN_BUDGET}"
    head = (
        "| mode | embedder | "
        + " | ".join(f"recall@{k}" for k in ks)
        + f" | within {TOKEN_BUDGET} tokens | ms/query |"
    )
    lines = [
        f"Synthetic history: {n_messages} messages, {n_questions} questions.",
        "",
        head,
        "|" + "---|" * (len(ks) + 4),
    ]
    for r in rows:
        cells = " | ".join(f"{r[f'recall@{k}']:.2f}" for k in ks)
        lines.append(
            f"| {r['mode']} | {r['embedder']} | {cells} | {r[budget]:.2f} | {r['ms_per_query']:.1f} |"
        )
    # Per category: recall@k… / within the token budget / complete, one column per run.
    complete = f"complete@{max(ks)}"
    names = [*(f"recall@{k}" for k in ks), budget, complete]
    kinds = sorted({kind for r in rows for kind in r["by_kind"]})
    lines += [
        "",
        "Per category ("
        + " / ".join(f"recall@{k}" for k in ks)
        + f" / within budget / all evidence@{max(ks)}):",
        "",
        "| category | n | " + " | ".join(f"{r['mode']} {r['embedder']}" for r in rows) + " |",
        "|" + "---|" * (len(rows) + 2),
    ]
    for kind in kinds:
        cells = []
        for r in rows:
            m = r["by_kind"].get(kind, {})
            cells.append(" / ".join(f"{m.get(name, 0):.2f}" for name in names))
        lines.append(
            f"| {kind} | {rows[0]['kind_counts'].get(kind, 0)} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "Automatic recall (what one turn shows the model for the question: at most 6 items within "
        "`memory.auto_recall_tokens`), evidence shown:",
        "",
        "| embedder | all | " + " | ".join(kinds) + " | ms/turn |",
        "|" + "---|" * (len(kinds) + 3),
    ]
    for r in {r["embedder"]: r for r in rows}.values():
        a = r["auto_recall"]
        lines.append(
            f"| {r['embedder']} | {a['all']:.2f} | "
            + " | ".join(f"{a.get(kind, 0):.2f}" for kind in kinds)
            + f" | {r['auto_recall_ms']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", dest="kind", choices=("planted", "dialogue"), default="planted")
    p.add_argument("--sessions", type=int, help="sessions (default 120 planted, 28 dialogue)")
    p.add_argument("--seed", type=int, help="seed (default 7 planted, 3 dialogue)")
    p.add_argument("--k", default="1,5,10")
    p.add_argument(
        "--embedders",
        default="none,hash,minilm",
        help="of none, hash, minilm (numpy), minilm-torch",
    )
    p.add_argument(
        "--hops", type=int, choices=(1, 2), default=2, help="search hops (memory.search_hops)"
    )
    a = p.parse_args()
    ks = [int(x) for x in a.k.split(",")]
    sessions = a.sessions or (28 if a.kind == "dialogue" else 120)
    seed = a.seed if a.seed is not None else (3 if a.kind == "dialogue" else 7)
    rows = anyio.run(run, sessions, seed, ks, a.embedders.split(","), a.kind, a.hops)
    data = dataset(a.kind, seed, sessions)
    print(markdown(rows, ks, len(data.questions), len(data.lines)))
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "recall_quality" if a.kind == "planted" else "recall_dialogue"
    out = RESULTS / f"{name}_s{sessions}_seed{seed}.json"
    out.write_text(
        json.dumps({"set": a.kind, "sessions": sessions, "seed": seed, "rows": rows}, indent=2)
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
