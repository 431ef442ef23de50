"""End-to-end `reverie memory search` latency through the real CLI, cold and warm, and import throughput.

    nice -n 10 .venv/bin/python -m bench.cli_latency                       # 1k and 10k memories
    nice -n 10 .venv/bin/python -m bench.cli_latency --sizes 100000         # the slow, optional 100k run
    nice -n 10 .venv/bin/python -m bench.cli_latency --embedders hash --import-turns 4000

Every figure is the wall time of a real `reverie memory search QUERY --json` subprocess (the
installed program beside the interpreter; `python -m daemon.cli` without one), process start
and exit included. *Cold*: no daemon runs, the CLI opens the database,
loads the persisted vector matrix and (for a vector query) the embedding model itself.
*Warm*: a daemon runs on the home and the CLI forwards the command over the socket (after one
warm-up search that lets the daemon load its model). *Import*: `memory import` of a synthetic
dialogue through the real CLI into a fresh home, embeddings included, in dialogue turns/s.

Homes are built through the real importer. So that 100k memories can be built in minutes, the
vectors for the MiniLM embedders (`minilm` in numpy, `local` in torch) are stand-ins of the
right size (384-d feature hashing stored under the MiniLM model name): search cost depends on
the matrix size, not on the vectors' values, and the query itself is embedded by the real model. Writes JSON to `bench/results/`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.memory_search import write_transcript
from daemon.clock import FakeClock
from daemon.memory.embedders import HashEmbedder, local_available, minilm_available
from daemon.memory.importer import import_file
from daemon.memory.index import MemoryIndex
from daemon.paths import Home
from daemon.settings import MemorySettings
from daemon.store.db import Database

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
QUERIES = [
    "what did we say about the kalo mine",
    "vobe sato ruka",
    "the last time lomi came up",
    "nemi and kasa",
    "tosa vibe damafe",
    "ruko before the trip",
    "quila sena",
    "bemi rado fego",
    "haku jine",
    "lamo nope",
    "tira vose",
    "zabe dafo",
    "guhu jiko",
    "mane pequi",
    "rasa teti",
]


class StandIn(HashEmbedder):
    """384-d feature hashing stored under another model's name (matrix of the real size, built fast)."""

    def __init__(self, name: str, dim: int) -> None:
        super().__init__(dim)
        self.name = name


def embedder_names(choice: str) -> tuple[str, int]:
    # `minilm` (numpy) and `local` (torch) are the same model under the same name: one matrix.
    return ("hash-256", 256) if choice == "hash" else ("all-MiniLM-L6-v2", 384)


def env_for(choice: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "REVERIE_"))}
    env.update(
        PYTHONPATH=str(REPO),
        REVERIE_EMBEDDER=choice,
        REVERIE_LOG_LEVEL="warning",
        HF_HUB_OFFLINE="1",
    )
    return env


async def build_home(root: Path, size: int, embedders: list[str]) -> dict[str, Any]:
    """Import `size` memories' worth of messages and give them vectors for each embedder."""
    home = Home(root)
    home.ensure()
    src = root.parent / f"conv-{size}.jsonl"
    messages = int(size * 3 / 4)  # each message is a chunk, plus a window every third message
    write_transcript(src, messages, seed=size)
    out: dict[str, Any] = {"messages": messages}
    t = time.perf_counter()
    async with await Database.open(home.db_file) as db:
        for i, (name, dim) in enumerate(dict.fromkeys(embedder_names(c) for c in embedders)):
            index = MemoryIndex(
                db, StandIn(name, dim), MemorySettings(), FakeClock(), background=False
            )
            async with index:
                if i == 0:
                    await import_file(src, home=home, index=index)
                await index.flush()
                out["memories"] = len(index.matrix)
        await db.checkpoint()
    out["build_s"] = round(time.perf_counter() - t, 1)
    return out


def reverie() -> list[str]:
    """The installed `reverie` program beside this interpreter (what people run), else `-m`."""
    script = Path(sys.executable).with_name("reverie")
    return [str(script)] if script.exists() else [sys.executable, "-m", "daemon.cli"]


