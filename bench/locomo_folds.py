"""LoCoMo recall per conversation: the pooled figure beside each held-out fold and the spread.

    nice -n 10 .venv/bin/python -m bench.locomo_folds [--reverie .venv/bin/reverie]
        [--data ../shared/data/locomo-tune.json] [--json-out bench/results/locomo_folds.json]
        [--baseline OLD.json] [--embedder minilm|e5|...]

Leave-one-conversation-out over the tuning split (issue 35): each of its conversations is in
turn the held-out fold, the other ones the tuning set. Every conversation is imported into a
fresh home and searched exactly as ../shared/eval/locomo_recall.py does (its own functions are
loaded and used: the JSONL conversion, the questions, the scoring, the token budgets), once
per conversation; from those per-question scores this prints, for R@1500tok and R@10, overall
and per category:

- the pooled figure (every question of every conversation, what locomo_recall.py prints),
- each fold: the held-out conversation's figure and the figure of the other four beside it
  (the set a change would have been tuned on), and the gap between them,
- the spread of the held-out figures: min, max, mean and stdev.

With `--baseline` (a JSON this script wrote for an earlier tree) it also prints, per fold,
the change on the held-out conversation, and says whether the change helps the held-out
folds and not only the pool: how a ranking change is judged (bench/README.md, "Recall per
fold"). The data stays in ../shared; nothing of it is written into the repository.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT.parent / "shared" / "eval" / "locomo_recall.py"
DATA = ROOT.parent / "shared" / "data" / "locomo-tune.json"
METRICS = ("R@1500tok", "R@10")


def load_eval(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("locomo_recall", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def per_question(
    ev_mod: ModuleType, res: list[list[dict[str, Any]]], evs: list[list[str]]
) -> dict[str, list[float]]:
    """Per-question recall for each metric, the definitions of locomo_recall.py."""
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for r, ev in zip(res, evs, strict=True):
        got = ev_mod.within_budget(r, 1500)
        out["R@1500tok"].append(sum(e in got for e in ev) / len(ev))
        top = {m for it in r[:10] for m in it.get("message_ids", [])}
        out["R@10"].append(sum(e in top for e in ev) / len(ev))
    return out


def run_conversation(ev_mod: ModuleType, cli: list[str], sample: dict[str, Any]) -> dict[str, Any]:
    qs = list(ev_mod.questions(sample))
    with tempfile.TemporaryDirectory(prefix="locomo-fold-") as tmp:
        jl, qf = os.path.join(tmp, "conv.jsonl"), os.path.join(tmp, "q.txt")
        ev_mod.to_jsonl(sample, jl)
        with open(qf, "w") as f:
            f.writelines(q.replace("\n", " ") + "\n" for q, _, _ in qs)
        home = os.path.join(tmp, "h")
        t0 = time.perf_counter()
        ev_mod.run([*cli, "--home", home, "memory", "import", jl])
        t1 = time.perf_counter()
        out = ev_mod.run(
            [*cli, "--home", home, "memory", "search", "--batch", qf, "--json", "--k", "150"]
        )
        t2 = time.perf_counter()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if len(lines) != len(qs):
        raise SystemExit(f"{sample['sample_id']}: {len(qs)} queries but {len(lines)} result lines")
    res = [json.loads(ln) for ln in lines]
    scores = per_question(ev_mod, res, [e for _, e, _ in qs])
    return {
        "id": sample["sample_id"],
        "categories": [ev_mod.CAT[c] for _, _, c in qs],
        "scores": scores,
        "import_s": round(t1 - t0, 2),
        "search_s": round(t2 - t1, 2),
    }


def mean_pct(values: list[float]) -> float | None:
    return round(100 * statistics.mean(values), 1) if values else None


def figure(convs: list[dict[str, Any]], metric: str, category: str | None) -> float | None:
    vals = [
        s
        for c in convs
        for s, cat in zip(c["scores"][metric], c["categories"], strict=True)
        if category is None or cat == category
    ]
    return mean_pct(vals)


def summarise(convs: list[dict[str, Any]], categories: list[str]) -> dict[str, Any]:
    report: dict[str, Any] = {"conversations": [c["id"] for c in convs], "metrics": {}}
    for metric in METRICS:
        rows: dict[str, Any] = {}
        for cat in [None, *categories]:
            name = cat or "all"
            folds = {}
            for c in convs:
                rest = [o for o in convs if o is not c]
                held, tuned = figure([c], metric, cat), figure(rest, metric, cat)
                folds[c["id"]] = {
                    "held_out": held,
                    "other_four": tuned,
                    "gap": None if held is None or tuned is None else round(held - tuned, 1),
                    "questions": sum(1 for k in c["categories"] if cat is None or k == cat),
                }
            held_vals = [f["held_out"] for f in folds.values() if f["held_out"] is not None]
            rows[name] = {
                "pooled": figure(convs, metric, cat),
                "folds": folds,
                "spread": {
                    "min": min(held_vals) if held_vals else None,
                    "max": max(held_vals) if held_vals else None,
                    "mean": round(statistics.mean(held_vals), 1) if held_vals else None,
                    "stdev": round(statistics.stdev(held_vals), 1) if len(held_vals) > 1 else None,
                },
            }
        report["metrics"][metric] = rows
    return report


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def table(report: dict[str, Any]) -> str:
    ids = report["conversations"]
    lines = []
    for metric, rows in report["metrics"].items():
        lines.append(
            f"\n{metric}: held-out conversation (the other conversations pooled, in brackets)"
        )
        head = ["category", "pooled", *ids, "min", "max", "mean", "stdev"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for name, row in rows.items():
            cells = [name, fmt(row["pooled"])]
            for cid in ids:
                f = row["folds"][cid]
                cells.append(f"{fmt(f['held_out'])} ({fmt(f['other_four'])})")
            sp = row["spread"]
            cells += [fmt(sp["min"]), fmt(sp["max"]), fmt(sp["mean"]), fmt(sp["stdev"])]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare(report: dict[str, Any], baseline: dict[str, Any]) -> str:
    """Per-fold change on the held-out conversation against an earlier run of this script."""
    lines = ["\nagainst the baseline (held-out figure, new − old):"]
    for metric in METRICS:
        new, old = report["metrics"][metric]["all"], baseline["metrics"][metric]["all"]
        deltas = {}
        for cid, f in new["folds"].items():
            o = old["folds"].get(cid, {}).get("held_out")
            if f["held_out"] is not None and o is not None:
                deltas[cid] = round(f["held_out"] - o, 1)
        pooled = None
        if new["pooled"] is not None and old["pooled"] is not None:
            pooled = round(new["pooled"] - old["pooled"], 1)
        better = sum(1 for d in deltas.values() if d > 0)
        worse = sum(1 for d in deltas.values() if d < 0)
        mean_d = round(statistics.mean(deltas.values()), 1) if deltas else 0.0
        keep = bool(deltas) and mean_d > 0 and better > worse
        lines.append(
            f"{metric}: pooled {pooled:+.1f}; "
            + ", ".join(f"{cid} {d:+.1f}" for cid, d in deltas.items())
            + f"; mean of folds {mean_d:+.1f}, {better} better / {worse} worse"
            + (" — helps the held-out folds" if keep else " — does not help the held-out folds")
            if pooled is not None
            else f"{metric}: no comparable pooled figure"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--reverie", default=str(ROOT / ".venv" / "bin" / "reverie"))
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--eval", default=str(EVAL), help="locomo_recall.py whose definitions are used")
    ap.add_argument("--json-out", default="")
    ap.add_argument("--baseline", default="", help="a JSON an earlier run of this script wrote")
    ap.add_argument(
        "--embedder",
        default="",
        help="memory.embedder for every home of the run (REVERIE_EMBEDDER), e.g. minilm or e5",
    )
    ap.add_argument(
        "--rescore",
        default="",
        help="summarise the per-question scores of such a JSON again, no run",
    )
    a = ap.parse_args(argv)
    if a.embedder:
        os.environ["REVERIE_EMBEDDER"] = a.embedder  # the CLI's imports and searches read it
    ev_mod = load_eval(Path(a.eval))
    if a.rescore:
        convs = json.loads(Path(a.rescore).read_text())["per_question"]
    else:
        data = json.loads(Path(a.data).read_text())
        if len(data) < 2:
            raise SystemExit("leave-one-out needs two conversations or more")
        cli = a.reverie.split()
        convs = []
        for sample in data:
            c = run_conversation(ev_mod, cli, sample)
            print(
                f"{c['id']}: {len(c['categories'])} questions, import {c['import_s']} s, search {c['search_s']} s",
                file=sys.stderr,
            )
            convs.append(c)
            if a.json_out:  # what is measured so far survives a stop part way
                Path(a.json_out + ".partial").write_text(json.dumps({"per_question": convs}) + "\n")
    categories = [
        name for name in ev_mod.CAT.values() if any(name in c["categories"] for c in convs)
    ]
    report = summarise(convs, categories)
    report["timing_s"] = {
        c["id"]: {"import": c["import_s"], "search": c["search_s"]} for c in convs
    }
    report["embedder"] = a.embedder or os.environ.get("REVERIE_EMBEDDER", "") or "auto"
    report["per_question"] = convs
    print(table(report))
    if a.baseline:
        print(compare(report, json.loads(Path(a.baseline).read_text())))
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
