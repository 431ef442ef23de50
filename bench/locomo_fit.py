"""Evidence within a token budget on LoCoMo's tuning split, with short and with long messages.

    .venv/bin/python -m bench.locomo_fit [--variant short|long|both] [--turns 10]
        [--data ../shared/data/locomo-tune.json] [--eval ../shared/eval]
        [--reverie ".venv/bin/python -m daemon.cli"]

`short` is the split as people wrote it (one message per turn). `long` is built from it: each
session's turns are merged, `--turns` at a time, into one long multi-paragraph message (every
paragraph keeps its speaker's name, "Caroline: …"; the message is its first speaker's), so
a message is a few hundred words as in technical conversations (code, plans); a question's
evidence is the merged message that holds its turn. Both are imported through the CLI
contract (`memory import`, then `memory search --batch --json`) into throwaway homes, and
scored as `../shared/eval/locomo_recall.py` scores (its functions: recall@k over message ids,
evidence within 500 / 1,500 / 4,000 tokens of results taken in rank order, chars / 4), with
BM25 over the same single messages (rank_bm25) side by side in the same process.

The tuning split is tuning data: never used as test data in CI. Prints one JSON object per
variant and writes them to `bench/results/locomo_fit.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def long_conversation(sample: dict[str, Any], L: Any, turns: int) -> tuple[list[dict], dict]:
    """The import lines of `sample` with `turns` turns merged per message, and the evidence map
    (turn dia_id → merged message id)."""
    lines: list[dict[str, Any]] = []
    where: dict[str, str] = {}
    first = sample["conversation"]["speaker_a"]
    for n, when, session in L.sessions(sample):
        for part, start in enumerate(range(0, len(session), turns)):
            group = session[start : start + turns]
            mid = f"D{n}:M{part + 1}"
            for t in group:
                where[t["dia_id"]] = mid
            lines.append(
                {
                    "session": f"{sample['sample_id']}-s{n}",
                    "id": mid,
                    "ts": (when + timedelta(minutes=part)).isoformat(),
                    "role": "user" if group[0]["speaker"] == first else "assistant",
                    "speaker": group[0]["speaker"],
                    "content": "\n\n".join(f"{t['speaker']}: {L.turn_text(t)}" for t in group),
                }
            )
    return lines, where


def bm25(items: list[tuple[str, str]], questions: list[str], kmax: int) -> list[list[dict]]:
    """BM25 (rank_bm25) over `items` (text, message id), as the eval script's baseline."""
    from rank_bm25 import BM25Okapi

    def tok(s: str) -> list[str]:
        return re.findall(r"[a-z0-9]+", s.lower())

    index = BM25Okapi([tok(t) for t, _ in items])
    out = []
    for q in questions:
        scores = index.get_scores(tok(q))
        order = sorted(range(len(items)), key=lambda j: -scores[j])[:kmax]
        out.append([{"message_ids": [items[j][1]], "text": items[j][0]} for j in order])
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())


def shown_within(results: list[dict], evidence: dict[str, list[str]], budget: int) -> float:
    """The share of a question's evidence turns whose words the results within `budget` show.

    The strict count for long messages: an excerpt of the merged message that holds a turn
    counts only when it shows one of the turn's sentences (20 characters or more), not merely
    because it names the message.
    """
    used, shown = 0.0, ""
    for item in results:
        cost = len(item.get("text", "")) / 4
        if used + cost > budget:
            break
        used += cost
        shown += " " + _flat(item.get("text", ""))
    hits = 0
    for sentences in evidence.values():
        hits += any(s in shown for s in sentences)
    return hits / len(evidence)


def summary(L: Any, results: list[list[dict]], evs: list[list[str]], cats: list[int]) -> dict:
    per, budget, ids_per_item, toks = L.score(results, evs, cats, [10, 25])
    out: dict[str, Any] = {
        f"R@{k}": round(100 * statistics.mean(v for c in L.CAT for v in per[k][c]), 1)
        for k in (10, 25)
    }
    out.update({f"R@{b}tok": round(100 * statistics.mean(v), 1) for b, v in budget.items()})
    out["by_category@10"] = {
        L.CAT[c]: round(100 * statistics.mean(per[10][c]), 1) for c in L.CAT if per[10][c]
    }
    by_cat: dict[int, list[float]] = {c: [] for c in L.CAT}
    for res, ev, c in zip(results, evs, cats, strict=True):
        got = L.within_budget(res, 1500)
        by_cat[c].append(sum(e in got for e in ev) / len(ev))
    out["by_category@1500tok"] = {
        L.CAT[c]: round(100 * statistics.mean(v), 1) for c, v in by_cat.items() if v
    }
    out["message_ids_per_item"] = round(statistics.mean(ids_per_item), 2) if ids_per_item else 0
    out["tokens@10"] = round(statistics.mean(toks[10]))
    return out


