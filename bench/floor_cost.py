"""What the relevance floor costs recall on LoCoMo: evidence lost when weak matches are left out.

    nice -n 10 .venv/bin/python -m bench.floor_cost [--floors 0,10,20,30,40] [--convs conv-26]

Runs what `../shared/eval/locomo_recall.py` runs, with its own functions (each conversation
imported into a fresh home through the real CLI, every question asked through `memory search
--batch --json --k 150`), then scores the same results once per floor with the items whose
`relevance` is below it left out — what `memory search`, the console and `recall` show above
the line. Floor 0 is the search unchanged (the eval's own figures). Per floor: recall@5/@10,
recall within 1,500 tokens (there the items above the floor fill the budget), the share of the top 10 left out, and the share of top-10 items
holding evidence that were left out. Writes `bench/results/floor_cost.json`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT.parent / "shared" / "eval" / "locomo_recall.py"
RESULTS = Path(__file__).resolve().parent / "results"


def _eval_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("locomo_recall", path)
    if spec is None or spec.loader is None:
        sys.exit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAILED ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return done.stdout


async def _timing(home: str, questions: list[str], k: int) -> dict[str, float]:
    """In one process over `home`: each question searched as `memory search` does, then its
    results rated (`MemorySearch.matches`), each timed; medians in ms, and the share rating adds."""
    import time

    from daemon.cli.memory_direct import open_index
    from daemon.cli.support import resolve_env
    from daemon.memory.query import decompose

    env = resolve_env(argparse.Namespace(home=home, config=None))
    search_ms, rate_ms = [], []
    async with open_index(env) as index:
        await index.refresh()
        for q in questions:
            plan = decompose(q)
            t0 = time.perf_counter()
            found = await index.search_plan(plan, k=k, vector_queries=1)
            t1 = time.perf_counter()
            await index.searcher.matches(plan.text, found)
            t2 = time.perf_counter()
            search_ms.append(1000 * (t1 - t0))
            rate_ms.append(1000 * (t2 - t1))
    search, rate = statistics.median(search_ms), statistics.median(rate_ms)
    return {
        "search_ms_p50": round(search, 2),
        "rating_ms_p50": round(rate, 2),
        "rating_share_pct": round(100 * rate / search, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", default=str(EVAL), help="path of locomo_recall.py")
    ap.add_argument("--reverie", default=str(ROOT / ".venv" / "bin" / "reverie"))
    ap.add_argument("--floors", default="0,10,20,30,40")
    ap.add_argument("--convs", default="", help="comma-separated sample ids (default: all)")
    ap.add_argument(
        "--timing",
        type=int,
        default=0,
        help="also time rating N questions of the first, in-process",
    )
    a = ap.parse_args()
    ev = _eval_module(Path(a.eval))
    default_data = Path(a.eval).resolve().parent.parent / "data" / "locomo-tune.json"
    data = json.loads(default_data.read_text())
    if a.convs:
        keep = set(a.convs.split(","))
        data = [s for s in data if s["sample_id"] in keep]
    results: list[list[dict[str, Any]]] = []
    timing: dict[str, Any] = {}
    evidence: list[list[str]] = []
    for sample in data:
        qs = list(ev.questions(sample))
        with tempfile.TemporaryDirectory(prefix="floor-") as tmp:
            jl, qf, home = f"{tmp}/conv.jsonl", f"{tmp}/q.txt", f"{tmp}/h"
            ev.to_jsonl(sample, jl)
            Path(qf).write_text("".join(q.replace("\n", " ") + "\n" for q, _, _ in qs))
            _run([a.reverie, "--home", home, "memory", "import", jl])
            out = _run(
                [
                    a.reverie,
                    "--home",
                    home,
                    "memory",
                    "search",
                    "--batch",
                    qf,
                    "--json",
                    "--k",
                    "150",
                ]
            )
            if a.timing and not results:
                for k in (10, 150):
                    timing[f"k{k}"] = anyio.run(_timing, home, [q for q, _, _ in qs[: a.timing]], k)
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        if len(lines) != len(qs):
            sys.exit(f"{sample['sample_id']}: {len(qs)} queries, {len(lines)} result lines")
        results += lines
        evidence += [e for _, e, _ in qs]
    report: dict[str, Any] = {"questions": len(results), "floors": {}, "timing": timing}
    for floor in (int(f) for f in a.floors.split(",")):
        kept = [[it for it in res if it.get("relevance", 100) >= floor] for res in results]
        r5, r10, r1500, dropped, lost = [], [], [], [], []
        for res, shown, ev_ids in zip(results, kept, evidence, strict=True):
            for k, acc in ((5, r5), (10, r10)):
                # The top k as shown, less what falls below the floor (nothing moves up).
                got = {
                    m
                    for it in res[:k]
                    if it.get("relevance", 100) >= floor
                    for m in it.get("message_ids", [])
                }
                acc.append(sum(e in got for e in ev_ids) / len(ev_ids))
            got = ev.within_budget(shown, 1500)
            r1500.append(sum(e in got for e in ev_ids) / len(ev_ids))
            top = res[:10]
            dropped.append(sum(it.get("relevance", 100) < floor for it in top) / max(1, len(top)))
            hits = [it for it in top if set(it.get("message_ids", [])) & set(ev_ids)]
            lost += [it.get("relevance", 100) < floor for it in hits]
        report["floors"][floor] = {
            "R@5": round(100 * statistics.mean(r5), 1),
            "R@10": round(100 * statistics.mean(r10), 1),
            "R@1500tok": round(100 * statistics.mean(r1500), 1),
            "top10_left_out_pct": round(100 * statistics.mean(dropped), 1),
            "evidence_items_left_out_pct": round(100 * statistics.mean(lost), 1) if lost else 0.0,
        }
    print(json.dumps(report, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "floor_cost.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
