"""What each numpy embedder costs, side by side, and how it places single words.

    nice -n 10 .venv/bin/python -m bench.embedder_cost [--embedders minilm,e5]
        [--data ../shared/data/locomo-tune.json] [--texts 1500] [--batch 32] [--json-out F]

For each embedder, in a fresh process of its own with one BLAS thread (what a command gets on
two cores): the cold start (import, load, first one-text embed), resident memory after it,
and the encode throughput over the same texts — the first `--texts` turns of the LoCoMo data,
as stored (passages), in batches of `--batch`. Then the cosine of word pairs a long life
asks in other words ("retreat" / "offsite") beside unrelated ones ("banana" / "invoice"):
what the vocabulary's stand-in words (`daemon.memory.related`) have to work with. Recall is
measured by `bench.locomo_folds --embedder NAME`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "locomo-tune.json"

PAIRS = [
    ("retreat", "offsite"),
    ("42k", "marathon"),
    ("driving", "car"),
    ("visitors", "guest"),
    ("cooking", "kitchen"),
    ("sport", "fencing"),
    ("employer", "meetings"),
    ("banana", "invoice"),
    ("piano", "tax"),
]
RELATED = 6  # the first six pairs are related, the rest not

RUNNER = """
import json, resource, sys, time
t0 = time.perf_counter()
c0 = time.process_time()
from daemon.memory.embedders import E5Embedder, MiniLMEmbedder
name, batch, texts_file, pairs = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
emb = MiniLMEmbedder(batch_size=batch) if name == "minilm" else E5Embedder(batch_size=batch)
emb.embed_sync(["warm up"])
cold_s, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
texts = json.load(open(texts_file))
c1, w1 = time.process_time(), time.perf_counter()
emb.embed_sync(texts)
cpu, wall = time.process_time() - c1, time.perf_counter() - w1
cos = []
for a, b in pairs:
    va, vb = emb.embed_sync([a, b])
    cos.append(round(float(va @ vb), 3))
print(json.dumps({
    "embedder": emb.name, "cold_s": round(cold_s, 3), "cold_cpu_s": round(cold_cpu, 3),
    "rss_mb": rss, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    "texts": len(texts), "encode_cpu_s": round(cpu, 2), "encode_wall_s": round(wall, 2),
    "texts_per_cpu_s": round(len(texts) / cpu, 1), "pairs": cos,
}))
"""


def turns(data: Path, limit: int) -> list[str]:
    out: list[str] = []
    for sample in json.loads(data.read_text()):
        conv = sample["conversation"]
        for key in sorted(k for k in conv if k.startswith("session_") and k[8:].isdigit()):
            out += [t["text"] for t in conv[key] if t.get("text")]
    return out[:limit]


def measure(name: str, batch: int, texts_file: Path) -> dict[str, Any]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, name, str(batch), str(texts_file), json.dumps(PAIRS)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if r.returncode != 0:
        raise SystemExit(f"{name}: {r.stderr[-1500:]}")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--embedders", default="minilm,e5")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--texts", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json-out", default="")
    a = ap.parse_args(argv)
    texts = turns(Path(a.data), a.texts)
    texts_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"embedder-cost-{os.getpid()}.json"
    texts_file.write_text(json.dumps(texts))
    try:
        rows = [measure(name, a.batch, texts_file) for name in a.embedders.split(",")]
    finally:
        texts_file.unlink(missing_ok=True)
    print(f"{len(texts)} LoCoMo turns, batch {a.batch}, one BLAS thread, a process each\n")
    print("| embedder | cold start s (CPU s) | RSS after load MB | texts per CPU-s |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['embedder']} | {r['cold_s']} ({r['cold_cpu_s']}) | {r['rss_mb']} "
            f"| {r['texts_per_cpu_s']} |"
        )
    print("\n| words | " + " | ".join(r["embedder"] for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for i, (w1, w2) in enumerate(PAIRS):
        tag = "" if i < RELATED else " (unrelated)"
        print(f"| {w1} / {w2}{tag} | " + " | ".join(f"{r['pairs'][i]:.2f}" for r in rows) + " |")
    for r in rows:
        related, unrelated = r["pairs"][:RELATED], r["pairs"][RELATED:]
        print(
            f"{r['embedder']}: related pairs above every unrelated one: "
            f"{sum(c > max(unrelated) for c in related)}/{len(related)}"
        )
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