def cli_search(home: Path, query: str, env: dict[str, str], *extra: str) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run(
        [
            *reverie(),
            "memory",
            "search",
            query,
            "--home",
            str(home),
            "--json",
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = (time.perf_counter() - t) * 1000
    if r.returncode != 0:
        raise RuntimeError(f"search failed ({r.returncode}): {r.stderr[-500:]}")
    return elapsed, r.stdout


def timed(home: Path, queries: list[str], env: dict[str, str], *extra: str) -> dict[str, Any]:
    """Wall time of each search, and the CPU time the CLI processes used (less sensitive to load)."""
    walls, cpus = [], []
    for q in queries:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(cli_search(home, q, env, *extra)[0])
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    return {**summary(walls), "cpu_median_ms": round(statistics.median(cpus), 1)}


def round_trip(home: Path, query: str) -> float:
    """Connect, greet and search through the socket from this process: the daemon's share, in ms."""
    from daemon.chat.link import DaemonLink

    t = time.perf_counter()
    link = DaemonLink.connect(home / "run" / "reverie.sock")
    try:
        args = {
            "queries": [query],
            "k": 10,
            "mode": "hybrid",
            "kinds": None,
            "include_retired": False,
            "raw": False,
        }
        frame = link.request("memory_search", args, timeout=60)
    finally:
        link.close()
    if frame.get("type") != "result":
        raise RuntimeError(f"search failed: {frame}")
    return (time.perf_counter() - t) * 1000


def interpreter_start(code: str, runs: int) -> dict[str, float]:
    """Wall time of `python -c CODE`: the floor any CLI invocation pays."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env_for("none"), check=True)
        times.append((time.perf_counter() - t) * 1000)
    return summary(times)


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_ms": round(statistics.median(ordered), 1),
        "min_ms": round(ordered[0], 1),
        "max_ms": round(ordered[-1], 1),
        "n": len(ordered),
    }


class Daemon:
    """A real daemon process on the home, for the warm measurements."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Daemon:
        # The child keeps its own copy of the descriptor; ours closes at once.
        with open(self.home.parent / "daemon.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "daemon.cli", "run", "--home", str(self.home)],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        path = self.home / "run" / "reverie.sock"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the daemon exited ({self.proc.returncode}); see {self.home.parent / 'daemon.log'}"
                )
            if path.exists():
                try:
                    with socket.socket(socket.AF_UNIX) as s:
                        s.settimeout(2)
                        s.connect(str(path))
                        if b"hello" in s.recv(65536):
                            return self
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("the daemon did not become ready")

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def measure_size(root: Path, size: int, embedders: list[str], runs: int) -> dict[str, Any]:
    home = root / f"home-{size}"
    out: dict[str, Any] = {"size": size}
    built = home / "bench-home.json"
    if built.exists() and json.loads(built.read_text()).get("embedders") == embedders:
        # A home kept in --workdir by an earlier run with the same embedders: reuse it.
        out.update(json.loads(built.read_text())["built"])
    else:
        out.update(anyio.run(build_home, home, size, embedders))
        built.write_text(json.dumps({"embedders": embedders, "built": out}))
    rng = random.Random(size)
    queries = [rng.choice(QUERIES) + f" {i}" for i in range(runs)]
    for choice in embedders:
        env = env_for(choice)
        res: dict[str, Any] = {}
        # The first search after the import: it may build and save the matrix (none saved yet).
        res["cold_first_ms"] = round(cli_search(home, "first search", env)[0], 1)
        res["cold_hybrid"] = timed(home, queries, env)
        res["cold_lexical"] = timed(home, queries, env, "--mode", "lexical")
        direct = [cli_search(home, q, env)[1] for q in queries[:3]]
        with Daemon(home, env):
            res["warm_first_ms"] = round(cli_search(home, "warm up", env)[0], 1)
            res["warm_hybrid"] = timed(home, queries, env)
            res["warm_lexical"] = timed(home, queries, env, "--mode", "lexical")
            res["same_hits"] = [cli_search(home, q, env)[1] for q in queries[:3]] == direct
            res["daemon_round_trip"] = summary([round_trip(home, q) for q in queries])
        out[choice] = res
        print(json.dumps({"size": size, "embedder": choice, **res}), file=sys.stderr, flush=True)
    return out


def write_dialogue(path: Path, turns: int) -> None:
    """A dialogue in the import format: sessions of 40 turns, sentences of everyday length."""
    rng = random.Random(11)
    words = (
        "garden boiler sister Lisbon violin tortoise project deadline bakery marathon harbour lantern "
        "orchard canal doctor recipe weekend train meeting holiday parrot budget cello pottery"
    ).split()
    with path.open("w") as fh:
        for i in range(turns):
            sid = f"d{i // 40:04d}"
            text = " ".join(rng.choice(words) for _ in range(rng.randint(6, 24)))
            fh.write(
                json.dumps(
                    {
                        "session": sid,
                        "id": f"{sid}:{i % 40}",
                        "ts": f"2024-{1 + (i // 4000) % 12:02d}-{1 + (i // 40) % 28:02d}T12:00:00Z",
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": f"{text}.",
                    }
                )
                + "\n"
            )


def measure_import(root: Path, turns: int, choice: str) -> dict[str, Any]:
    src = root / f"dialogue-{turns}.jsonl"
    if not src.exists():
        write_dialogue(src, turns)
    home = root / f"import-{choice}-{turns}"
    shutil.rmtree(home, ignore_errors=True)  # a fresh home every time (a kept one has it all)
    t = time.perf_counter()
    r = subprocess.run(
        [
            *reverie(),
            "memory",
            "import",
            str(src),
            "--home",
            str(home),
            "--json",
        ],
        cwd=REPO,
        env=env_for(choice),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    elapsed = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"import failed: {r.stderr[-500:]}")
    counts = json.loads(r.stdout)
    return {
        "embedder": choice,
        "turns": turns,
        "wall_s": round(elapsed, 2),
        "turns_per_s": round(turns / elapsed, 1),
        "embeddings": counts["embeddings"],
        "chunks": counts["chunks"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sizes", default="1000,10000", help="memories per home (add 100000 for the slow run)"
    )
    p.add_argument("--runs", type=int, default=9, help="searches per measurement")
    default = (
        ["hash"]
        + (["minilm"] if minilm_available() else [])
        + (["local"] if local_available() else [])
    )
    p.add_argument(
        "--embedders", default=",".join(default), help="hash, minilm (numpy), local (torch)"
    )
    p.add_argument(
        "--import-turns",
        type=int,
        default=2000,
        help="dialogue turns for the import figure (0: skip)",
    )
    p.add_argument(
        "--workdir", type=Path, help="keep the homes here (default: a temporary directory)"
    )
    args = p.parse_args()
    # Measure the installed steady state: the package's bytecode is current (scripts/setup.sh
    # writes it; an edit since would otherwise be recompiled by every measured process).
    subprocess.run([sys.executable, "-m", "compileall", "-q", "daemon"], cwd=REPO, check=True)
    embedders = [e for e in args.embedders.split(",") if e]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results: dict[str, Any] = {"sizes": [], "import": []}
    results["python_start"] = interpreter_start("pass", args.runs)
    results["forwarder_import"] = interpreter_start("import daemon.cli.forward", args.runs)
    results["load_average_at_start"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for choice in embedders if args.import_turns else []:
            res = measure_import(root, args.import_turns, choice)
            results["import"].append(res)
            print(json.dumps({"import": res}), file=sys.stderr, flush=True)
        for size in sizes:
            results["sizes"].append(measure_size(root, size, embedders, args.runs))
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = (
        "cli_latency"
        + ("_" + "_".join(str(s) for s in sizes) if sizes != [1000, 10000] else "")
        + ".json"
    )
    (RESULTS / name).write_text(json.dumps(results, indent=2))
    print("\nwall-clock medians (CPU time of the CLI process in brackets)")
    print(
        "memories  embedder  cold first  cold hybrid        cold lexical       warm first  warm hybrid      warm lexical     same hits"
    )
    for row in results["sizes"]:
        for choice in embedders:
            r = row[choice]

            def cell(key: str, r: dict[str, Any] = r) -> str:
                return f"{r[key]['median_ms']:>6.0f} ({r[key]['cpu_median_ms']:>4.0f}) ms"

            print(
                f"{row['memories']:>8}  {choice:<8}  {r['cold_first_ms']:>8.0f}ms  {cell('cold_hybrid')}  "
                f"{cell('cold_lexical')}  {r['warm_first_ms']:>8.0f}ms  {cell('warm_hybrid')}  "
                f"{cell('warm_lexical')}  {r['same_hits']}"
            )
    for res in results["import"]:
        print(
            f"import {res['turns']} turns with {res['embedder']}: {res['turns_per_s']} turns/s ({res['wall_s']} s)"
        )
    print(
        f"python -c pass: {results['python_start']['median_ms']} ms; + the forwarder's imports: "
        f"{results['forwarder_import']['median_ms']} ms; daemon round trip (in-process), per size: "
        + ", ".join(
            f"{row['memories']}: {row[e]['daemon_round_trip']['median_ms']} ms"
            for row in results["sizes"]
            for e in embedders
        )
    )
    print(
        f"(medians of {args.runs} runs; load average at start {results['load_average_at_start']}; JSON in {RESULTS / name})"
    )


if __name__ == "__main__":
    main()