def run_variant(variant: str, data: list[dict], L: Any, cli: list[str], turns: int) -> dict:
    results: dict[str, list[list[dict]]] = {"reverie": [], "bm25": []}
    evs: list[list[str]] = []
    cats: list[int] = []
    turn_evs: list[dict[str, list[str]]] = []  # long: per question, its turns' sentences
    started = time.perf_counter()
    for sample in data:
        qs = list(L.questions(sample))
        if variant == "long":
            lines, where = long_conversation(sample, L, turns)
            qev = [sorted({where[e] for e in ev if e in where}) for _, ev, _ in qs]
            turn_text = {t["dia_id"]: L.turn_text(t) for _, _, ts in L.sessions(sample) for t in ts}
            turn_evs += [
                {
                    e: [
                        _flat(p)
                        for p in re.split(r"(?<=[.!?])\s+", turn_text[e])
                        if len(p.strip()) >= 20
                    ]
                    or [_flat(turn_text[e])]
                    for e in ev
                    if e in turn_text
                }
                for _, ev, _ in qs
            ]
        else:
            with tempfile.NamedTemporaryFile("w+", suffix=".jsonl") as f:
                L.to_jsonl(sample, f.name)
                lines = [json.loads(x) for x in Path(f.name).read_text().splitlines()]
            qev = [ev for _, ev, _ in qs]
        keep = [i for i, ev in enumerate(qev) if ev]
        if variant == "long":
            # Only the questions asked (those with evidence) keep their turns' sentences.
            mine = turn_evs[len(turn_evs) - len(qs) :]
            turn_evs[len(turn_evs) - len(qs) :] = [mine[i] for i in keep]
        questions = [qs[i][0].replace("\n", " ") for i in keep]
        with tempfile.TemporaryDirectory(prefix="locomo-fit-") as tmp:
            jl, qf, home = Path(tmp, "conv.jsonl"), Path(tmp, "q.txt"), str(Path(tmp, "h"))
            jl.write_text("".join(json.dumps(x) + "\n" for x in lines))
            qf.write_text("".join(q + "\n" for q in questions))
            subprocess.run(
                [*cli, "--home", home, "memory", "import", str(jl)], check=True, capture_output=True
            )
            out = subprocess.run(
                [
                    *cli,
                    "--home",
                    home,
                    "memory",
                    "search",
                    "--batch",
                    str(qf),
                    "--json",
                    "--k",
                    "150",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        found = [json.loads(x) for x in out.splitlines() if x.strip()]
        assert len(found) == len(questions), (sample["sample_id"], len(found), len(questions))
        results["reverie"] += found
        items = [(f"{x['speaker']}: {x['content']}", x["id"]) for x in lines]
        results["bm25"] += bm25(items, questions, 150)
        evs += [qev[i] for i in keep]
        cats += [qs[i][2] for i in keep]
    report: dict[str, Any] = {
        "variant": variant,
        "questions": len(evs),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if variant == "long":
        report["turns_per_message"] = turns
    for name, res in results.items():
        report[name] = summary(L, res, evs, cats)
        if variant == "long":
            strict = [shown_within(r, t, 1500) for r, t in zip(res, turn_evs, strict=True) if t]
            report[name]["R@1500tok_shown"] = round(100 * statistics.mean(strict), 1)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", choices=("short", "long", "both"), default="both")
    ap.add_argument("--turns", type=int, default=10, help="turns merged per long message")
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/locomo-tune.json"))
    ap.add_argument("--eval", default=str(ROOT.parent / "shared/eval"))
    ap.add_argument("--reverie", default=f"{sys.executable} -m daemon.cli")
    ap.add_argument("--out", default=str(ROOT / "bench/results/locomo_fit.json"))
    a = ap.parse_args()
    sys.path.insert(0, a.eval)
    import locomo_recall as L  # the eval script's own reading and scoring

    data = json.load(open(a.data))
    variants = ["short", "long"] if a.variant == "both" else [a.variant]
    reports = [run_variant(v, data, L, a.reverie.split(), a.turns) for v in variants]
    for r in reports:
        print(json.dumps(r))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    Path(a.out).write_text(json.dumps(reports, indent=1) + "\n")


if __name__ == "__main__":
    main()
